"""The search of robust decoding (gencc.codes.robust): the smallest set of at most A workers whose exclusion
leaves every remaining leave-one-out score under the threshold, and the clean threshold of honest results.
Scores are scale-free (a LOO residual's rms over the results' robust spread); see gencc.codes.robust."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations
from math import comb

import numpy as np

#: a remaining worker whose LOO residual exceeds this fraction of the results' robust spread is inconsistent
DEFAULT_THRESHOLD = 0.5
#: candidate pool: this many top-scoring workers per allowed adversary (plus their neighbours)
POOL_PER_ADVERSARY = 2
#: a passing set whose remaining worst score is above UPGRADE_LEVEL x threshold gives way to a larger set
#: that cuts that score by UPGRADE_FACTOR
UPGRADE_LEVEL, UPGRADE_FACTOR = 0.5, 1.5
#: subsets of one size scored exhaustively up to this many; beyond, a beam of the BEAM best of the size below
#: (WIDE_BEAM for sets of more than 3: at A = N^0.5 = 9..18 a beam of 24 missed 1-4% of the adversaries)
MAX_SUBSETS, BEAM, WIDE_BEAM = 1500, 24, 96
#: at most this many top scorers (or 4 per adversary) enter the candidate pool (before neighbours are added)
POOL_MAX = 12
#: with A >= 2 and no LOO score above the threshold, two adjacent workers that lie together (and so vouch for
#: each other) still start the search when both stay above this fraction of the threshold with the pair left
#: out (all-honest digits CNN, 300 runs: at most 0.37 at N = 40, 0.07 at N = 80; such pairs: 0.47 and more), and
#: at least PAIR_CONTRAST x the median over adjacent pairs (colluding pairs at N = 40 / 80: 12-107x; the honest
#: pairs that reach the level at N = 20, where every residual is large, 2-4.5x)
PAIR_TRIGGER, PAIR_CONTRAST = 0.85, 8.0

Residuals = Callable[[Sequence[tuple[int, ...]] | np.ndarray], np.ndarray]


def robust_spread(Y: np.ndarray) -> float:
    """Robust scale of the results Y (n, m): MAD over workers per coordinate (x 1.4826), root mean square
    over coordinates. A minority of arbitrary rows cannot move it far."""
    mad = 1.4826 * np.median(np.abs(Y - np.median(Y, axis=0)), axis=0)
    s = float(np.sqrt(np.mean(mad**2)))
    if not s > 0:
        s = float(np.sqrt(np.mean(Y**2)))
    return s if s > 0 else 1.0


def search(residuals: Residuals, n: int, adversaries: int, scale: float | np.ndarray, threshold: float,
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
    threshold and PAIR_CONTRAST x the median pair starts the search (and joins the pool) even when every LOO
    score is below the threshold."""
    base = _scores(residuals([()])[0], scale)
    extra = np.zeros(0, dtype=np.int64)
    if base.max() < threshold and adjacent is not None and adversaries >= 2:
        pair = adjacent() / pair_scale(scale)
        hot = np.flatnonzero((pair >= PAIR_TRIGGER * threshold) & (pair >= PAIR_CONTRAST * np.median(pair)))
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
        beam = subsets[np.argsort(-gain, kind="stable")[:BEAM if size <= 3 else WIDE_BEAM]]
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
            rest = max(rest, float(np.max(pairs(best) / scale)))
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


def pair_scale(scale: float | np.ndarray) -> float | np.ndarray:
    """The scale of adjacent pair (i, i + 1) from per-position scales: the larger of the two."""
    return np.maximum(scale[:-1], scale[1:]) if np.ndim(scale) else scale


def _subsets(pool: np.ndarray, size: int, beam: np.ndarray | None) -> np.ndarray:
    """All subsets of the pool of this size when there are at most MAX_SUBSETS, else the best subsets of
    the size below (the beam) each extended by one more pool member."""
    if beam is None or comb(pool.size, size) <= MAX_SUBSETS:
        if size == 1:
            return pool[:, None].copy()
        if size == 2:  # combinations' order, without the Python loop
            return np.column_stack([pool[i] for i in np.triu_indices(pool.size, 1)])
        return np.array(list(combinations(pool.tolist(), size)), dtype=np.int64)
    # every beam member extended by a pool member not in it, sorted within and deduplicated (sorted rows)
    ext = np.concatenate([np.repeat(beam, pool.size, axis=0), np.tile(pool, len(beam))[:, None]], axis=1)
    ext = np.sort(ext[~np.any(ext[:, :-1] == ext[:, -1:], axis=1)], axis=1)
    base = int(pool.max()) + 1
    if base**size >= 2**62:
        return np.unique(ext, axis=0)
    key = ext @ (base ** np.arange(size - 1, -1, -1, dtype=np.int64))  # lexicographic order of the rows
    return ext[np.unique(key, return_index=True)[1]]


def _remaining_max(R: np.ndarray, S, scale: float) -> float:
    sc = _scores(R, scale)
    sc[list(S)] = 0.0
    return float(sc.max())


def _scores(R: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
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


def clean_threshold(residuals: Residuals, adversaries: int, scale: float | np.ndarray,
                    adjacent: Callable[[], np.ndarray] | None = None) -> float:
    """The threshold at and below which `search` would flag someone in these results and above which it flags
    nobody: the largest LOO score, and with A >= 2 the largest adjacent-pair score that passes the pair
    contrast, over PAIR_TRIGGER (both scale-free, as `search` scores them)."""
    t = float(_scores(residuals([()])[0], scale).max())
    if adjacent is not None and adversaries >= 2:
        pair = adjacent() / pair_scale(scale)
        if pair.size:
            hot = pair[pair >= PAIR_CONTRAST * np.median(pair)]
            if hot.size:
                t = max(t, float(hot.max()) / PAIR_TRIGGER)
    return t


__all__ = ["DEFAULT_THRESHOLD", "PAIR_CONTRAST", "PAIR_TRIGGER", "Residuals", "clean_threshold", "pair_scale",
           "robust_spread", "search"]
