"""gencc.faults: latency models, persistent stragglers, faults, wrong results and the injected run of one task."""

import threading
import time

import numpy as np
import pytest

from gencc.faults import (
    FAULTS,
    Bimodal,
    Cancelled,
    Faults,
    InjectedFault,
    Pareto,
    PersistentStragglers,
    ShiftedExponential,
    WrongResults,
    draw_delays,
    run_injected,
)
from gencc.faults.adversaries import Replay, Scaled, SignFlip, SmoothBump, SwapTop


# ----- latency models -----------------------------------------------------------------------------------------
def test_shifted_exponential_mean():
    x = ShiftedExponential(shift=0.5, rate=4.0).sample(200_000, np.random.default_rng(0))
    assert x.min() >= 0.5
    assert x.mean() == pytest.approx(0.5 + 1 / 4.0, rel=0.01)


@pytest.mark.parametrize("a", [2.5, 4.0])
def test_pareto_mean_and_tail(a):
    x_m = 0.2
    x = Pareto(x_m=x_m, a=a).sample(400_000, np.random.default_rng(1))
    assert x.min() >= x_m
    assert x.mean() == pytest.approx(x_m * a / (a - 1), rel=0.02)
    assert np.mean(x > 2 * x_m) == pytest.approx(2.0**-a, rel=0.03)


def test_bimodal_mixture_mean():
    rng = np.random.default_rng(3)
    x = Bimodal(p=0.1, factor=5.0, base=2.0).sample(200_000, rng)
    assert set(np.unique(x)) == {2.0, 10.0}
    assert x.mean() == pytest.approx(2.0 * (0.9 + 0.1 * 5.0), rel=0.01)
    y = Bimodal(p=0.2, factor=3.0, base=ShiftedExponential(1.0, 2.0)).sample(200_000, rng)
    assert y.mean() == pytest.approx(1.5 * (0.8 + 0.2 * 3.0), rel=0.01)


def test_bad_latency_parameters_raise():
    with pytest.raises(ValueError):
        ShiftedExponential(shift=-1.0)
    with pytest.raises(ValueError):
        ShiftedExponential(rate=0.0)
    with pytest.raises(ValueError):
        Pareto(a=0.0)
    with pytest.raises(ValueError):
        Bimodal(p=1.5)
    with pytest.raises(ValueError):
        Bimodal(factor=0.5)


def test_draw_delays_from_a_model_an_array_or_nothing():
    rng = np.random.default_rng(0)
    assert draw_delays(None, 4, rng).tolist() == [0.0] * 4
    d = draw_delays(ShiftedExponential(0.1, 10.0), 5, np.random.default_rng(1))
    assert d.shape == (5,) and np.all(d >= 0.1)
    assert draw_delays([0.0, np.inf], 2, rng).tolist() == [0.0, np.inf]
    with pytest.raises(ValueError, match="one delay per worker"):
        draw_delays(np.zeros(3), 2, rng)
    with pytest.raises(ValueError, match="non-negative"):
        draw_delays([-1.0, 0.0], 2, rng)
    with pytest.raises(ValueError, match="LatencyModel"):
        draw_delays(_Sampler(), 2, rng)


class _Sampler:
    def sample(self, n, rng):
        return np.zeros(n)


# ----- persistent stragglers, faults, wrong results ------------------------------------------------------------
def test_persistent_stragglers_slow_fraction_matches():
    s = PersistentStragglers(50, fraction=0.1, factor=10, mean_slow_s=0.5, seed=3)
    ts = np.linspace(0, 200, 2001)
    frac = np.mean([[s.slow(w, t) for t in ts] for w in range(50)])
    assert frac == pytest.approx(0.1, abs=0.02)
    # persistence: consecutive checks 10 ms apart agree almost always
    same = np.mean([s.slow(3, t) == s.slow(3, t + 0.01) for t in ts])
    assert same > 0.95


def test_faults_draw_each_kind_at_its_rate():
    f = Faults(raise_p=0.1, nan_p=0.2, hang_p=0.05, crash_p=0.15)
    rng = np.random.default_rng(0)
    draws = [f.draw(rng) for _ in range(40_000)]
    for kind, p in zip(FAULTS, (0.1, 0.2, 0.05, 0.15), strict=True):
        assert np.mean([d == kind for d in draws]) == pytest.approx(p, abs=0.01)
    assert np.mean([d == "" for d in draws]) == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="sum to at most 1"):
        Faults(raise_p=0.7, nan_p=0.7)


def test_wrong_results_validate_and_corrupt_only_their_workers():
    with pytest.raises(ValueError, match="probability"):
        WrongResults(p=1.5)
    with pytest.raises(ValueError, match="scale"):
        WrongResults(scale=0)
    w = WrongResults(workers=[2], scale=1.0)
    rng = np.random.default_rng(0)
    y = np.arange(1.0, 11.0)
    assert w.corrupt(1, y, rng) == (y, False)
    out, wrong = w.corrupt(2, y, rng)
    assert wrong and np.all(np.isfinite(out)) and not np.allclose(out, y)


def test_wrong_results_come_from_the_adversaries_family():
    y = np.arange(1.0, 5.0)
    out, wrong = WrongResults(workers=[0], model=SignFlip(1)).corrupt(0, y, np.random.default_rng(0))
    assert wrong and np.array_equal(out, -y)
    # the default model is the adversaries' Noise at `scale`, in units of the result's rms
    a, _ = WrongResults(workers=[0], scale=2.0).corrupt(0, y, np.random.default_rng(5))
    z = np.random.default_rng(5).standard_normal(y.shape)
    np.testing.assert_allclose(a, y + 2.0 * np.sqrt(np.mean(y ** 2)) * z)
    with pytest.raises(ValueError, match="corrupts one result on its own"):
        WrongResults(model=SmoothBump(1))
    with pytest.raises(ValueError, match="corrupts one result on its own"):
        WrongResults(model=Replay(1))  # needs the other workers' results


def test_wrong_results_take_the_plausible_families_that_work_on_one_result():
    y = np.array([3.0, -1.0, 7.0, 0.5])
    out, wrong = WrongResults(workers=[0], model=SwapTop(1)).corrupt(0, y, np.random.default_rng(0))
    assert wrong and np.array_equal(out, [7.0, -1.0, 3.0, 0.5])  # the two largest outputs swapped
    out, _ = WrongResults(workers=[0], model=Scaled(1)).corrupt(0, y, np.random.default_rng(1))
    c = out / y  # one factor for the whole result, |log c| in [log 1.1, log 2]
    assert np.allclose(c, c[0]) and np.log(1.1) - 1e-12 <= abs(np.log(abs(c[0]))) <= np.log(2) + 1e-12


# ----- one injected task ----------------------------------------------------------------------------------------
def double(X):
    return 2 * np.asarray(X, dtype=float)


double.batched = True


def test_run_injected_outcomes():
    x = np.ones(3)
    np.testing.assert_array_equal(run_injected(double, x), 2 * x)
    for fault in ("raise", "nan", "hang"):
        with pytest.raises(InjectedFault, match=fault) as e:
            run_injected(double, x, fault=fault, hang_s=0.0)
        assert (e.value.output is not None) == (fault == "nan")
    with pytest.raises(InjectedFault, match="nan"):  # a non-finite output fails too
        run_injected(lambda X: X * np.nan, x, batched=True)
    with pytest.raises(ValueError, match="boom"):  # f's own error passes through
        run_injected(lambda X: (_ for _ in ()).throw(ValueError("boom")), x)


def test_run_injected_waits_busy_time_then_delay_and_stops_on_cancel():
    x = np.ones(2)
    t0 = time.perf_counter()
    run_injected(double, x, extra_s=0.05, slow=2.0, delay=0.05)
    assert time.perf_counter() - t0 >= 0.15  # 0.05 x 2 busy, then the delay
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    t0 = time.perf_counter()
    with pytest.raises(Cancelled):
        run_injected(double, x, delay=np.inf, stop=stop)
    assert time.perf_counter() - t0 < 30  # an inf delay ends only with the cancel
