"""Robust decoding: locate and exclude up to A workers whose results are wrong but finite (docs/design.md section 9).

A decode mixes every returned result into every estimate, so one wrong result spoils all K answers. The
redundancy beyond what decoding needs lets us find them: predict each returned result from the others
(leave-one-out, LOO) and look for a set S of at most A workers whose removal leaves every remaining result
consistent with the rest.

- Scores are scale-free: a worker's LOO residual (root mean square over the output coordinates) divided by
  the robust spread of the returned results (MAD over workers, pooled over coordinates). Honest residuals of
  a smooth decode are a small fraction of that spread; a result corrupted by a sizeable fraction of the
  signal is not. `threshold` is the boundary (default DEFAULT_THRESHOLD, chosen on all-honest runs).
- The search never removes the top score greedily: an honest neighbour of a wrong result is predicted from
  it and can score higher. It scores every subset of size <= A of a small candidate pool (the top scores
  and their neighbours along the curve) by the LOO residuals of the workers that remain, and keeps the
  smallest set that leaves them all under the threshold (the best one of size A if none does).
- GCC: LOO residuals of any RKHS smoother (any lam) are (G y)_i / G_ii with G the leading block of the
  inverse bordered system; leaving a set S out is a rank-|S| downdate of G (a Schur complement), so every
  candidate subset costs O(n |S| m), evaluated in batches.
- BACC: the Berrut interpolant left one out has a closed form (signs re-alternate past the gap).
- LCC: exact Berlekamp-Welch error correction over the reals (see `berlekamp_welch`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from itertools import combinations
from math import comb
from typing import Any

import numpy as np
from scipy import linalg

from .._arrays import check_finite, is_torch, to_numpy
from ..smoothing import bordered_matrix
from .base import Code

#: a remaining worker whose LOO residual exceeds this fraction of the results' robust spread is inconsistent
DEFAULT_THRESHOLD = 0.5
#: candidate pool: this many top-scoring workers per allowed adversary (plus their neighbours)
POOL_PER_ADVERSARY = 2
#: a passing set whose remaining worst score is above UPGRADE_LEVEL x threshold gives way to a larger set
#: that cuts that score by UPGRADE_FACTOR
UPGRADE_LEVEL, UPGRADE_FACTOR = 0.5, 1.5
#: subsets of one size scored exhaustively up to this many; beyond, a beam of the BEAM best of the size below
MAX_SUBSETS, BEAM = 1500, 24
#: at most this many top scorers (or 4 per adversary) enter the candidate pool (before neighbours are added)
POOL_MAX = 12
#: with A >= 2 and no LOO score above the threshold, two adjacent workers that lie together (and so vouch for
#: each other) still start the search when both stay above this fraction of the threshold with the pair left
#: out (all-honest digits CNN, 300 runs: at most 0.37 at N = 40, 0.07 at N = 80; such pairs: 0.47 and more)
PAIR_TRIGGER = 0.85
#: G matrices kept per code (one per returned set, least recently used dropped first)
LOO_CACHE_SIZE = 64
#: GCC's closed-form LOO needs the inverse of the bordered system: limited to this many results
MAX_POINTS = 3000

Residuals = Callable[[Sequence[tuple[int, ...]] | np.ndarray], np.ndarray]


def robust_spread(Y: np.ndarray) -> float:
    """Robust scale of the results Y (n, m): MAD over workers per coordinate (x 1.4826), root mean square
    over coordinates. A minority of arbitrary rows cannot move it far."""
    mad = 1.4826 * np.median(np.abs(Y - np.median(Y, axis=0)), axis=0)
    s = float(np.sqrt(np.mean(mad**2)))
    if not s > 0:
        s = float(np.sqrt(np.mean(Y**2)))
    return s if s > 0 else 1.0


def search(residuals: Residuals, n: int, adversaries: int, scale: float, threshold: float,
           drop: Callable[[np.ndarray], np.ndarray], refine: bool = False, neighbours: int = 1,
           pairs: Callable[[tuple[int, ...]], np.ndarray] | None = None,
           adjacent: Callable[[], np.ndarray] | None = None) -> tuple[np.ndarray, bool]:
    """The smallest set S (|S| <= adversaries) of positions whose exclusion leaves every remaining LOO score
    below `threshold`. `residuals(subsets)` gives (len(subsets), n, m) LOO residuals of the remaining
    positions (excluded rows are ignored); `drop(S)`, for an array of subsets (B, s), how much each exclusion
    explains (larger is better). Per size, the subset with the largest drop is tested (with `refine`, the
    one among the BEAM largest drops that leaves the smallest summed squared remaining scores). Returns (S sorted,
    consistent): consistent is False when no set of size <= adversaries passes (then S is the best set of
    the largest size). `pairs(S)`, when given, adds a check of the accepted set: each remaining worker
    predicted with its nearest remaining neighbour also left out (rms residual per position, 0 for S), so
    two colluding neighbours cannot vouch for each other. `adjacent()`, when given, scores each adjacent pair
    (i, i + 1) left out together (the smaller of its two residuals): with A >= 2, a pair above PAIR_TRIGGER x
    threshold starts the search (and joins the pool) even when every LOO score is below the threshold."""
    base = _scores(residuals([()])[0], scale)
    extra = np.zeros(0, dtype=np.int64)
    if base.max() < threshold and adjacent is not None and adversaries >= 2:
        hot = np.flatnonzero(adjacent() / scale >= PAIR_TRIGGER * threshold)
        extra = np.union1d(hot, hot + 1)
    if (base.max() < threshold and extra.size == 0) or adversaries == 0:
        return np.zeros(0, dtype=np.int64), bool(base.max() < threshold)
    pool = np.union1d(_pool(base, adversaries, neighbours, n, threshold), extra)
    found: tuple[tuple[int, ...], float] | None = None
    best: tuple[int, ...] = ()
    beam: np.ndarray | None = None
    for size in range(1, min(adversaries, pool.size) + 1):
        subsets = _subsets(pool, size, beam)
        gain = drop(subsets)
        beam = subsets[np.argsort(-gain, kind="stable")[:BEAM]]
        if refine:  # the shortlist by drop, then the subset that leaves the rest most consistent
            sc = np.sqrt(np.mean(residuals(beam) ** 2, axis=2)) / scale
            sc[np.arange(len(beam))[:, None], beam] = 0.0
            # total remaining misfit, not its max: the max is often an unrelated worker, the same for all
            order = np.argsort(np.sum(sc**2, axis=1), kind="stable")
            beam, rest = beam[order], float(sc[order[0]].max())
        else:
            rest = _remaining_max(residuals([tuple(beam[0])])[0], beam[0], scale)
        best = tuple(int(i) for i in beam[0])
        if pairs is not None and rest < threshold:  # only a set that passes needs the pair check
            rest = max(rest, float(pairs(best).max()) / scale)
        if found is None:
            if rest < threshold:
                found = (best, rest)
        elif found[1] >= threshold * UPGRADE_LEVEL and rest <= found[1] / UPGRADE_FACTOR:
            # a passing but marginal set: colluding neighbours can look consistent with each other, so a
            # larger set that makes the rest much more consistent is taken instead
            found = (best, rest)
        if found is not None and found[1] < threshold * UPGRADE_LEVEL:
            break
    if found is not None:
        return np.array(sorted(found[0]), dtype=np.int64), True
    return np.array(sorted(best), dtype=np.int64), False


def _subsets(pool: np.ndarray, size: int, beam: np.ndarray | None) -> np.ndarray:
    """All subsets of the pool of this size when there are at most MAX_SUBSETS, else the best subsets of
    the size below (the beam) each extended by one more pool member."""
    if beam is None or comb(pool.size, size) <= MAX_SUBSETS:
        return np.array(list(combinations(pool.tolist(), size)), dtype=np.int64)
    grown = {tuple(sorted({*b.tolist(), int(p)})) for b in beam for p in pool.tolist() if p not in b}
    return np.array(sorted(grown), dtype=np.int64)


def _remaining_max(R: np.ndarray, S, scale: float) -> float:
    sc = _scores(R, scale)
    sc[list(S)] = 0.0
    return float(sc.max())


def _scores(R: np.ndarray, scale: float) -> np.ndarray:
    return np.sqrt(np.mean(R**2, axis=1)) / scale


def _pool(scores: np.ndarray, adversaries: int, neighbours: int, n: int, threshold: float) -> np.ndarray:
    """Candidates: every position scoring above the threshold (at most POOL_MAX, the highest first), the
    top POOL_PER_ADVERSARY * A + 1 in any case, and their neighbours along the sorted worker points."""
    ranked = np.argsort(-scores, kind="stable")
    k = max(POOL_PER_ADVERSARY * adversaries + 1, int(np.sum(scores >= threshold)))
    top = ranked[: min(k, max(POOL_MAX, POOL_PER_ADVERSARY * 2 * adversaries))]
    cand = set(top.tolist())
    for i in top.tolist():
        for d in range(1, neighbours + 1):
            cand.update(j for j in (i - d, i + d) if 0 <= j < n)
    return np.array(sorted(cand), dtype=np.int64)


# ----- GCC: closed-form LOO and rank-|S| downdates ---------------------------------------------------------
def loo_matrix(t: np.ndarray, kernel: Any, lam: float) -> np.ndarray:
    """G with LOO residual_i = (G y)_i / G_ii for the RKHS smoother through points t (any lam >= 0).

    G is the leading n x n block of the inverse of [[Sigma + n lam I, T], [T^T, 0]]: for lam = 0 it gives
    the interpolation error at t_i from the other points; for lam > 0, I - H = n lam G."""
    n, q = t.size, kernel.q
    M = bordered_matrix(t, kernel, lam)
    rhs = np.zeros((n + q, n))
    rhs[:n] = np.eye(n)
    try:
        with np.errstate(all="ignore"):
            G = linalg.solve(M, rhs, assume_a="sym", check_finite=False)[:n]
    except linalg.LinAlgError as err:
        raise ValueError(f"robust decode: the smoother system through {n} points is singular ({err})") from None
    return (G + G.T) / 2


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
        GS = G[:, S].transpose(1, 0, 2)  # (B, n, s)
        GSS = G[S[:, :, None], S[:, None, :]]  # (B, s, s)
        with np.errstate(all="ignore"):
            A = GS @ np.linalg.inv(GSS)  # (B, n, s)
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
        rest = np.setdiff1d(np.arange(n), S)
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
        np.maximum.at(out, j, val)
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
            inv = np.linalg.inv(G[T[:, :, None], T[:, None, :]])
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

    def drop(S: np.ndarray) -> np.ndarray:
        PS = P[S]  # (B, s, m)
        if S.shape[1] == 1:
            return np.sum(PS[:, 0] ** 2, axis=1) / np.diag(G)[S[:, 0]]
        GSS = G[S[:, :, None], S[:, None, :]]
        with np.errstate(all="ignore"):
            sol = np.linalg.solve(GSS, PS)
        out = np.einsum("bsm,bsm->b", PS, sol)
        out[~np.isfinite(out)] = -np.inf
        return out

    return drop


# ----- the entry point -------------------------------------------------------------------------------------
def robust_decode(code: Code, Y: Any, returned: Sequence[int], adversaries: int = 1, *,
                  method: str = "loo", threshold: float = DEFAULT_THRESHOLD) -> tuple[Any, np.ndarray]:
    """(Yhat, flagged): the decode without the flagged workers, and their sorted indices (see the module)."""
    from .berrut import BACC
    from .gcc import GCC
    from .lagrange import LCC

    A = _check_adversaries(adversaries)
    idx, Yn = _prepare(code, Y, returned)
    if method not in ("loo", "approxifer"):
        raise ValueError(f"unknown robust method {method!r}; choose 'loo' or 'approxifer' (BACC only)")
    if method == "approxifer" and not isinstance(code, BACC):
        raise ValueError(f"method='approxifer' is ApproxIFER's locator for BACC; {code.name} takes method='loo'")
    if not (np.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive number, got {threshold!r}")
    order = np.argsort(idx, kind="stable")
    srt, Ys = idx[order], Yn[order]
    if isinstance(code, LCC):
        from .errorcorrect import berlekamp_welch

        pos = berlekamp_welch(code, srt, Ys, A)
    elif isinstance(code, (GCC, BACC)):
        need = min_results(code, A)
        if srt.size < need:
            raise ValueError(f"robust decode with adversaries={A} needs at least {need} results from "
                             f"{code.name} (got {srt.size}): wait for more workers or lower adversaries")
        if method == "approxifer":
            from .approxifer import approxifer_locate

            pos = approxifer_locate(code.beta[srt], Ys, A)
        else:
            pos = _locate_smoother(code, srt, Ys, A, threshold)
    else:
        raise ValueError(f"robust_decode is implemented for GCC, BACC and LCC, not {code.name}")
    flagged = np.sort(srt[pos])
    keep = np.ones(idx.size, dtype=bool)
    keep[np.isin(idx, flagged)] = False
    ret_keep = idx[keep]
    Ykeep = Y[np.flatnonzero(keep)] if is_torch(Y) else np.asarray(Y)[keep]
    return code.decode(Ykeep, ret_keep), flagged


def min_results(code: Code, adversaries: int) -> int:
    """The fewest results a robust decode with this many adversaries accepts: LCC's (K-1) deg + 1 + 2A;
    for the approximate codes the decode's own minimum plus 2A, and at least 2A + 2 (an excluded set must
    leave a majority able to outvote it)."""
    from .lagrange import LCC

    A = _check_adversaries(adversaries)
    if A == 0:
        return code.min_results
    if isinstance(code, LCC):
        return code.threshold + 2 * A
    return max(code.min_results + 2 * A, 2 * A + 2)


def _locate_smoother(code: Code, srt: np.ndarray, Ys: np.ndarray, A: int, threshold: float) -> np.ndarray:
    from .gcc import GCC

    t = code.beta[srt]
    if isinstance(code, GCC):
        if t.size > MAX_POINTS:
            raise ValueError(f"robust decode for GCC is limited to {MAX_POINTS} results (got {t.size})")
        lam = code.lam_dec
        if isinstance(lam, str):
            from ..smoothing import select_lam

            lam = select_lam(t, Ys, code.kernel_for(t.size), lam)
        G = _cached_loo_matrix(code, srt, t, float(lam))
        P = G @ Ys
        residuals, drop, refine, pairs = downdate_residuals(G, P), energy_drop(G, P), True, pair_residuals(G, P)
        adjacent = adjacent_pair_residuals(G, P)
    else:
        from .robust_bacc import berrut_drop, berrut_loo_residuals

        residuals, drop, refine, pairs, adjacent = berrut_loo_residuals(t, Ys), berrut_drop(t, Ys), True, None, None
    pos, _ = search(residuals, t.size, A, robust_spread(Ys), threshold, drop, refine, pairs=pairs,
                    adjacent=adjacent)
    return pos


def _cached_loo_matrix(code: Code, srt: np.ndarray, t: np.ndarray, lam: float) -> np.ndarray:
    """G for this returned set, kept per code like D_F (the same straggler pattern recurs)."""
    cache: OrderedDict = code.__dict__.setdefault("_robust_cache", OrderedDict())
    key = (lam, *srt.tolist())
    G = cache.get(key)
    if G is None:
        G = cache[key] = loo_matrix(t, code.kernel_for(t.size), lam)
        if len(cache) > LOO_CACHE_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return G


def _check_adversaries(adversaries: int) -> int:
    if isinstance(adversaries, bool) or not isinstance(adversaries, (int, np.integer)) or adversaries < 0:
        raise ValueError(f"adversaries must be a non-negative integer (an upper bound on wrong results), "
                         f"got {adversaries!r}")
    return int(adversaries)


def _prepare(code: Code, Y: Any, returned: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Validated worker indices and the results as float64 (n, m), checked finite."""
    ret = returned if isinstance(returned, (list, tuple)) else np.asarray(to_numpy(returned)).ravel()
    idx = code.check_returned(ret)
    Yn = np.asarray(to_numpy(Y))
    if Yn.ndim == 0 or Yn.shape[0] != idx.size:
        raise ValueError(f"robust_decode expects one result per returned worker: Y has first dimension "
                         f"{Yn.shape[0] if Yn.ndim else 'none'} but {idx.size} workers returned")
    if not np.issubdtype(Yn.dtype, np.number):
        raise ValueError(f"Y must be a numeric array, got dtype {Yn.dtype}")
    Yn = Yn.reshape(idx.size, -1).astype(float)
    check_finite(Yn, "Y", "Y contains non-finite values (NaN or inf): treat those workers as stragglers "
                 "and leave them out of `returned`")
    return idx, Yn


__all__ = ["DEFAULT_THRESHOLD", "min_results", "downdate_residuals", "loo_matrix",
           "robust_decode", "robust_spread", "search"]
