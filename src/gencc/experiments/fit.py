"""Fitted rates: least squares on the logs, with a bootstrap interval."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SlopeFit:
    """log y = intercept + slope log x, fitted to the per-x means; [lo, hi] a percentile bootstrap interval.

    `method` says how the bootstrap resampled: `within` (the records at each x, when every x has at least two)
    or `points` (the (x, mean y) pairs, when some x has a single record).
    """

    slope: float
    intercept: float
    lo: float
    hi: float
    n_points: int
    n_records: int
    method: str

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.intercept) * np.asarray(x, dtype=float) ** self.slope


def _line(lx: np.ndarray, ly: np.ndarray) -> tuple[float, float]:
    A = np.column_stack([lx, np.ones_like(lx)])
    (slope, icept), *_ = np.linalg.lstsq(A, ly, rcond=None)
    return float(slope), float(icept)


def fit_slope(x: np.ndarray, y: np.ndarray, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> SlopeFit:
    """Slope of log(mean y at x) against log x over records (x_i, y_i).

    Records with non-finite or non-positive y are dropped (their log is undefined). Needs two distinct x.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.size} and {y.size}")
    ok = np.isfinite(x) & np.isfinite(y) & (y > 0) & (x > 0)
    x, y = x[ok], y[ok]
    ux = np.unique(x)
    if ux.size < 2:
        raise ValueError(f"need records at two or more distinct x to fit a slope, got {ux.size}")
    groups = [y[x == u] for u in ux]
    lx = np.log(ux)
    means = np.array([g.mean() for g in groups])
    slope, icept = _line(lx, np.log(means))
    rng = np.random.default_rng(seed)
    boots = []
    if min(g.size for g in groups) >= 2:
        method = "within"
        for _ in range(n_boot):
            m = np.array([g[rng.integers(0, g.size, g.size)].mean() for g in groups])
            boots.append(_line(lx, np.log(m))[0])
    else:
        method = "points"
        ly = np.log(means)
        for _ in range(n_boot):
            idx = rng.integers(0, ux.size, ux.size)
            if np.unique(idx).size < 2:
                continue
            boots.append(_line(lx[idx], ly[idx])[0])
    a = (1.0 - level) / 2.0
    lo, hi = (np.quantile(boots, [a, 1.0 - a]) if boots else (np.nan, np.nan))
    return SlopeFit(slope, icept, float(lo), float(hi), int(ux.size), int(x.size), method)
