"""Checked serving with a calibrated robust decode (`ResultCheck.robust`, set at build time on the training inputs),
on a model defined here: an always-wrong plausible worker is located and excluded, honest serving raises no alarm."""

from __future__ import annotations

import numpy as np
import pytest

from gencc import adversaries as adv
from gencc import order_inputs
from gencc.codes import robust, robust_search
from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes, WrongResults
from gencc.serving import Request, make_dispatcher
from gencc.serving._policy.checked import REASON, CheckedDispatcher, ResultCheck

rng = np.random.default_rng(0)
W1, B1, W2 = rng.standard_normal((12, 32)) / 3, rng.uniform(-1, 1, 32), rng.standard_normal((32, 5))
X_TRAIN = rng.normal(size=(600, 12)).astype(np.float32)
X = rng.normal(size=(64, 12)).astype(np.float32)


def f(x):
    """A one-hidden-layer tanh network R^12 -> R^5 (random weights): gencc ships nothing like it."""
    return np.tanh(np.asarray(x, dtype=float).reshape(len(x), -1) @ W1 + B1) @ W2


def serve(wrong, n=900, seed=0):
    """n requests at 250 req/s on 12 virtual workers, some of them slow at times (so some members are decoded),
    checked (gcc, K = 8, N = 12), calibrated on X_TRAIN; returns (requests, dispatcher)."""
    env = VirtualWorkers(12, ServiceTimes(samples=[0.01]), functions={"f": f}, wrong=wrong, seed=seed,
                         stragglers=PersistentStragglers(12, 0.1, 5.0, 0.2, seed=seed))
    d = make_dispatcher("gcc", env, K=8, max_wait=0.02, check="on", check_data=(f, X_TRAIN))
    reqs = [Request(i, X[i % len(X)], i * 0.004) for i in range(n)]
    for r in reqs:
        env.call_later(r.t_arrival, lambda r=r: d.submit(r))
    env.run(until=100)
    return reqs, d


@pytest.fixture(scope="module")
def honest():
    return serve(None)


def test_the_check_calibrates_the_robust_decode_on_the_training_inputs(honest):
    d = honest[1]
    cal = d.check.robust
    assert isinstance(cal, robust.Calibration) and cal.adversaries == 1 and cal.weights.shape == (12,)
    assert cal.false_alarm == 0.01 and cal.runs == 300 and d.robust_need == robust.min_results(d.code, 1)
    # too few groups for the rate, or no rate asked: the decodes stay plain
    code = d.code
    assert ResultCheck.calibrate(code, f, X_TRAIN, groups=200).robust is None
    assert ResultCheck.calibrate(code, f, X_TRAIN, false_alarm=None).robust is None
    with pytest.raises(ValueError, match="false_alarm"):
        ResultCheck.calibrate(code, f, X_TRAIN, false_alarm=1.5)


def test_honest_groups_with_missing_results_raise_no_alarm_at_the_stated_rate(honest):
    """Held-out honest groups (seeds the calibration never drew), 1 to 3 results missing: the calibrated robust
    decode flags nobody in all but a binomial share of them (at most 1% at confidence 0.9: 5 of 200 would be
    exceeded with probability under 0.06 even at that rate)."""
    d = honest[1]
    code, cal = d.code, d.check.robust
    r = np.random.default_rng(123)
    alarms = 0
    for _ in range(200):
        Xg = X_TRAIN[r.choice(len(X_TRAIN), 8, replace=False)]
        Y = f(code.encode(Xg[order_inputs(Xg)]))
        ret = np.sort(r.choice(12, 12 - int(r.integers(1, 4)), replace=False))
        alarms += code.robust_decode(Y[ret], ret, adversaries=1, threshold=cal)[1].size > 0
    assert alarms <= 5


@pytest.mark.parametrize("family", ["scaled", "permute"])
def test_an_always_wrong_plausible_worker_is_located_and_excluded(family):
    reqs, d = serve(WrongResults(workers=[3], model=adv.get_adversary(family, 1)))
    F = f(np.stack([r.x for r in reqs]))
    assert d.quarantined == {3} and d.flags[3] >= d.quarantine and d.failures[REASON] >= d.quarantine
    assert set(d.flags) == {3}  # nobody honest was flagged, by the row check or by the robust decode
    assert all(r.status == 200 for r in reqs)
    t_q = d.quarantined_at[3]
    after = [r for r in reqs if r.t_arrival > t_q]
    assert len(after) >= 100
    for r in after:  # after the quarantine no answer leans on worker 3: exact ones are f itself
        if r.degraded:
            assert all(d._worker(r.group, s) != 3 for s in r.decoded_from)
        else:
            assert np.allclose(r.output, F[r.id], rtol=1e-3, atol=1e-3), r


def test_honest_serving_raises_no_alarm(honest):
    reqs, d = honest
    F = f(np.stack([r.x for r in reqs]))
    assert all(r.status == 200 for r in reqs) and sum(r.degraded for r in reqs) > 0  # some members were decoded
    assert d.flags == {} and d.robust_flags == 0 and not d.quarantined and REASON not in d.failures
    assert all(np.allclose(r.output, F[r.id], rtol=1e-3, atol=1e-3) for r in reqs if not r.degraded)


def test_a_lie_no_row_could_check_is_left_out_of_a_members_decode(honest):
    """The decode of a member whose own result is missing: a coded result far outside what the calibrated
    robust decode accepts is flagged, counted and left out (the decode is the plain one of the rest); a check
    without a calibration decodes plainly from everything."""
    d0 = honest[1]
    code, chk = d0.code, d0.check
    Xg = X[:8][order_inputs(X[:8])]
    Y = f(code.encode(Xg))
    missing, bad = chk.sys[2], chk.coded[1]
    R = [n for n in range(12) if n != missing]
    e = np.random.default_rng(5).standard_normal(Y.shape[1])
    lie = Y[bad] + 10 * chk.robust.threshold * robust_search.robust_spread(Y[R]) * e / np.sqrt(np.mean(e**2))
    for check, caught in ((chk, True), (ResultCheck(code, chk.thresholds, robust=None), False)):
        d = CheckedDispatcher(VirtualWorkers(12, ServiceTimes(samples=[0.01])), code, check, max_wait=0.02)
        g = d.new_group()
        g.results = {n: (lie if n == bad else Y[n]) for n in R}
        Yhat, used = d._decode(g, R)
        assert (bad not in used) == caught and (bad in g.flagged) == caught and d.robust_flags == int(caught)
        rows = np.stack([g.results[n] for n in used])
        np.testing.assert_allclose(Yhat, code.decode(rows, used), atol=1e-9)
    with pytest.raises(ValueError, match="N=16 workers, the code has N=12"):
        ResultCheck(code, chk.thresholds, robust=robust.Calibration(1.0, np.ones(16), 0.01, 300, 0.9, 1))
