"""Linear-smoother weights for penalised least squares in an RKHS (docs/design.md section 3), and lam selection.

Fitting u to (t_i, v_i) and evaluating it at points z is a linear map v -> W(z) v. Every code in gencc is
built from such weight matrices, so this module is the numerical heart of the package:

- a dense path for any kernel: one bordered (n + q) solve with the representer theorem;
- an O(n) banded path (the Reinsch form) for the cubic smoothing spline, used automatically for large n;
- an O(n) state-space path for the Matern 3/2 kernel (`matern_ssm`), used automatically for large n;
- lam chosen by generalised or leave-one-out cross-validation, pooled over output columns.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
from scipy import linalg

from .._util.validate import check_nonneg
from . import matern_ssm
from .kernels import Kernel, get_kernel

#: the cubic spline uses the banded Reinsch solve from this many points on: it is O(n) and, unlike the dense
#: bordered solve (ill-conditioned for clustered points), accurate at any size
BANDED_THRESHOLD = 3
#: the Matern 3/2 kernel uses its state-space band solve (`matern_ssm`) from this many fit points on: measured on
#: GCC decodes (one BLAS thread), the dense solve is faster up to about 130 points, the band solve 1.2x faster at
#: 144 and 1.8x at 180 (8x at 230 as the dense solve goes O(n^3))
MATERN_BANDED_THRESHOLD = 160
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
    if method == "banded" and not (k.is_cubic_spline or matern_ssm.applies(k)):
        raise ValueError(f"the banded path exists only for the cubic spline and Matern 3/2 kernels, not {k.name}")
    if k.is_cubic_spline and (method == "banded" or (method == "auto" and n >= BANDED_THRESHOLD)):
        return cubic_spline_weights(t, z, lam)
    if matern_ssm.applies(k) and (method == "banded" or (method == "auto" and n >= MATERN_BANDED_THRESHOLD)):
        try:
            return matern_ssm.matern32_weights(t, z, k, lam)  # type: ignore[arg-type]
        except ValueError:
            if method == "banded":
                raise
            # points so close together that the band system is singular: the dense solve decides
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


#: `smoother_weights` on its dense path evaluates at more than this many times n + q points, and at more than
#: MANY_POINTS_MIN points, by the inverse's columns (one solve with many right-hand sides costs more there; below,
#: the direct solve keeps its last bits: row sums of an encoder exact to 1e-15 instead of 1e-9)
MANY_POINTS = 2
MANY_POINTS_MIN = 4096


def _dense_weights(t: np.ndarray, z: np.ndarray, k: Kernel, lam: float) -> np.ndarray:
    """W by the bordered solve: with the evaluation points as right-hand sides when they are few; when they are
    many (an encoder for N workers), as [k(z, t), P(z)] @ C with C the first n columns of M^{-1} (M symmetric),
    from one solve with n + q right-hand sides and then one product per block of points into the result."""
    n = t.size
    M = bordered_matrix(t, k, lam)
    if z.size <= max(MANY_POINTS * (n + k.q), MANY_POINTS_MIN):
        return _bordered_solve(M, np.vstack([k(t, z), k.null_space(z).T]), n)[:n].T
    C = _bordered_solve(M, np.eye(n + k.q)[:, :n], n)
    W = np.empty((z.size, n))
    step = max(1, _BLOCK_ENTRIES // (n + k.q))
    for a in range(0, z.size, step):
        zc = z[a:a + step]
        np.matmul(k(zc, t), C[:n], out=W[a:a + step])
        if k.q:
            W[a:a + step] += k.null_space(zc) @ C[n:]
    return W


def _bordered_solve(M: np.ndarray, rhs: np.ndarray, n: int) -> np.ndarray:
    try:
        # Gram matrices of smooth kernels are ill-conditioned by nature; the bordered solve stays accurate
        # for the fitted values (checked against scipy's splines in the tests), so the warning is noise.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", linalg.LinAlgWarning)
            return linalg.solve(M, rhs, assume_a="sym")
    except linalg.LinAlgError as err:
        raise ValueError(f"smoother system is singular for these {n} points ({err}); the points may be too "
                         "close together or too few to determine the null space") from None


def cubic_spline_weights(t: np.ndarray, z: np.ndarray, lam: float = 0.0) -> np.ndarray:
    """Cubic smoothing-spline weights in O(n len(z)) by the Reinsch form (Green and Silverman, ch. 2).

    With h_i = t_{i+1} - t_i, the band matrices Q (n x n-2) and R (n-2 x n-2) give second derivatives
    gamma = A^{-1} Q^T y with A = R + alpha Q^T Q, alpha = n lam, and fitted values g = y - alpha Q gamma.
    The value at z is a^T g + b^T gamma for sparse a, b (two entries each), so its weight row is
    a + Q A^{-1} (b - alpha Q^T a): A is factored once, and the rows are solved a block at a time straight into
    the result, so the memory beyond the (len(z), n) result stays a few MiB whatever n is.
    """
    t = np.asarray(t, dtype=float).ravel()
    z = np.asarray(z, dtype=float).ravel()
    n = t.size
    if n < 2:
        raise ValueError(f"a cubic spline needs at least 2 points, got {n}")
    order = None if bool((t[1:] > t[:-1]).all()) else np.argsort(t)
    ts = t if order is None else t[order]
    h = np.diff(ts)
    if np.any(h <= 0):
        raise ValueError("fit points must be distinct; got repeated points")
    alpha = n * _check_lam(lam)
    cols, av, bv = _local_weights(ts, h, z)
    nz = z.size
    if n > 2:
        W = _solved_rows(nz, h, alpha, cols, av, bv)
    else:
        W = np.zeros((nz, n))
    rows = np.arange(nz)
    W[rows, cols[:, 0]] += av[:, 0]
    W[rows, cols[:, 1]] += av[:, 1]
    if order is None:
        return W
    out = np.empty_like(W)
    out[:, order] = W
    return out


def _local_weights(ts: np.ndarray, h: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(columns (nz, 2), weights a on fitted values, weights b on second derivatives) of the spline's value at
    each z: the cubic of Green and Silverman's eq. (2.5) inside [t_i, t_{i+1}], the linear extension with the
    end slope g'(t_1) = (g_2 - g_1)/h_1 - h_1 gamma_2 / 6 (and its mirror) outside."""
    n = ts.size
    i = np.clip(np.searchsorted(ts, z, side="right") - 1, 0, n - 2)
    cols = np.stack([i, i + 1], axis=1)
    av = np.zeros((z.size, 2))
    bv = np.zeros((z.size, 2))
    left, right = z < ts[0], z > ts[-1]
    inside = ~(left | right)
    ii = i[inside]
    hi = h[ii]
    u, v = z[inside] - ts[ii], ts[ii + 1] - z[inside]
    av[inside, 0], av[inside, 1] = v / hi, u / hi
    bv[inside, 0] = -u * v * (1.0 + v / hi) / 6.0
    bv[inside, 1] = -u * v * (1.0 + u / hi) / 6.0
    d = z[left] - ts[0]  # cols (0, 1) there: i is clipped to 0
    av[left, 0], av[left, 1] = 1.0 - d / h[0], d / h[0]
    bv[left, 1] = -d * h[0] / 6.0
    d = z[right] - ts[-1]  # cols (n-2, n-1)
    av[right, 0], av[right, 1] = -d / h[-1], 1.0 + d / h[-1]
    bv[right, 0] = d * h[-1] / 6.0
    return cols, av, bv


#: the rows solved at once by `cubic_spline_weights` hold about this many entries (two buffers of them)
_BLOCK_ENTRIES = 1 << 18


def _solved_rows(nz: int, h: np.ndarray, alpha: float, cols: np.ndarray, av: np.ndarray, bv: np.ndarray
                 ) -> np.ndarray:
    """W (nz, n) with W[j] = (Q A^{-1} (b_j - alpha Q^T a_j))^T for every row j, a block of rows at a time (n >= 3).

    A row whose right-hand side is zero (interpolation, lam = 0, at a fit point: the value there is that point's
    own) has a zero solution: it is left as it is in a zero-filled W and only the other rows are solved, so a
    decoder whose rows mostly sit on returned workers costs O(n) for each of the few others."""
    n = h.size + 1
    m = n - 2
    hinv = 1.0 / h
    R, C, V = _interior_rhs(hinv, alpha, cols, av, bv)
    nonzero = V != 0
    R, C, V = R[nonzero], C[nonzero], V[nonzero]
    active = np.unique(R)  # rows with a nonzero right-hand side, ascending
    if active.size == nz:
        W = np.empty((nz, n))
    else:
        W = np.zeros((nz, n))
        R = np.searchsorted(active, R)  # rows renumbered among the active ones
    na = active.size
    if not na:
        return W
    solve = _band_solver(h, alpha)
    step = max(1, _BLOCK_ENTRIES // n)
    rhs = np.empty((min(step, na), m))
    ep = np.zeros((min(step, na), n + 1))  # e_k = (gamma_{k+1} - gamma_k) / h_k, padded with a zero each side
    buf = None if active.size == nz else np.empty((min(step, na), n))
    bounds = np.searchsorted(R, np.arange(0, na + step, step))
    for blk, r0 in enumerate(range(0, na, step)):
        r1 = min(r0 + step, na)
        c = r1 - r0
        g = rhs[:c]
        g.fill(0.0)
        lo, hi = bounds[blk], bounds[blk + 1]
        np.add.at(g, (R[lo:hi] - r0, C[lo:hi]), V[lo:hi])
        gam = solve(g.T)  # an F-ordered view: solved in place
        if not np.shares_memory(gam, g):
            g[...] = gam.T
        e = ep[:c]
        np.multiply(g[:, 0], hinv[0], out=e[:, 1])
        np.subtract(g[:, 1:], g[:, :-1], out=e[:, 2:n - 1])
        e[:, 2:n - 1] *= hinv[1:m]
        np.multiply(g[:, -1], -hinv[-1], out=e[:, n - 1])
        if buf is None:
            np.subtract(e[:, 1:], e[:, :-1], out=W[r0:r1])  # (Q gamma)_k = e_k - e_{k-1}
        else:
            np.subtract(e[:, 1:], e[:, :-1], out=buf[:c])
            W[active[r0:r1]] = buf[:c]
    return W


def _band_solver(h: np.ndarray, alpha: float):
    """x -> A^{-1} x (in place where LAPACK allows) for A = R + alpha Q^T Q, factored once: by LDL^T of the
    tridiagonal R when alpha = 0 (interpolation; about 2.5x faster than the band Cholesky), else by the band
    Cholesky of the pentadiagonal A."""
    ab = _reinsch_band(h, alpha)
    if alpha == 0 and h.size > 2:  # (LAPACK's wrapper of pttrs wants an off-diagonal of length >= 1)
        pttrf, pttrs = linalg.get_lapack_funcs(("pttrf", "pttrs"), (ab,))
        d, e, info = pttrf(ab[2], ab[1, 1:])
        factor = lambda x: pttrs(d, e, x, overwrite_b=1)  # noqa: E731
    else:
        pbtrf, pbtrs = linalg.get_lapack_funcs(("pbtrf", "pbtrs"), (ab,))
        cb, info = pbtrf(ab, lower=0)
        factor = lambda x: pbtrs(cb, x, lower=0, overwrite_b=1)  # noqa: E731
    if info != 0:
        raise ValueError(f"the cubic spline's band system is not positive definite (LAPACK info {info}); the fit "
                         "points may be too close together")

    def solve(x: np.ndarray) -> np.ndarray:
        out, status = factor(x)
        if status != 0:
            raise ValueError(f"the cubic spline's band solve failed (LAPACK info {status})")
        return out

    return solve


def _interior_rhs(hinv: np.ndarray, alpha: float, cols: np.ndarray, av: np.ndarray, bv: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sparse right-hand sides b_j - alpha Q^T a_j over the interior knots as (row, interior index, value),
    sorted by row. Q^T a at interior knot j (index j - 1) is a_{j-1}/h_{j-1} - a_j (1/h_{j-1} + 1/h_j)
    + a_{j+1}/h_j, so each of the two entries of a reaches at most three of them."""
    n = hinv.size + 1
    nz = cols.shape[0]
    rows = np.repeat(np.arange(nz), 2)
    c, a, b = cols.ravel(), av.ravel(), bv.ravel()
    inner = (c >= 1) & (c <= n - 2)
    R, C, V = [rows[inner]], [c[inner] - 1], [b[inner]]
    if alpha:
        for shift in (-1, 0, 1):  # entry a_c reaches interior knot j = c + shift
            j = c + shift
            ok = (j >= 1) & (j <= n - 2)
            jj = j[ok]
            if shift == 1:  # c = j - 1: a_{j-1} / h_{j-1}
                coef = hinv[jj - 1]
            elif shift == 0:  # c = j: -a_j (1/h_{j-1} + 1/h_j)
                coef = -(hinv[jj - 1] + hinv[jj])
            else:  # c = j + 1: a_{j+1} / h_j
                coef = hinv[jj]
            R.append(rows[ok])
            C.append(jj - 1)
            V.append(-alpha * coef * a[ok])
    R, C, V = np.concatenate(R), np.concatenate(C), np.concatenate(V)
    srt = np.argsort(R, kind="stable")
    return R[srt], C[srt], V[srt]


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
