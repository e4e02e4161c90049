"""Linear-smoother weights for penalised least squares in an RKHS (docs/design.md section 3), and lam selection.

Fitting u to (t_i, v_i) and evaluating it at points z is a linear map v -> W(z) v. Every code in gencc is
built from such weight matrices, so this module is the numerical heart of the package:

- a dense path for any kernel: one bordered (n + q) solve with the representer theorem;
- an O(n) banded path (the Reinsch form) for the cubic smoothing spline, used automatically for large n;
- lam chosen by generalised or leave-one-out cross-validation, pooled over output columns.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
from scipy import linalg

from ._validate import check_nonneg
from .kernels import Kernel, get_kernel

#: the cubic spline uses the banded Reinsch solve from this many points on: it is O(n) and, unlike the dense
#: bordered solve (ill-conditioned for clustered points), accurate at any size
BANDED_THRESHOLD = 3
#: lam selection uses an O(n^3) eigendecomposition; beyond this many points pass a number instead
SELECT_MAX_POINTS = 3000

LamSpec = float | Literal["gcv", "loo"]


def smoother_weights(
    t: np.ndarray,
    z: np.ndarray,
    kernel: str | Kernel = "cubic",
    lam: float = 0.0,
    method: Literal["auto", "dense", "banded"] = "auto",
) -> np.ndarray:
    """Weights W of shape (len(z), len(t)) with u(z) = W @ v for the fit of u to (t, v).

    u minimises (1/n) sum_i ||u(t_i) - v_i||^2 + lam ||P u||_H^2; lam = 0 interpolates. `t` must be
    distinct points; `z` any points (outside the hull of t a cubic spline extends linearly).
    """
    k = get_kernel(kernel)
    t = np.asarray(t, dtype=float).ravel()
    z = np.asarray(z, dtype=float).ravel()
    lam = _check_lam(lam)
    n = t.size
    if n < max(k.q, 1):
        raise ValueError(f"need at least {max(k.q, 1)} points to fit with kernel {k.name} "
                         f"(its null space has dimension {k.q}); got {n}")
    if np.unique(t).size != n:
        raise ValueError("fit points must be distinct; got repeated points")
    if method not in ("auto", "dense", "banded"):
        raise ValueError(f"unknown smoother method {method!r}; choose auto, dense or banded")
    if method == "banded" and not k.is_cubic_spline:
        raise ValueError(f"the banded path exists only for the cubic spline kernel, not {k.name}")
    use_banded = method == "banded" or (method == "auto" and k.is_cubic_spline and n >= BANDED_THRESHOLD)
    if use_banded:
        return cubic_spline_weights(t, z, lam)
    return _dense_weights(t, z, k, lam)


def _check_lam(lam: float) -> float:
    return check_nonneg("lam", lam)  # type: ignore[return-value]


def bordered_matrix(t: np.ndarray, k: Kernel, lam: float) -> np.ndarray:
    """The representer system's matrix [[Sigma + n lam I, T], [T^T, 0]] for fit points t ((n+q) x (n+q))."""
    n, q = t.size, k.q
    M = np.zeros((n + q, n + q))
    M[:n, :n] = k(t, t) + n * lam * np.eye(n)
    T = k.null_space(t)
    M[:n, n:] = T
    M[n:, :n] = T.T
    return M


def _dense_weights(t: np.ndarray, z: np.ndarray, k: Kernel, lam: float) -> np.ndarray:
    n = t.size
    M = bordered_matrix(t, k, lam)
    rhs = np.vstack([k(t, z), k.null_space(z).T])
    try:
        # Gram matrices of smooth kernels are ill-conditioned by nature; the bordered solve stays accurate
        # for the fitted values (checked against scipy's splines in the tests), so the warning is noise.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", linalg.LinAlgWarning)
            sol = linalg.solve(M, rhs, assume_a="sym")
    except linalg.LinAlgError as err:
        raise ValueError(f"smoother system is singular for these {n} points ({err}); the points may be too "
                         "close together or too few to determine the null space") from None
    return sol[:n].T


def cubic_spline_weights(t: np.ndarray, z: np.ndarray, lam: float = 0.0) -> np.ndarray:
    """Cubic smoothing-spline weights in O(n len(z)) by the Reinsch form (Green and Silverman, ch. 2).

    With h_i = t_{i+1} - t_i, the band matrices Q (n x n-2) and R (n-2 x n-2) give second derivatives
    gamma = A^{-1} Q^T y with A = R + alpha Q^T Q, alpha = n lam, and fitted values g = y - alpha Q gamma.
    The value at z is a^T g + b^T gamma for sparse a, b, so its weight row is a + Q A^{-1} (b - alpha Q^T a).
    """
    t = np.asarray(t, dtype=float).ravel()
    z = np.asarray(z, dtype=float).ravel()
    order = np.argsort(t)
    ts = t[order]
    n = ts.size
    if n < 2:
        raise ValueError(f"a cubic spline needs at least 2 points, got {n}")
    h = np.diff(ts)
    if np.any(h <= 0):
        raise ValueError("fit points must be distinct; got repeated points")
    alpha = n * _check_lam(lam)
    nz = z.size
    a = np.zeros((nz, n))  # weights on fitted values g
    b = np.zeros((nz, n))  # weights on second derivatives gamma at every knot (ends are 0)
    rows = np.arange(nz)
    i = np.clip(np.searchsorted(ts, z, side="right") - 1, 0, n - 2)
    left, right = z < ts[0], z > ts[-1]
    inside = ~(left | right)
    # inside [t_i, t_{i+1}]: the cubic in Green and Silverman's eq. (2.5)
    ri, ii = rows[inside], i[inside]
    zi = z[inside]
    hi = h[ii]
    u, v = zi - ts[ii], ts[ii + 1] - zi
    a[ri, ii] = v / hi
    a[ri, ii + 1] = u / hi
    b[ri, ii] = -u * v * (1.0 + v / hi) / 6.0
    b[ri, ii + 1] = -u * v * (1.0 + u / hi) / 6.0
    # outside: linear extension with the end slope g'(t_1) = (g_2 - g_1)/h_1 - h_1 gamma_2 / 6
    rl, d = rows[left], z[left] - ts[0]
    a[rl, 0] = 1.0 - d / h[0]
    a[rl, 1] = d / h[0]
    b[rl, 1] = -d * h[0] / 6.0
    rr, d = rows[right], z[right] - ts[-1]
    a[rr, n - 1] = 1.0 + d / h[-1]
    a[rr, n - 2] = -d / h[-1]
    b[rr, n - 2] = d * h[-1] / 6.0
    W = a.copy()
    if n > 2:
        Qt_a = _qt_apply(h, a.T)  # (n-2, nz)
        rhs = b[:, 1:-1].T - alpha * Qt_a
        ab = _reinsch_band(h, alpha)
        gamma = linalg.solveh_banded(ab, rhs, lower=False)
        W += _q_apply(h, gamma).T
    out = np.empty_like(W)
    out[:, order] = W
    return out


def _qt_apply(h: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Q^T y for y of shape (n, c): (y_{j-1} - y_j)/h_{j-1} + (y_{j+1} - y_j)/h_j at interior knots."""
    d = np.diff(y, axis=0) / h[:, None]
    return d[1:] - d[:-1]


def _q_apply(h: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Q g for g of shape (n-2, c), giving (n, c)."""
    n = h.size + 1
    out = np.zeros((n, g.shape[1]))
    out[:-2] += g / h[:-1, None]
    out[1:-1] -= g * (1.0 / h[:-1] + 1.0 / h[1:])[:, None]
    out[2:] += g / h[1:, None]
    return out


def _reinsch_band(h: np.ndarray, alpha: float) -> np.ndarray:
    """Upper band storage (3 rows) of A = R + alpha Q^T Q, symmetric positive definite pentadiagonal."""
    m = h.size - 1  # interior knots
    inv = 1.0 / h
    r0 = (h[:-1] + h[1:]) / 3.0
    r1 = h[1:-1] / 6.0
    q_mid = -(inv[:-1] + inv[1:])  # Q[j, j] for interior column j
    d0 = r0 + alpha * (inv[:-1] ** 2 + q_mid**2 + inv[1:] ** 2)
    d1 = r1 + alpha * (q_mid[:-1] * inv[1:-1] + inv[1:-1] * q_mid[1:])
    d2 = alpha * inv[1:-2] * inv[2:-1] if m > 2 else np.zeros(0)
    ab = np.zeros((3, m))
    ab[2] = d0
    ab[1, 1:] = d1
    ab[0, 2:] = d2
    return ab


def select_lam(
    t: np.ndarray,
    Y: np.ndarray,
    kernel: str | Kernel = "cubic",
    criterion: Literal["gcv", "loo"] = "gcv",
) -> float:
    """Choose lam for fitting Y (n, ...) at points t by GCV or leave-one-out CV, pooled over all columns.

    One eigendecomposition of the penalised block (O(n^3)), then every lam costs O(n^2): the grid search
    and its bounded refinement are cheap. Pooled means one lam for all output columns, never per column.
    """
    if criterion not in ("gcv", "loo"):
        raise ValueError(f"unknown lam criterion {criterion!r}; choose 'gcv' or 'loo' or pass a number")
    k = get_kernel(kernel)
    t = np.asarray(t, dtype=float).ravel()
    n = t.size
    Y = np.asarray(Y, dtype=float).reshape(n, -1) if np.size(Y) else np.zeros((n, 0))
    if n > SELECT_MAX_POINTS:
        raise ValueError(f"lam selection by {criterion} is limited to {SELECT_MAX_POINTS} points (got {n}); "
                         "pass a numeric lam for larger fits")
    if n <= k.q + 1:
        return 0.0  # the fit is determined by the null space: nothing to smooth
    T = k.null_space(t)
    if k.q:
        Qfull, _ = linalg.qr(T)
        Q2 = Qfull[:, k.q:]
    else:
        Q2 = np.eye(n)
    B = Q2.T @ k(t, t) @ Q2
    e, V = linalg.eigh((B + B.T) / 2)
    e = np.clip(e, 0.0, None)
    U = Q2 @ V
    P2 = np.sum((U.T @ Y) ** 2, axis=1)  # pooled energy per eigendirection
    U2 = U**2
    scale = max(float(e.max()), 1e-300) / n

    def score(loglam: float) -> float:
        nl = n * 10.0**loglam
        s = nl / (e + nl)
        if criterion == "gcv":
            rss = float(np.sum(s**2 * P2))
            return (rss / n) / (np.sum(s) / n) ** 2
        resid = U @ (s[:, None] * (U.T @ Y))
        diag = U2 @ s
        return float(np.mean((resid / diag[:, None]) ** 2))

    lo, hi = np.log10(scale) - 14, np.log10(scale) + 2
    grid = np.linspace(lo, hi, 49)
    scores = np.array([score(g) for g in grid])
    j = int(np.argmin(scores))
    a, b = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    from scipy import optimize  # here, not at import: scipy.optimize alone costs `import gencc` ~0.2 s

    res = optimize.minimize_scalar(score, bounds=(a, b), method="bounded", options={"xatol": 1e-3})
    best = res.x if res.fun <= scores[j] else grid[j]
    return float(10.0**best)
