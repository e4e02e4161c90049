"""Slope fitting: recovers known slopes, agrees with numpy.polyfit, bootstrap intervals cover the truth."""

from __future__ import annotations

import numpy as np
import pytest

from gencc.experiments import fit_slope


def test_recovers_known_slope_like_polyfit() -> None:
    rng = np.random.default_rng(1)
    N = np.repeat([20, 40, 80, 160, 320, 640], 8).astype(float)
    y = 5.0 * N**-3.0 * np.exp(0.2 * rng.normal(size=N.size))
    fit = fit_slope(N, y, n_boot=500)
    ux = np.unique(N)
    means = np.array([y[N == u].mean() for u in ux])
    ref_slope, ref_icept = np.polyfit(np.log(ux), np.log(means), 1)
    assert fit.slope == pytest.approx(ref_slope, abs=1e-10)
    assert fit.intercept == pytest.approx(ref_icept, abs=1e-9)
    assert fit.method == "within" and fit.n_points == 6 and fit.n_records == N.size
    assert fit.lo <= -3.0 <= fit.hi
    assert fit.hi - fit.lo < 0.5
    assert fit.predict(np.array([100.0]))[0] == pytest.approx(np.exp(ref_icept) * 100.0**ref_slope)


def test_exact_power_law_and_point_bootstrap() -> None:
    N = np.array([10.0, 20, 40, 80])
    fit = fit_slope(N, 2.0 * N**-1.5, n_boot=200)
    assert fit.slope == pytest.approx(-1.5) and fit.method == "points"
    assert fit.lo == pytest.approx(-1.5) and fit.hi == pytest.approx(-1.5)


def test_drops_undefined_logs_and_needs_two_x() -> None:
    fit = fit_slope([1, 2, 4, 4], [1.0, 0.25, 0.0, np.nan], n_boot=50)
    assert fit.slope == pytest.approx(-2.0) and fit.n_records == 2
    with pytest.raises(ValueError, match="two or more"):
        fit_slope([1, 1], [1.0, 2.0])
