"""GCC's bounded reading of large gaps: where many neighbouring workers are missing, the interpolating fit's rows
are replaced by a bounded linear reading of the results (docs/design.md section 3, issue 33).

The kernel fit through the returned results extrapolates its trend into a large gap (an edge above all, where
Chebyshev points cluster and a few returned workers beyond the gap fix a steep slope); Berrut's rational reading
and the straight line between the gap's two returned ends stay within the results' range. A row of D_F for a data
point alpha_k inside a gap of at least `min_gap` missing workers (or beyond the outermost returned worker) is
the mean of the two, read around the least-squares trend of all the results in the fit's null space (so D_F
still reproduces that null space, e.g. affine functions, exactly): still one fixed linear map per pattern.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .berrut import berrut_weights

#: a gap this many consecutive missing workers wide (or any gap beyond the outermost returned one) is bridged
MIN_GAP = 3


def min_gap(K: int, N: int) -> int:
    """The smallest gap GCC bridges: MIN_GAP missing workers, and at least as many as there are workers per data
    point (N / K, rounded up): a narrower gap holds at most one data point, where the fit stays accurate."""
    return max(MIN_GAP, -(-N // K))


def gap_missing(returned: np.ndarray, t: np.ndarray, z: np.ndarray, N: int) -> np.ndarray:
    """For each point z, how many consecutive workers are missing in the gap of the returned points `t` (sorted,
    the positions of the sorted worker indices `returned` of N) that holds z: 0 when z is a returned point; beyond
    the outermost returned worker, the workers missing past it."""
    t = np.asarray(t, dtype=float)
    z = np.asarray(z, dtype=float)
    n = t.size
    j = np.searchsorted(t, z)  # t[j - 1] < z <= t[j]
    left = returned[np.clip(j - 1, 0, n - 1)]
    right = returned[np.clip(j, 0, n - 1)]
    missing = np.where(j == 0, returned[0], np.where(j == n, N - 1 - returned[-1], right - left - 1))
    on = np.isclose(t[np.clip(j, 0, n - 1)], z, rtol=0.0, atol=1e-12)
    return np.where(on, 0, missing)


def bridge_rows(t: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Rows (len(z), len(t)) of the bounded reading at z: the mean of Berrut's rational interpolant and the
    straight line between the returned points that bracket z (the nearest returned result beyond the hull).
    Every row sums to 1 and reproduces constants."""
    t = np.asarray(t, dtype=float)
    z = np.asarray(z, dtype=float)
    n = t.size
    L = np.zeros((z.size, n))
    j = np.searchsorted(t, z)
    rows = np.arange(z.size)
    below, above = j == 0, j >= n
    L[rows[below], 0] = 1.0
    L[rows[above], n - 1] = 1.0
    mid = ~(below | above)
    if mid.any():
        jm = j[mid]
        w = (z[mid] - t[jm - 1]) / (t[jm] - t[jm - 1])
        L[rows[mid], jm - 1] = 1.0 - w
        L[rows[mid], jm] = w
    return 0.5 * (berrut_weights(t, z) + L)


def bridge_gaps(D: np.ndarray, returned: np.ndarray, t: np.ndarray, z: np.ndarray, N: int,
                min_gap: int = MIN_GAP, null_space: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """D (len(z), len(t)) with the rows of points z in a gap of at least `min_gap` missing workers (between two
    returned workers or beyond the outermost one) replaced by `bridge_rows` (a copy when any row changes).

    With `null_space` (points -> (n, q) basis, a kernel's) the bridged rows read the results' deviation from their
    least-squares trend in that space and add the trend back: R + (Phi(z) - R Phi(t)) Phi(t)^+, exact on it."""
    missing = gap_missing(returned, t, z, N)
    n = np.asarray(t).size
    rows = np.flatnonzero(missing >= min_gap)
    if rows.size == 0 or n < 2:
        return D
    D = np.array(D, dtype=float, copy=True)
    zr = np.asarray(z, dtype=float)[rows]
    R = bridge_rows(t, zr)
    if null_space is not None:
        Pt = null_space(np.asarray(t, dtype=float))
        if Pt.shape[1] and np.linalg.matrix_rank(Pt) == Pt.shape[1]:
            R = R + (null_space(zr) - R @ Pt) @ np.linalg.pinv(Pt)
    D[rows] = R
    return D
