"""Wrong-result checks on the serving path: the calibrated row check, verification by re-execution, quarantine."""

from __future__ import annotations

import numpy as np
import pytest

from gencc import BACC, GCC, order_inputs
from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes, WrongResults
from gencc.serving import Service, make_dispatcher
from gencc.serving._policy.checked import REASON, CheckedDispatcher, ResultCheck
from gencc.serving._policy.sim import simulate_load

from .serving_helpers import serve_until_quarantined


@pytest.fixture(scope="module")
def cnn():
    from gencc.workloads import load

    return load("digits-cnn", progress=False)


@pytest.fixture(scope="module")
def gcc_check(cnn):
    code = GCC(8, 12, decoder="interpolate")
    return code, ResultCheck.calibrate(code, cnn.f, cnn.X_train, groups=150)


def test_residuals_are_the_coded_result_minus_the_linear_reading_of_its_members(gcc_check, cnn):
    code, chk = gcc_check
    X = cnn.X_test[:8]
    Y = cnn.f(code.encode(X))
    res = chk.residuals(dict(enumerate(Y)))
    E = code.encoding_matrix
    for c, n in enumerate(chk.coded):  # brute force: the kept entries of E's row, summed by hand
        row = E[n] * (np.abs(E[n]) >= 0.05 * np.abs(E[n]).max())
        reading = sum(row[k] * Y[chk.sys[k]] for k in range(8))
        assert res[c] == pytest.approx(np.linalg.norm(Y[n] - reading), rel=1e-9)
    some = {n: Y[n] for n in range(12) if n != chk.sys[chk.support[0][0]]}  # a member of row 0 missing
    assert np.isnan(chk.residuals(some)[0]) and np.isfinite(chk.residuals(some)[-1])


def test_calibrated_threshold_passes_honest_groups_and_fails_a_corrupted_result(gcc_check, cnn):
    code, chk = gcc_check
    rng = np.random.default_rng(0)
    honest_fail = caught = 0
    for t in range(40):
        X = cnn.X_test[rng.choice(len(cnn.X_test), 8, replace=False)]
        X = X[order_inputs(X)]  # as the serving groups (and the calibration) order them
        Y = dict(enumerate(cnn.f(code.encode(X))))
        honest_fail += bool(chk.failing(Y))
        n = chk.coded[t % 4]
        Y[n] = Y[n] + 5 * np.sqrt(np.mean(Y[n] ** 2)) * rng.standard_normal(Y[n].shape)
        caught += t % 4 in chk.failing(Y)
    assert honest_fail <= 2 and caught == 40


def test_result_check_rejects_codes_without_systematic_workers_and_bad_thresholds():
    with pytest.raises(ValueError, match="systematic"):
        ResultCheck(BACC(4, 6), np.ones(2))
    with pytest.raises(ValueError, match="one positive number per coded slot"):
        ResultCheck(GCC(4, 6), np.ones(3))


def _sim(cnn, make, wrong, rate=150.0, duration=6.0):
    env = VirtualWorkers(16, ServiceTimes(0.04), PersistentStragglers(16, 0.1, 10, 1.0, seed=1), functions={"f": cnn.f},
                 wrong=wrong, seed=0)
    box = {}

    def mk(e):
        box["d"] = make(e)
        return box["d"]

    reqs = simulate_load(mk, env, rate=rate, duration=duration, inputs=cnn.X_test)
    return reqs, box["d"], env


@pytest.mark.slow
def test_strict_check_outvotes_and_quarantines_a_bad_worker_and_never_answers_its_results(gcc_check, cnn):
    code, chk = gcc_check
    reqs, d, env = _sim(cnn, lambda e: CheckedDispatcher(e, code, chk, strict=True, max_wait=0.05),
                        WrongResults(workers=[3], scale=5.0))
    F = cnn.f(np.stack([r.x for r in reqs]))
    assert all(r.status == 200 for r in reqs)
    exact = [r for r in reqs if not r.degraded]
    assert all(np.allclose(r.output, F[r.id], rtol=1e-3, atol=1e-3) for r in exact)
    assert d.quarantined == {3} and d.confirmed[3] >= 2 and d.failures[REASON] >= 2
    wrong_out = {id(t.output) for t in env.executed if t.wrong}
    assert wrong_out, "the bad worker never ran a task"
    for r in reqs:  # no decode used a wrong result: each was flagged and excluded
        if r.degraded:
            assert not any(id(r.group.results[s]) in wrong_out for s in r.decoded_from)
    late = [t for t in env.executed if t.worker == 3 and t.t_start > max(x.t_done for x in reqs if x.group is not None
                                                                          and x.group.flagged) + 1.0]
    assert late == []  # quarantined: no task ran on it a second after the last flag


def test_all_honest_workers_are_never_quarantined_and_answers_are_exact(gcc_check, cnn):
    code, chk = gcc_check
    reqs, d, _ = _sim(cnn, lambda e: CheckedDispatcher(e, code, chk, max_wait=0.05), None)
    F = cnn.f(np.stack([r.x for r in reqs]))
    assert all(r.status == 200 for r in reqs) and not d.quarantined and not d.confirmed
    assert all(np.allclose(r.output, F[r.id], rtol=1e-3, atol=1e-3) for r in reqs if not r.degraded)
    assert d.failed_checks <= 0.02 * len(reqs) / 8  # honest groups rarely fail a row


def test_make_dispatcher_validates_checks(cnn):
    env = VirtualWorkers(12, ServiceTimes(0.01))
    with pytest.raises(ValueError, match="unknown check"):
        make_dispatcher("gcc", env, check="maybe", check_data=(cnn.f, cnn.X_train))
    with pytest.raises(ValueError, match="eager coded schemes"):
        make_dispatcher("uncoded", env, check="on", check_data=(cnn.f, cnn.X_train))
    with pytest.raises(ValueError, match="eager coded schemes"):
        make_dispatcher("gcc-hedge", env, check="on", check_data=(cnn.f, cnn.X_train))
    with pytest.raises(ValueError, match="check_data"):
        make_dispatcher("gcc", env, check="on")
    d = make_dispatcher("sgcc", env, check="on", check_data=(cnn.f, cnn.X_train))
    assert isinstance(d, CheckedDispatcher) and d.name == "sgcc-checked"


def test_service_on_local_threads_quarantines_a_worker_returning_garbage(cnn):
    svc = Service.build("digits-cnn", "gcc", workers=16, K=8, service_ms=3.0, max_wait_ms=10, check="strict",
                        wrong=WrongResults(workers=[5], scale=5.0))
    serve_until_quarantined(svc, cnn.X_test[:48], timeout=60)
    assert svc.dispatcher.quarantined == {5} and svc.dispatcher.failures[REASON] >= 2


def test_sgcc_parity_checked_decodes_only_parity_recoveries_and_catches_a_bad_worker(cnn):
    from gencc.serving.parity import calibrate_sgcc, sgcc_parity_code
    from gencc.workloads import load_parity

    parity = load_parity("digits-cnn", 2, progress=False)
    code = sgcc_parity_code(8, 12, parity, calibrate_sgcc(cnn, 8, 12, parity))
    chk = ResultCheck.calibrate(code, cnn.f, cnn.X_train, groups=150, order=False)
    env = VirtualWorkers(16, ServiceTimes(0.04), PersistentStragglers(16, 0.1, 10, 1.0, seed=1),
                 functions={"f": cnn.f, "parity": parity}, wrong=WrongResults(workers=[3], scale=5.0), seed=0)
    box = {}

    def mk(e):
        box["d"] = CheckedDispatcher(e, code, chk, order=False, max_wait=0.05)
        return box["d"]

    reqs = simulate_load(mk, env, rate=150.0, duration=6.0, inputs=cnn.X_test)
    d = box["d"]
    assert all(r.status == 200 for r in reqs) and d.quarantined == {3}
    for r in reqs:  # a decoded member's coding group returned its coded result: a parity recovery
        if r.degraded:
            g = r.group
            assert d.cover[g.pos[g.members.index(r)]][0] in r.decoded_from


def test_rare_wrong_results_anywhere_quarantine_nobody(gcc_check, cnn):
    code, chk = gcc_check
    reqs, d, env = _sim(cnn, lambda e: CheckedDispatcher(e, code, chk, strict=True, max_wait=0.05),
                        WrongResults(p=0.01))
    assert sum(t.wrong for t in env.executed) > 5 and d.confirmed  # some were caught
    assert not d.quarantined and all(r.status == 200 for r in reqs)
