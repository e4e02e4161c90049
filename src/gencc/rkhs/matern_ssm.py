"""Smoother weights for the Matern 3/2 kernel in O(n) per evaluation point, by its state-space (Markov) form.

The Matern 3/2 process with length scale l (k(r) = (1 + a) exp(-a), a = sqrt3 r / l, variance 1) is Markov in the
state x = (f, f'): x(t + h) = A(h) x(t) + w with A(h) = exp(F h), F = [[0, 1], [-c^2, -2 c]], c = sqrt3 / l,
w ~ N(0, Q(h)), Q(h) = P - A P A^T and P = diag(1, c^2) the stationary covariance. Over sorted fit points the
states' joint precision J is block tridiagonal (2 x 2 blocks), so the representer fit of `smoothing` (the
universal-kriging predictor with nugget n lam and a flat prior on the polynomial null space) needs only band
solves:

- lam = 0 (interpolation): f is known at the fit points, so the unknown slopes f' solve a tridiagonal system
  (the f' block of J), and a point between two fit points reads the GP bridge of their two states (at a fit
  point itself the weight row is that point's unit row, exactly);
- lam > 0: the posterior mean of all states solves the band system J + H^T H / (n lam) (bandwidth 3);
- the null space (Legendre P_0..P_{q-1}) by the q x q Schur complement T^T K^{-1} T (universal kriging), with
  K^{-1} T = (J_ff - J_fs J_ss^{-1} J_sf) T from tridiagonal products and the slopes' solve when lam = 0, and from
  a band LU solve (refined once) of the saddle-point system [[J, H^T], [H, -n lam I]] when lam > 0 (q
  right-hand sides either way).

The result equals `smoothing`'s dense bordered solve in exact arithmetic (tested against it and a 40-digit
reference) and reproduces the null space exactly by construction. On GCC's point sets it is as close to the
reference as the dense solve or closer; where a step is far shorter than its neighbours (irregular random points)
the trend's K^{-1} T, and so the fit, carries more rounding than the dense solve's (fitted values 1e-9 apart at
length scale 0.3, more for longer ones), and an isolated near-duplicate pair is refused (`MIN_STEP_RATIO`).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .kernels import Kernel, Matern32


def applies(kernel: Kernel) -> bool:
    """True when `kernel` is exactly the Matern 3/2 kernel this module solves (not a subclass that changes it)."""
    return type(kernel) is Matern32


def _tail3(x: np.ndarray) -> np.ndarray:
    """sum_{k >= 3} x^k / k! without cancellation (a series for small x, expm1 beyond)."""
    out = np.empty_like(x)
    small = x < 0.5
    xs = x[small]
    acc = np.ones_like(xs)  # Horner: (x^3 / 3!) (1 + x/4 (1 + x/5 (... (1 + x/17)))), 1e-18 relative at x = 0.5
    for k in range(17, 3, -1):
        acc *= xs
        acc /= k
        acc += 1.0
    out[small] = acc * xs**3 / 6.0
    xl = x[~small]
    out[~small] = np.expm1(xl) - xl - xl * xl / 2.0
    return out


def transition(h: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    """A(h) and Q(h), each of shape (len(h), 2, 2), for steps h >= 0 (Q in closed form, accurate as h -> 0)."""
    h = np.asarray(h, dtype=float)
    ch = c * h
    e = np.exp(-ch)
    A = np.empty(h.shape + (2, 2))
    A[..., 0, 0] = e * (1.0 + ch)
    A[..., 0, 1] = e * h
    A[..., 1, 0] = -e * c * ch
    A[..., 1, 1] = e * (1.0 - ch)
    x = 2.0 * ch
    e2 = np.exp(-x)
    t3 = _tail3(x)
    Q = np.empty_like(A)
    Q[..., 0, 0] = e2 * t3  # 1 - e^{-x} (1 + x + x^2 / 2)
    Q[..., 0, 1] = Q[..., 1, 0] = e2 * c * x * x / 2.0  # 2 c^3 h^2 e^{-x}
    Q[..., 1, 1] = e2 * c * c * (2.0 * x + t3)  # c^2 (1 - e^{-x} (1 - x + x^2 / 2))
    return A, Q


def _inv2(M: np.ndarray) -> np.ndarray:
    det = M[..., 0, 0] * M[..., 1, 1] - M[..., 0, 1] * M[..., 1, 0]
    out = np.empty_like(M)
    out[..., 0, 0] = M[..., 1, 1] / det
    out[..., 1, 1] = M[..., 0, 0] / det
    out[..., 0, 1] = -M[..., 0, 1] / det
    out[..., 1, 0] = -M[..., 1, 0] / det
    return out


def precision_blocks(ts: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    """(D, E): the diagonal blocks J_ii (n, 2, 2) and the blocks J_{i,i+1} (n-1, 2, 2) of the states' precision
    at sorted distinct points ts."""
    n = ts.size
    A, Q = transition(np.diff(ts), c)
    Qi = _inv2(Q)
    AtQi = np.swapaxes(A, -1, -2) @ Qi
    D = np.zeros((n, 2, 2))
    D[0] = np.diag([1.0, 1.0 / (c * c)])
    D[1:] += Qi
    D[:-1] += AtQi @ A
    return D, -AtQi


def _local_rows(ts: np.ndarray, z: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    """(i, C): f(z) = C[j] . (f_i, f'_i, f_{i+1}, f'_{i+1}) given the states at the fit points around z (the GP
    bridge inside the hull; beyond it the prediction from the nearest state, with i + 1 given a zero weight)."""
    n = ts.size
    i = np.searchsorted(ts, z, side="right") - 1
    C = np.zeros((z.size, 4))
    left, right = i < 0, i >= n - 1
    inside = ~(left | right)
    if n == 1:
        right = ~left
        inside[:] = False
    ii = i[inside]
    h1 = z[inside] - ts[ii]
    h2 = ts[ii + 1] - z[inside]
    A1, Q1 = transition(h1, c)
    A2, _ = transition(h2, c)
    Ah, Qh = transition(ts[ii + 1] - ts[ii], c)
    G = Q1 @ np.swapaxes(A2, -1, -2) @ _inv2(Qh)  # mean = A1 x_i + G (x_{i+1} - A_h x_i)
    Ci = A1 - G @ Ah
    C[inside, 0:2] = Ci[:, 0, :]
    C[inside, 2:4] = G[:, 0, :]
    h = ts[0] - z[left]  # reverse-time prediction from x_0: E[x(z) | x_0] = P A(h)^T P^{-1} x_0
    e = np.exp(-c * h)
    C[left, 0] = e * (1.0 + c * h)
    C[left, 1] = -e * h
    h = z[right] - ts[-1]
    e = np.exp(-c * h)
    C[right, 0] = e * (1.0 + c * h)
    C[right, 1] = e * h
    i = np.where(left, 0, np.where(right, n - 1, i))
    return i, C


def _scatter(i: np.ndarray, C: np.ndarray, cols: tuple[int, int], n: int, stride: int, offset: int) -> np.ndarray:
    """Dense rows (len(i), stride * n) of the local coefficients C[:, cols] placed at states i and i + 1."""
    out = np.zeros((i.size, stride * n))
    r = np.arange(i.size)
    out[r, stride * i + offset] += C[:, cols[0]]
    nxt = i + 1 < n
    out[r[nxt], stride * (i[nxt] + 1) + offset] += C[nxt, cols[1]]
    return out


def _kinv(D: np.ndarray, E: np.ndarray, noise: float, R: np.ndarray) -> np.ndarray:
    """(K + noise I)^{-1} R for the Gram matrix K at the fit points, by a band LU of the saddle-point system
    [[J, H^T], [H, -noise I]] [x; nu] = [0; R] (nu = -(K + noise I)^{-1} R), states ordered (f_i, f'_i, nu_i)."""
    n = D.shape[0]
    m = 3 * n
    lu = 4
    ab = np.zeros((2 * lu + 1, m))  # ab[lu + r - c, c] = M[r, c]
    for a in range(2):
        for b in range(2):
            ab[lu + a - b, b::3] = D[:, a, b]  # (3i + a, 3i + b)
            ab[lu + a - b - 3, 3 + b::3] = E[:, a, b]  # (3i + a, 3(i + 1) + b)
            ab[lu + 3 + b - a, a:m - 3:3] = E[:, a, b]  # (3(i + 1) + b, 3i + a)
    ab[lu - 2, 2::3] = 1.0  # H^T: (3i, 3i + 2)
    ab[lu + 2, 0::3] = 1.0  # H: (3i + 2, 3i)
    ab[lu, 2::3] = -noise
    idx = 3 * np.arange(n)
    rhs = np.zeros((m, R.shape[1]))
    rhs[idx + 2] = R
    lub, piv, info = linalg.lapack.dgbtrf(np.vstack([np.zeros((lu, m)), ab]), lu, lu)
    if info != 0:
        raise linalg.LinAlgError(f"the saddle-point band system is singular (LAPACK info {info})")
    sol = np.zeros_like(rhs)
    res = rhs
    for _ in range(1 + REFINE):  # iterative refinement: the entries span many orders of magnitude near clusters
        step, info = linalg.lapack.dgbtrs(lub, lu, lu, res, piv)
        sol += step
        res = rhs - _band_matvec(ab, lu, sol)
    return -sol[idx + 2]


#: steps of iterative refinement of the saddle-point solve (each a band residual and one more band solve)
REFINE = 1


def _band_matvec(ab: np.ndarray, lu: int, x: np.ndarray) -> np.ndarray:
    """M @ x for M in LAPACK general band storage ab[lu + i - j, j] = M[i, j] (lu sub- and superdiagonals)."""
    m = ab.shape[1]
    out = np.zeros_like(x)
    for d in range(-lu, lu + 1):  # M[i, i + d] = ab[lu - d, i + d]
        lo, hi = max(0, -d), min(m, m - d)
        if hi <= lo:
            continue
        out[lo:hi] += ab[lu - d, lo + d:hi + d, None] * x[lo + d:hi + d]
    return out


#: a step between sorted fit points under this fraction of a neighbouring step (an isolated near-duplicate pair)
#: makes the state precision's entries span more orders of magnitude than a double carries (measured: 3e-10 off
#: the dense solve at a ratio of 1.5e-3, 2e-7 at 1.5e-4): `matern32_weights` refuses it and the caller solves dense.
#: Smoothly varying steps (Chebyshev points of any size) are unaffected.
MIN_STEP_RATIO = 1e-3


def matern32_weights(t: np.ndarray, z: np.ndarray, kernel: Matern32, lam: float = 0.0) -> np.ndarray:
    """W (len(z), len(t)) of `smoothing.smoother_weights` for a Matern 3/2 kernel, by band solves.

    `t` distinct (any order), `z` any points, lam >= 0 as in `smoother_weights` (the nugget is n lam). Raises
    ValueError where a band system is singular or the result is not finite (points too close together): the
    caller then uses the dense solve.
    """
    t = np.asarray(t, dtype=float).ravel()
    z = np.asarray(z, dtype=float).ravel()
    n = t.size
    is_sorted = bool(np.all(t[1:] > t[:-1]))
    order = np.arange(n) if is_sorted else np.argsort(t, kind="stable")
    ts = t if is_sorted else t[order]
    if n > 1 and not np.all(np.diff(ts) > 0):
        raise ValueError("fit points must be distinct; got repeated points")
    if n > 2:
        h = np.diff(ts)
        nb = np.maximum(np.r_[h[1:], 0.0], np.r_[0.0, h[:-1]])  # the larger neighbouring step
        if np.min(h / nb) < MIN_STEP_RATIO:
            raise ValueError(f"two of these {n} fit points are {np.min(h):.3g} apart, a step under "
                             f"{MIN_STEP_RATIO:g} of its neighbour's: the band system loses accuracy there")
    c = np.sqrt(3.0) / kernel.length_scale
    noise = n * lam
    with np.errstate(divide="raise", over="raise", invalid="raise", under="ignore"):
        try:
            D, E = precision_blocks(ts, c)
            i, C = _local_rows(ts, z, c)
            if noise == 0:
                solve = _slope_solver(D, E)
                W = _interpolate(D, E, i, C, n, solve)
            else:
                W = _smooth(D, E, i, C, n, noise)
            if kernel.q:
                T = kernel.null_space(ts)
                B = _kinv_exact(D, E, solve, T) if noise == 0 else _kinv(D, E, noise, T)  # (K + n lam I)^{-1} T
                G = T.T @ B
                W += (kernel.null_space(z) - W @ T) @ np.linalg.solve(G, B.T)
        except (FloatingPointError, np.linalg.LinAlgError, linalg.LinAlgError) as err:
            raise ValueError(f"the Matern 3/2 band system is singular for these {n} points ({err})") from None
    if not np.all(np.isfinite(W)):
        raise ValueError(f"the Matern 3/2 band solve is not finite for these {n} points")
    if is_sorted:
        return W
    out = np.empty_like(W)
    out[:, order] = W
    return out


def _slope_solver(D: np.ndarray, E: np.ndarray):
    """x -> J_ss^{-1} x (in place) for the slopes' tridiagonal precision block J_ss, factored once (LDL^T)."""
    d, e = D[:, 1, 1], E[:, 1, 1]
    if d.size == 1:
        return lambda x: x / d[0]
    pttrf, pttrs = linalg.get_lapack_funcs(("pttrf", "pttrs"), (d,))
    df, ef, info = pttrf(d, e)
    if info != 0:
        raise linalg.LinAlgError(f"the slopes' tridiagonal system is not positive definite (info {info})")

    def solve(x: np.ndarray) -> np.ndarray:
        out, status = pttrs(df, ef, x, overwrite_b=1)
        if status != 0:
            raise linalg.LinAlgError(f"the slopes' tridiagonal solve failed (info {status})")
        return out

    return solve


def _slopes_from_values(D: np.ndarray, E: np.ndarray, R: np.ndarray) -> np.ndarray:
    """J_sf @ R: (slope i, value i) = D[i, 1, 0]; (slope i, value i+1) = E[i, 1, 0]; (slope i+1, value i) =
    E[i, 0, 1]."""
    out = D[:, 1, 0, None] * R
    out[:-1] += E[:, 1, 0, None] * R[1:]
    out[1:] += E[:, 0, 1, None] * R[:-1]
    return out


def _kinv_exact(D: np.ndarray, E: np.ndarray, solve, R: np.ndarray) -> np.ndarray:
    """K^{-1} R for the noiseless Gram matrix: the values' marginal precision J_ff - J_fs J_ss^{-1} J_sf (all
    tridiagonal), so q columns cost O(n)."""
    X = solve(np.asfortranarray(_slopes_from_values(D, E, R)))
    out = D[:, 0, 0, None] * R
    out[:-1] += E[:, 0, 0, None] * R[1:]
    out[1:] += E[:, 0, 0, None] * R[:-1]
    # minus J_fs X = (J_sf)^T X: (value j) gets D[j,1,0] X[j] + E[j-1,1,0] X[j-1] + E[j,0,1] X[j+1]
    out -= D[:, 1, 0, None] * X
    out[1:] -= E[:, 1, 0, None] * X[:-1]
    out[:-1] -= E[:, 0, 1, None] * X[1:]
    return out


def _interpolate(D: np.ndarray, E: np.ndarray, i: np.ndarray, C: np.ndarray, n: int, solve) -> np.ndarray:
    """Rows of the zero-mean interpolant: f known at the fit points, the slopes s = -J_ss^{-1} J_sf f, and
    f(z) = a . f + b . s; by symmetry W = A - X^T J_sf with X = J_ss^{-1} B^T, solved only for rows with b != 0
    (at a fit point b = 0 and the row is that point's unit row)."""
    nz = i.size
    active = np.flatnonzero((C[:, 1] != 0) | (C[:, 3] != 0))
    na = active.size
    if na:
        ia, Ca = i[active], C[active]
        rhs = np.zeros((n, na), order="F")  # B^T
        cols = np.arange(na)
        rhs[ia, cols] = Ca[:, 1]
        nxt = ia + 1 < n
        rhs[ia[nxt] + 1, cols[nxt]] += Ca[nxt, 3]
        Xt = solve(rhs).T  # C-ordered (na, n)
        # -X^T J_sf, with J_sf (slope i, value i) = D[i, 1, 0], (i, i+1) = E[i, 1, 0], (i+1, i) = E[i, 0, 1]
        S = Xt * -D[:, 1, 0]
        if n > 1:
            tmp = np.multiply(Xt[:, :-1], E[:, 1, 0])
            S[:, 1:] -= tmp
            np.multiply(Xt[:, 1:], E[:, 0, 1], out=tmp)
            S[:, :-1] -= tmp
    if na == nz:
        W = S
    else:
        W = np.zeros((nz, n))
        if na:
            W[active] = S
    r = np.arange(nz)
    W[r, i] += C[:, 0]
    nxt = i + 1 < n
    W[r[nxt], i[nxt] + 1] += C[nxt, 2]
    return W


def _smooth(D: np.ndarray, E: np.ndarray, i: np.ndarray, C: np.ndarray, n: int, noise: float) -> np.ndarray:
    """Rows of the zero-mean smoother with nugget `noise`: the states' posterior mean solves (J + H^T H / noise)
    x = H^T y / noise, so by symmetry W = X_f^T / noise with (J + H^T H / noise) X = L^T, L the local rows."""
    m = 2 * n
    ab = np.zeros((4, m))  # lower band storage, bandwidth 3: ab[r - c, c] = M[r, c]
    idx = 2 * np.arange(n)

    def put(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        keep = rows >= cols
        ab[(rows - cols)[keep], cols[keep]] = vals[keep]

    for a in range(2):
        for b in range(2):
            put(idx + a, idx + b, D[:, a, b] + (1.0 / noise if a == b == 0 else 0.0))
            put(idx[1:] + b, idx[:-1] + a, E[:, a, b])
    L = np.zeros((i.size, m))
    L[:, :] = _scatter(i, C, (0, 2), n, 2, 0) + _scatter(i, C, (1, 3), n, 2, 1)
    X = linalg.solveh_banded(ab, L.T, lower=True, check_finite=False)
    return X[idx].T / noise
