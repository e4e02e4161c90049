"""Calibrated robust decoding (gencc.codes.robust.calibrate): the scores against a brute-force refit, the clean
threshold, the conformal false-alarm bound, and plausible lies on a model trained here, not one gencc ships."""

import numpy as np
import pytest
from scipy.stats import binom

from gencc import BACC, GCC, LCC, order_inputs
from gencc import adversaries as adv
from gencc.codes import robust, robust_search
from gencc.codes.berrut import berrut_weights
from gencc.rkhs.smoothing import smoother_weights


def trained_model(seed=0):
    """A random-features ridge regression R^5 -> R^4 (tanh features, closed-form fit) on generated data: trained
    in milliseconds, a different architecture from every gencc workload."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((800, 5))
    T = np.column_stack([np.sin(Z[:, 0] + Z[:, 1]), Z[:, 2] * Z[:, 3], np.tanh(2 * Z[:, 4]), np.cos(Z[:, 0])])
    W, b = rng.standard_normal((5, 60)) / 2, rng.uniform(-1, 1, 60)
    H = np.tanh(Z @ W + b)
    C = np.linalg.solve(H.T @ H + 1e-2 * np.eye(60), H.T @ T)

    def f(X):
        return np.tanh(np.asarray(X, dtype=float) @ W + b) @ C

    f.batched = True
    return f, rng.standard_normal((400, 5))


def runs(code, f, pool, n, start=0, S=2):
    """n honest runs (Y, returned) of the code on K ordered inputs from the pool, seeds start..start+n-1."""
    out = []
    for t in range(start, start + n):
        rng = np.random.default_rng(t)
        X = pool[rng.choice(len(pool), code.K, replace=False)]
        X = X[order_inputs(X)]
        ret = np.sort(rng.choice(code.N, code.N - S, replace=False))
        out.append((f(code.encode(X)[ret]), ret))
    return out


@pytest.mark.parametrize("make", [lambda: GCC(8, 24), lambda: BACC(8, 24)])
def test_scores_equal_a_brute_force_refit_without_each_worker(make):
    code = make()
    f, pool = trained_model()
    Y, ret = runs(code, f, pool, 1)[0]
    t = code.beta[ret]
    ref = []
    for i in range(ret.size):  # refit the smoother through the others, evaluate at the left-out point
        rest = np.delete(np.arange(ret.size), i)
        if isinstance(code, GCC):
            w = smoother_weights(t[rest], t[i:i + 1], code.kernel_for(rest.size), 0.0)
        else:
            w = berrut_weights(t[rest], t[i:i + 1])
        ref.append(np.sqrt(np.mean((Y[i] - w @ Y[rest]) ** 2)))
    np.testing.assert_allclose(code._honest_scores(ret, Y), np.array(ref) / robust_search.robust_spread(Y), rtol=1e-6)


@pytest.mark.parametrize("A", [1, 2])
def test_clean_threshold_is_where_the_decode_starts_flagging(A):
    code = GCC(10, 40)
    f, pool = trained_model()
    for Y, ret in runs(code, f, pool, 4):
        c = code._clean_threshold(ret, Y, A)
        assert code.robust_decode(Y, ret, adversaries=A, threshold=c * (1 + 1e-9))[1].size == 0
        assert code.robust_decode(Y, ret, adversaries=A, threshold=c * (1 - 1e-6))[1].size > 0


def test_calibrated_threshold_is_the_conformal_order_statistic_and_holds_its_false_alarm_rate():
    code = GCC(10, 40)
    f, pool = trained_model()
    cal_runs = runs(code, f, pool, 120, start=1000)
    cal = robust.calibrate(code, cal_runs, adversaries=2, false_alarm=0.02, confidence=None)
    crit = np.sort([code._clean_threshold(r, Y, 2) for Y, r in cal_runs])
    k = int(np.ceil(0.98 * 121))
    assert cal.threshold == pytest.approx(crit[k - 1], rel=1e-12) and cal.threshold > crit[k - 1]
    assert cal.runs == 120 and cal.false_alarm == 0.02 and np.all(cal.weights == 1.0) and cal.confidence is None
    # with a confidence: the least k whose false-alarm rate, Beta(n + 1 - k, k), exceeds 2% with probability
    # at most 10%; the same event counted as a binomial (at most n - k of n honest scores above the rate's quantile)
    pac = robust.calibrate(code, cal_runs, adversaries=2, false_alarm=0.02, confidence=0.9)
    kp = int(np.flatnonzero(np.isclose(crit, pac.threshold, rtol=1e-12, atol=0))[0]) + 1
    assert binom.cdf(120 - kp, 120, 0.02) <= 0.1 < binom.cdf(120 - kp + 1, 120, 0.02)
    assert pac.threshold >= cal.threshold and pac.confidence == 0.9
    fresh = runs(code, f, pool, 100)  # seeds disjoint from the calibration's
    alarms = sum(code.robust_decode(Y, r, adversaries=2, threshold=cal)[1].size > 0 for Y, r in fresh)
    assert alarms <= 5  # expected at most 2 of 100 (binomial: P(more than 5) < 2%)


def test_a_calibrated_threshold_catches_plausible_lies_the_default_misses():
    """At N = 80 the honest residuals of a smooth model are far below the default threshold's fraction of
    the spread: a result scaled by 10% to 2x often sits between the two."""
    code = GCC(10, 80)
    f, pool = trained_model()
    cal = robust.calibrate(code, runs(code, f, pool, 60, start=1000), adversaries=1, false_alarm=0.05)
    assert cal.threshold < robust.DEFAULT_THRESHOLD
    caught, caught_default = 0, 0
    for t, (Y, ret) in enumerate(runs(code, f, pool, 12)):
        Yc, bad = adv.Scaled(1).corrupt(Y, ret, np.random.default_rng(t))
        caught += code.robust_decode(Yc, ret, adversaries=1, threshold=cal)[1].tolist() == bad.tolist()
        caught_default += code.robust_decode(Yc, ret, adversaries=1)[1].tolist() == bad.tolist()
    assert caught == 12 and caught_default <= 6


def test_per_worker_weights_are_relative_honest_spreads():
    code = GCC(10, 40)
    f, pool = trained_model()
    cal = robust.calibrate(code, runs(code, f, pool, 90, start=1000), false_alarm=0.05, per_worker=True)
    assert cal.weights.shape == (40,) and np.all(cal.weights > 0) and np.median(cal.weights) == pytest.approx(1.0)
    Y, ret = runs(code, f, pool, 1)[0]
    code.robust_decode(Y, ret, adversaries=1, threshold=cal)  # weights travel through the hooks


def test_bad_calibration_is_a_clear_error():
    code = GCC(10, 40)
    f, pool = trained_model()
    few = runs(code, f, pool, 30)
    with pytest.raises(ValueError, match="needs at least 230 honest runs"):
        robust.calibrate(code, few)  # 1% at confidence 0.9: 0.99^230 < 0.1 < 0.99^229
    with pytest.raises(ValueError, match="needs at least 99 honest runs"):
        robust.calibrate(code, few, confidence=None)
    for bad in (0.0, 1.0, True, "0.9"):
        with pytest.raises(ValueError, match="confidence must be a probability"):
            robust.calibrate(code, few, false_alarm=0.05, confidence=bad)
    for bad in (0.0, 1.0, -0.1, True, "0.01"):
        with pytest.raises(ValueError, match="false_alarm must be a probability"):
            robust.calibrate(code, few, false_alarm=bad)
    cal = robust.calibrate(code, few, false_alarm=0.05, confidence=None)
    Y, ret = few[0]
    with pytest.raises(ValueError, match="for N=40 workers, the code has N=41"):
        GCC(10, 41).robust_decode(Y, ret, adversaries=1, threshold=cal)
    lcc = LCC(3, 12, degree=1)
    with pytest.raises(ValueError, match="exact error correction"):
        robust.calibrate(lcc, [(lcc.encode(np.ones((3, 1))), np.arange(12))] * 30, false_alarm=0.1)


def test_honest_runs_are_jobs_of_the_model_on_its_sample_inputs():
    code = GCC(10, 40)
    f, pool = trained_model()
    got = list(robust.honest_runs(code, f, pool, runs=3, stragglers=2, seed=7, order=order_inputs))
    for (Y, ret), (Yref, rref) in zip(got, runs(code, f, pool, 3, start=7), strict=True):
        np.testing.assert_array_equal(ret, rref)
        np.testing.assert_allclose(Y, Yref)
    with pytest.raises(ValueError, match="at least K=10 sample inputs"):
        next(robust.honest_runs(code, f, pool[:5]))
    with pytest.raises(ValueError, match="stragglers must lie in"):
        next(robust.honest_runs(code, f, pool, stragglers=40))


@pytest.mark.parametrize("false_alarm,confidence", [(0.01, 0.9), (0.005, 0.9), (0.0025, 0.95), (0.01, None)])
def test_runs_needed_is_the_fewest_runs_whose_largest_clean_threshold_meets_the_confidence(false_alarm, confidence):
    """With n runs the largest clean threshold leaves a rate ~ Beta(1, n): P(rate > a) = (1 - a)^n, which must be
    at most 1 - confidence (confidence None: k = ceil((1 - a)(n + 1)) <= n)."""
    n = robust.runs_needed(false_alarm, confidence)
    if confidence is None:
        assert np.ceil((1 - false_alarm) * (n + 1)) <= n < np.ceil((1 - false_alarm) * (n + 2))
    else:
        assert (1 - false_alarm) ** n <= 1 - confidence < (1 - false_alarm) ** (n - 1)
        assert robust.order_statistic(n, false_alarm, confidence) == n


def test_a_calibration_records_its_bound_and_refuses_a_decode_it_never_saw():
    code = GCC(8, 24)
    f, pool = trained_model()
    cal1 = robust.calibrate(code, runs(code, f, pool, 230), adversaries=1)
    cal2 = robust.calibrate(code, runs(code, f, pool, 230), adversaries=2)
    assert (cal1.adversaries, cal2.adversaries) == (1, 2) and cal2.threshold >= cal1.threshold
    Y, ret = runs(code, f, pool, 1, start=5000)[0]
    with pytest.raises(ValueError, match="calibrate with adversaries=3"):
        code.robust_decode(Y, ret, adversaries=3, threshold=cal1)
    for A, cal in ((1, cal1), (1, cal2), (3, cal2)):  # a pair-checking calibration serves A = 1 too (it is higher)
        code.robust_decode(Y, ret, adversaries=A, threshold=cal)
