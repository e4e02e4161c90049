"""GCC's bounded reading of large gaps (`GCC(..., gaps="auto")`, the default, and `gaps="bridge"`): where many
neighbouring workers are missing, the interpolating fit's rows are replaced by a bounded linear reading of the
results (docs/design.md section 3).

The kernel fit through the returned results extrapolates its trend into a large gap (an edge above all, where
Chebyshev points cluster and a few returned workers beyond the gap fix a steep slope); Berrut's rational reading
and the straight line between the gap's two returned ends stay within the results' range. The rows of D_F for the
data points of a gap that holds at least MIN_POINTS of them (between two returned workers or beyond the outermost
one) are the mean of the two, read around the results' least-squares trend in the fit's null space (so D_F still
reproduces that null space, e.g. affine functions, exactly): still one fixed linear map per straggler pattern.
gaps="auto" (`auto_min_points`) bridges only where the fit measured worse: from K >= 16 on, gaps of three or more
data points, and edge gaps of two at redundancy N / K <= 4; in a gap of two data points below those thresholds it
takes, row by row, whichever of the fit's and the bridged row has the smaller L1 norm (the row's Lebesgue function
value: the most that row can amplify an error in the results); elsewhere (and at every K < 16) the fit's rows stay.
Data points erased at an end (no returned result carries them, `erased_ends`) are read half-way to the mean of the
other data points' readings (`shrink_erased_ends`): by gaps="auto" from K = AUTO_MIN_K at N <= AUTO_EDGE_RATIO K,
and by gaps="bridge".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .berrut import berrut_weights

#: a gap of returned workers that holds at least this many data points is bridged (a narrower one holds one
#: data point at most, where the fit stays accurate)
MIN_POINTS = 2
#: gaps="auto" (GCC's default) bridges a gap between two returned workers from this many data points
AUTO_INTERIOR_POINTS = 3
#: ... and a gap beyond the outermost returned worker from MIN_POINTS while N <= this times K (from
#: AUTO_INTERIOR_POINTS otherwise)
AUTO_EDGE_RATIO = 4
#: gaps="auto" bridges nothing below this K: through fewer inputs the fit's worst case was at or below BACC's at
#: every S/N <= 0.2 measured, and bridging a gap of three of ten data points (S/N = 0.25, the rate-worst preset's
#: K = 10, N = 20, S = 5) raised xsinx's worst case by 7% on average
AUTO_MIN_K = 16
#: gaps="auto" compares the fit's and the bridged row by their L1 norms in a gap of this many data points that its
#: thresholds leave to the fit (interior gaps of two; edge gaps of two at N > AUTO_EDGE_RATIO K)
AUTO_COMPARE_POINTS = 2
#: z within this of a returned point sits on it
ON_POINT = 1e-12
#: an erased end data point (`erased_ends`) keeps this weight on its own reading; the rest goes to the mean of the
#: other data points' readings (`shrink_erased_ends`)
EDGE_KEEP = 0.5


def auto_min_points(K: int, N: int) -> tuple[int, int] | None:
    """(interior, edge): the data points a gap must hold for gaps="auto" to bridge it, between two returned
    workers and beyond the outermost one; None (the fit everywhere) for K < AUTO_MIN_K. An interior gap from
    AUTO_INTERIOR_POINTS; an edge gap from MIN_POINTS when N <= AUTO_EDGE_RATIO K (few returned workers beyond an
    edge gap fix the fit's extrapolated trend, and f o u_enc through many inputs is too rough for it), from
    AUTO_INTERIOR_POINTS otherwise (dense returned workers pin the fit's trend at the gap's end; through few
    inputs it extrapolates well: docs/design.md section 3)."""
    if K < AUTO_MIN_K:
        return None
    return AUTO_INTERIOR_POINTS, MIN_POINTS if N <= AUTO_EDGE_RATIO * K else AUTO_INTERIOR_POINTS


def points_in_gap(t: np.ndarray, z: np.ndarray) -> np.ndarray:
    """For each point z, how many of the points z lie in the same open gap of the sorted returned points t (the
    gaps beyond the first and the last included); 0 for a z on a returned point."""
    t = np.asarray(t, dtype=float)
    z = np.asarray(z, dtype=float)
    j = np.searchsorted(t, z)  # t[j - 1] < z <= t[j]
    # on a returned point: either neighbour within ON_POINT (a rounding can put z just above t[j - 1])
    on = (np.abs(t[np.clip(j, 0, t.size - 1)] - z) <= ON_POINT) | (np.abs(t[np.clip(j - 1, 0, t.size - 1)] - z)
                                                                     <= ON_POINT)
    gap = np.where(on, -1, j)
    labels, counts = np.unique(gap, return_counts=True)
    return np.where(on, 0, counts[np.searchsorted(labels, gap)])


def around_trend(R: np.ndarray, t: np.ndarray, z: np.ndarray,
                 null_space: Callable[[np.ndarray], np.ndarray] | None) -> np.ndarray:
    """Rows R (len(z), len(t)) made to read the results' deviation from their least-squares trend in `null_space`
    (points -> (n, q) basis, a kernel's) and add the trend at z back: R + (Phi(z) - R Phi(t)) Phi(t)^+, exact on
    that space. R itself without a null space, or when Phi(t) has not full column rank."""
    if null_space is None:
        return R
    Pt = null_space(t)
    if not Pt.shape[1] or np.linalg.matrix_rank(Pt) != Pt.shape[1]:
        return R
    return R + (null_space(z) - R @ Pt) @ np.linalg.pinv(Pt)


def carriers(t: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Per data point z (in z's order), how many points t lie strictly between its two neighbouring data points
    (beyond the outermost one on an end): the workers whose coded inputs carry it (`GCC.coverage`)."""
    t = np.sort(np.asarray(t, dtype=float))
    z = np.asarray(z, dtype=float)
    order = np.argsort(z, kind="stable")
    s = z[order]
    lo = np.concatenate(([-np.inf], s[:-1]))
    hi = np.concatenate((s[1:], [np.inf]))
    out = np.empty(z.size, dtype=np.int64)
    out[order] = np.searchsorted(t, hi, side="left") - np.searchsorted(t, lo, side="right")
    return out


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


def row_l1(D: np.ndarray) -> np.ndarray:
    """The L1 norm of each row of a linear reading D: its Lebesgue function at that row's point, the most the
    row can amplify a bounded error in the results (max |D y| / max |y| over y, reached at y = sign(row))."""
    return np.abs(np.asarray(D, dtype=float)).sum(axis=1)


def bridge_gaps(D: np.ndarray, t: np.ndarray, z: np.ndarray, min_points: int | tuple[int, int] = MIN_POINTS,
                null_space: Callable[[np.ndarray], np.ndarray] | None = None,
                compare_points: int | None = None) -> np.ndarray:
    """D (len(z), len(t)) with the rows of the points z in a gap of the returned points t that holds at least
    `min_points` of them replaced by `bridge_rows` (a copy when any row changes). `min_points` may be a pair
    (interior, edge): the least for a gap between two returned points and for one beyond the outermost.

    With `null_space` (points -> (n, q) basis, a kernel's) the bridged rows read the results' deviation from their
    least-squares trend in that space and add the trend back: R + (Phi(z) - R Phi(t)) Phi(t)^+, exact on it.

    With `compare_points`, a row in a gap that holds at least that many data points but fewer than `min_points`
    is bridged only where the bridged row's L1 norm (`row_l1`) is below D's: still a fixed map per pattern."""
    t = np.asarray(t, dtype=float)
    inner, edge = (min_points, min_points) if np.isscalar(min_points) else min_points
    j = np.searchsorted(t, np.asarray(z, dtype=float))
    at_edge = (j == 0) | (j >= t.size)
    count = points_in_gap(t, z)
    full = count >= np.where(at_edge, edge, inner)
    some = full | (count >= compare_points) if compare_points is not None else full
    rows = np.flatnonzero(some & (count >= 1))
    if rows.size == 0 or t.size < 2:
        return D
    zr = np.asarray(z, dtype=float)[rows]
    R = around_trend(bridge_rows(t, zr), t, zr, null_space)
    take = full[rows] | (row_l1(R) < row_l1(np.asarray(D, dtype=float)[rows]))
    if not take.any():
        return D
    D = np.array(D, dtype=float, copy=True)
    D[rows[take]] = R[take]
    return D


def erased_ends(t: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Indices into z of the data points erased at an end: from the lowest (and from the highest) data point
    inwards, each with no returned point t strictly between its two neighbouring data points (beyond the outermost
    one on its end), i.e. no returned result whose coded input carries it (`carriers`). Sorted."""
    order = np.argsort(np.asarray(z, dtype=float), kind="stable")
    covered = carriers(t, z)[order] > 0
    n = order.size
    a = int(np.argmax(covered)) if covered.any() else n  # the first covered from below
    b = n - int(np.argmax(covered[::-1])) if covered.any() else n  # one past the last covered
    return np.sort(order[np.r_[0:a, b:n]])


def shrink_erased_ends(D: np.ndarray, t: np.ndarray, z: np.ndarray, keep: float = EDGE_KEEP,
                       null_space: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """D (len(z), len(t)) with the rows of the data points erased at an end (`erased_ends`) moved towards the mean
    of the other rows: keep * row + (1 - keep) * mean (a copy when any row changes). With `null_space` (a kernel's)
    the mean is read around the results' least-squares trend in that space, as `bridge_gaps` reads, so rows that
    reproduce the null space (affine functions, say) still do.

    Why: no result carries an erased data point, so its row can only extrapolate its neighbours' outputs, and at
    an end from one side only; the inputs there are the ordering's last, often the least like their neighbours.
    Half-way to the mean of the other outputs lowered the fixed-fraction preset's worst cells by up to about two
    fifths and left its random cells within a few percent (docs/design.md section 3). The rows still sum to 1
    (constants stay exact)."""
    rows = erased_ends(t, z)
    n = np.asarray(z).size
    if rows.size == 0 or rows.size == n or keep == 1.0:
        return D
    others = np.setdiff1d(np.arange(n), rows)
    D = np.array(D, dtype=float, copy=True)
    M = np.broadcast_to(D[others].mean(axis=0), (rows.size, D.shape[1]))
    M = around_trend(M, np.asarray(t, dtype=float), np.asarray(z, dtype=float)[rows], null_space)
    D[rows] = keep * D[rows] + (1.0 - keep) * M
    return D
