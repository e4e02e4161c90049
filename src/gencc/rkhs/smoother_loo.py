"""Leave-one-out algebra of the RKHS smoother: closed-form LOO residuals, and rank-|S| downdates for leaving a set
S out (of the residuals, the fit's energy and the decoding weights). GCC's robust decode (gencc.codes.robust)
and its low-redundancy decoder (gencc.codes.gcc_low_redundancy) build on it.

G is the leading n x n block of the inverse of the bordered system [[Sigma + n lam I, T], [T^T, 0]]: the LOO
residual of result i is (G y)_i / G_ii, and leaving S out replaces G by its Schur complement
G_RR - G_RS G_SS^-1 G_SR, so every candidate subset costs O(n |S| m), evaluated in batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import linalg

from .smoothing import bordered_matrix

Residuals = Callable[[Sequence[tuple[int, ...]] | np.ndarray], np.ndarray]


def loo_matrix(t: np.ndarray, kernel: Any, lam: float) -> np.ndarray:
    """G with LOO residual_i = (G y)_i / G_ii for the RKHS smoother through points t (any lam >= 0).

    G is the leading n x n block of the inverse of [[Sigma + n lam I, T], [T^T, 0]]: for lam = 0 it gives
    the interpolation error at t_i from the other points; for lam > 0, I - H = n lam G."""
    return loo_and_weights(t, kernel, lam)[0]


def loo_and_weights(t: np.ndarray, kernel: Any, lam: float, z: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray | None]:
    """(G of `loo_matrix`, W^T): with points z, also the smoother's weights W (len(z), n) at z from the same
    factorization (one solve with n + len(z) right-hand sides instead of two solves)."""
    n, q = t.size, kernel.q
    M = bordered_matrix(t, kernel, lam)
    nz = 0 if z is None else z.size
    rhs = np.zeros((n + q, n + nz))
    rhs[:n, :n] = np.eye(n)
    if z is not None:
        rhs[:n, n:] = kernel(t, z)
        rhs[n:, n:] = kernel.null_space(z).T
    try:
        with np.errstate(all="ignore"):
            sol = linalg.solve(M, rhs, assume_a="sym", check_finite=False)[:n]
    except linalg.LinAlgError as err:
        raise ValueError(f"robust decode: the smoother system through {n} points is singular ({err})") from None
    G = sol[:, :n]
    return (G + G.T) / 2, (sol[:, n:] if z is not None else None)


def small_inv(M: np.ndarray) -> np.ndarray:
    """Inverses of a batch of small symmetric matrices (B, s, s): closed form (the adjugate) for s <= 3, where
    a batched LAPACK call costs more in overhead than the arithmetic; np.linalg.inv beyond."""
    s = M.shape[-1]
    with np.errstate(all="ignore"):
        if s == 1:
            return 1.0 / M
        if s == 2:
            a, b, d = M[:, 0, 0], M[:, 0, 1], M[:, 1, 1]
            det = a * d - b * b
            return np.stack([np.stack([d, -b], -1), np.stack([-b, a], -1)], -2) / det[:, None, None]
        if s == 3:
            a, b, c = M[:, 0, 0], M[:, 0, 1], M[:, 0, 2]
            e, f, i = M[:, 1, 1], M[:, 1, 2], M[:, 2, 2]
            A, B, C = e * i - f * f, c * f - b * i, b * f - c * e
            E, F, I_ = a * i - c * c, b * c - a * f, a * e - b * b
            det = a * A + b * B + c * C
            return np.stack([np.stack([A, B, C], -1), np.stack([B, E, F], -1), np.stack([C, F, I_], -1)],
                            -2) / det[:, None, None]
        return np.linalg.inv(M)


def downdate_weights(G: np.ndarray, Wt: np.ndarray, S: np.ndarray) -> np.ndarray:
    """The smoother's weights (as Wt, rows = the n fit points) after leaving the positions S out, for lam = 0:
    removing S from the bordered system is a rank-|S| downdate of its inverse, whose leading block is G, so
    Wt_R - G_RS G_SS^-1 Wt_S (rows R = the rest, in order)."""
    if S.size == 0:
        return Wt
    keep = np.ones(G.shape[0], dtype=bool)
    keep[S] = False
    R = np.flatnonzero(keep)
    return Wt[R] - G[np.ix_(R, S)] @ np.linalg.solve(G[np.ix_(S, S)], Wt[S])


def downdate_residuals(G: np.ndarray, P: np.ndarray) -> Residuals:
    """LOO residuals after excluding subsets, from G and P = G Y: excluding S replaces G by its Schur
    complement G_RR - G_RS G_SS^-1 G_SR (the inverse system without S), batched over subsets of one size.

    A remaining worker next to an excluded one is predicted across a wider gap, so its LOO residual grows
    with no fault of its own; the residual is rescaled by sqrt(G'_jj / G_jj), the ratio of its LOO standard
    deviations under the smoother's Gaussian-process reading with and without the exclusion."""
    d = np.diag(G)

    def residuals(subsets: list[tuple[int, ...]]) -> np.ndarray:
        if len(subsets) == 0 or len(subsets[0]) == 0:
            return (P / d[:, None])[None]
        S = np.asarray(subsets, dtype=np.int64)  # (B, s)
        GS = G[S].transpose(0, 2, 1)  # (B, n, s): G is symmetric, and gathering rows is the cheap way
        GSS = G[S[:, :, None], S[:, None, :]]  # (B, s, s)
        with np.errstate(all="ignore"):
            A = GS @ small_inv(GSS)  # (B, n, s)
            Pn = P[None] - A @ P[S]  # (B, n, m)
            dn = d[None] - np.einsum("bns,bns->bn", A, GS)
            out = Pn / np.sqrt(np.abs(dn) * d[None])[:, :, None]
        out[~np.isfinite(out)] = 0.0
        return out

    return residuals


def pair_residuals(G: np.ndarray, P: np.ndarray) -> Callable[[tuple[int, ...]], np.ndarray]:
    """For an excluded set S: per remaining position j, the rms residual of j predicted with S and j's nearest
    remaining neighbour on either side left out (the larger side), rescaled like `downdate_residuals`: the
    leave-T-out residuals of T are (G_TT)^-1 P_T with covariance (G_TT)^-1 under the GP reading."""
    n = G.shape[0]
    d = np.diag(G)

    def pairs(S: tuple[int, ...]) -> np.ndarray:
        mask = np.ones(n, dtype=bool)
        mask[list(S)] = False
        rest = np.flatnonzero(mask)
        out = np.zeros(n)
        if rest.size < 3:
            return out
        # both sides in one batch: j with its left remaining neighbour, then j with its right one
        j = np.concatenate([rest[1:], rest[:-1]])
        k = np.concatenate([rest[:-1], rest[1:]])
        T = np.column_stack([j, k, np.broadcast_to(np.asarray(S, dtype=np.int64), (j.size, len(S)))])
        GTT = G[T[:, :, None], T[:, None, :]]
        with np.errstate(all="ignore"):
            inv = np.linalg.inv(GTT)
            r = np.einsum("bt,btm->bm", inv[:, 0, :], P[T])  # residual of j (row 0 of T)
            r /= np.sqrt(np.abs(inv[:, 0, 0]) * d[j])[:, None]
        val = np.sqrt(np.mean(r**2, axis=1))
        val[~np.isfinite(val)] = 0.0
        h = rest.size - 1  # first half: j = rest[1:], second: j = rest[:-1]
        out[rest[1:]] = val[:h]
        out[rest[:-1]] = np.maximum(out[rest[:-1]], val[h:])
        return out

    return pairs


def adjacent_pair_residuals(G: np.ndarray, P: np.ndarray) -> Callable[[], np.ndarray]:
    """Per adjacent pair (i, i + 1): both left out together, the smaller of their two rms residuals, each
    rescaled to its LOO standard deviation like `pair_residuals` (n - 1 values)."""

    def adjacent() -> np.ndarray:
        n = G.shape[0]
        if n < 3:
            return np.zeros(max(n - 1, 0))
        d = np.diag(G)
        T = np.column_stack([np.arange(n - 1), np.arange(1, n)])
        with np.errstate(all="ignore"):
            inv = small_inv(G[T[:, :, None], T[:, None, :]])
            e = np.einsum("bst,btm->bsm", inv, P[T])
            sd = np.sqrt(np.abs(np.stack([inv[:, 0, 0], inv[:, 1, 1]], axis=1)) * d[T])
            r = np.sqrt(np.mean(e**2, axis=2)) / sd
        r[~np.isfinite(r)] = 0.0
        return r.min(axis=1)

    return adjacent


def energy_drop(G: np.ndarray, P: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """For subsets S (B, s): how much of the fit's energy sum_c y_c^T G y_c (the squared RKHS norm of the
    interpolant, the Gaussian-process misfit) leaving S out removes: tr(P_S^T G_SS^-1 P_S).
    (Rescaling each residual like `downdate_residuals` was tried: it picks an honest neighbour of a wrong
    result more often.)"""

    C = P @ P.T  # tr(P_S^T G_SS^-1 P_S) = sum of G_SS^-1 * (P P^T)_SS

    def drop(S: np.ndarray) -> np.ndarray:
        if S.shape[1] == 1:
            return np.diag(C)[S[:, 0]] / np.diag(G)[S[:, 0]]
        ix = (S[:, :, None], S[:, None, :])
        with np.errstate(all="ignore"):
            out = np.einsum("bst,bst->b", small_inv(G[ix]), C[ix])
        out[~np.isfinite(out)] = -np.inf
        return out

    return drop


__all__ = ["adjacent_pair_residuals", "downdate_residuals", "downdate_weights", "energy_drop", "loo_and_weights",
           "loo_matrix", "pair_residuals", "small_inv"]
