"""The upstreams benchmark's replica model (benchmarks/upstreams.py): its slow periods restart with each draw, the
same for every configuration, and the model sleeps through them (the run itself needs Triton: never in CI)."""

from __future__ import annotations

import time

import numpy as np
import pytest


@pytest.fixture(scope="module")
def ups(load_benchmark):
    return load_benchmark("upstreams")


def test_slow_periods_are_seeded_per_replica_and_draw_and_slow_the_given_share(ups):
    a = ups.slow_periods(3, seed=0, draw=7, slow_fraction=0.1, mean_slow_s=1.0, horizon_s=20_000)
    assert a == ups.slow_periods(3, seed=0, draw=7, slow_fraction=0.1, mean_slow_s=1.0, horizon_s=20_000)
    assert a != ups.slow_periods(3, seed=0, draw=8, slow_fraction=0.1, mean_slow_s=1.0, horizon_s=20_000)
    assert a != ups.slow_periods(4, seed=0, draw=7, slow_fraction=0.1, mean_slow_s=1.0, horizon_s=20_000)
    assert all(s < e for s, e in a) and all(e1 < s2 for (_, e1), (s2, _) in zip(a, a[1:], strict=False))
    lengths = np.array([e - s for s, e in a])
    assert lengths.mean() == pytest.approx(1.0, rel=0.1)  # exponential periods of mean 1 s (about 2,000 of them)
    assert lengths.sum() / a[-1][1] == pytest.approx(0.1, abs=0.02)  # slow a tenth of the time
    assert ups.slow_periods(0, seed=0, draw=0, slow_fraction=0.0) == []


def test_the_model_reads_the_draw_from_its_clock_file_and_sleeps_through_its_slow_periods(ups, tmp_path):
    clock = tmp_path / "clock"
    periods = ups.slow_periods(2, seed=5, draw=11, slow_fraction=0.3, mean_slow_s=1.0)
    inside = next((s + e) / 2 for s, e in periods if e - s > 0.5)  # the middle of a long slow period
    outside = next(e + 0.2 for (s, e), (s2, _) in zip(periods, periods[1:], strict=False) if s2 - e > 0.5)
    f = ups.replica_model(2, service_ms=2.0, slow_fraction=0.3, slow_factor=50.0, mean_slow_s=1.0, seed=5,
                          clock=str(clock))
    X = np.random.default_rng(0).normal(size=(1, ups.D_IN)).astype(np.float32)
    took = {}
    for name, at in (("slow", inside), ("normal", outside)):
        clock.write_text(f"{time.time() - at!r} 11\n")  # the draw started `at` seconds ago
        time.sleep(0.02)  # a new modification time for the second write
        t = time.perf_counter()
        y = f(X)
        took[name] = time.perf_counter() - t
        np.testing.assert_allclose(y, ups.classify(X))
    assert took["slow"] >= 0.1  # 2 ms x 50
    assert took["normal"] < 0.06


@pytest.mark.parametrize(("args", "says"), [
    (["--fronts", "nonsense"], "--fronts takes NAME[+PATCH...]=OPTIONS"),
    (["--loads", "7"], "--loads in (0, 1.2)"),
    (["--fronts", "default+bogus="], "unknown patch 'bogus'"),
])
def test_the_tail_investigation_refuses_bad_input_before_starting_anything(args, says):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "investigations" / "upstreams_tail.py"
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def _raw(load, draws):
    """Rows as the benchmark's `tails` returns them: draws = [{config: latencies}, ...]."""
    return [{"load": load, "config": c, "lat": np.asarray(lat, dtype=float)} for d in draws for c, lat in d.items()]


def test_the_ratio_interval_resamples_whole_draws_paired_across_configurations(ups):
    rng = np.random.default_rng(1)
    a = {c: rng.exponential(m, 1000) for c, m in (("direct", 300.0), ("hedged", 100.0), ("default", 90.0))}
    b = {c: rng.exponential(m, 1000) for c, m in (("direct", 80.0), ("hedged", 120.0), ("default", 150.0))}

    def ratio(ds):  # brute force: pool the draws, p99.9 of each, default over the better of the two others
        p = {c: np.percentile(np.concatenate([d[c] for d in ds]), 99.9) for c in a}
        return p["default"] / min(p["direct"], p["hedged"])

    est, lo, hi = ups.ratio_interval(_raw(0.9, [a, b]), 0.9)
    assert est == pytest.approx(ratio([a, b]))
    # two draws: a resample is (a, a), (b, b) or one of each, each of the first two a quarter of the time, so the
    # interval's ends are the least and the largest of those three ratios
    three = [ratio([a, a]), ratio([b, b]), ratio([a, b])]
    assert lo == pytest.approx(min(three)) and hi == pytest.approx(max(three))
    same = ups.ratio_interval(_raw(0.3, [a, a, a]), 0.3)  # identical draws: every resample gives the estimate
    assert same[0] == pytest.approx(same[1]) == pytest.approx(same[2])


def test_the_ratio_interval_refuses_configurations_with_different_draws(ups):
    rows = _raw(0.6, [{"direct": [1.0], "hedged": [1.0], "default": [1.0]}, {"direct": [1.0], "hedged": [1.0]}])
    with pytest.raises(ValueError, match="same draws"):
        ups.ratio_interval(rows, 0.6)
