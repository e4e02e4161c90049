"""Robust decoding: locate and exclude up to A workers whose results are wrong but finite (docs/design.md section 9).

A decode mixes every returned result into every estimate, so one wrong result spoils all K answers. The
redundancy beyond what decoding needs lets us find them: predict each returned result from the others
(leave-one-out, LOO) and look for a set S of at most A workers whose removal leaves every remaining result
consistent with the rest.

This module is the code-agnostic half: the entry point `robust_decode` (validate, sort, ask the code to locate,
exclude, decode) and the search that codes with LOO residuals share. It imports no code class. Each code brings
its own half through three hooks of `gencc.codes.base.Code`:

- `_locate_wrong(returned, Y, adversaries, method=, threshold=)`: the workers to exclude. GCC (gcc.py) and BACC
  (berrut.py) hand their LOO residuals to `search`; LCC (lagrange.py) runs exact Berlekamp-Welch error correction;
  the base class refuses (a code without a locator).
- `_decode_excluding(Y, returned, excluded)`: the decode without them (by default `decode` of the rest; GCC's
  interpolating decoder downdates the weights it already factored for the search).
- `_robust_min_results(adversaries)`: the fewest results a robust decode accepts.
- `_clean_threshold(returned, Y, adversaries, weights=)` and `_honest_scores(returned, Y)` (GCC, BACC): what
  `calibrate` collects from honest runs to set a threshold with a stated false-alarm rate (a `Calibration`,
  passed to `robust_decode` as `threshold`).

The search:

- Scores are scale-free: a worker's LOO residual (root mean square over the output coordinates) divided by
  the robust spread of the returned results (MAD over workers, pooled over coordinates). Honest residuals of
  a smooth decode are a small fraction of that spread; a result corrupted by a sizeable fraction of the
  signal is not. `threshold` is the boundary (default DEFAULT_THRESHOLD, chosen on all-honest runs).
- It never removes the top score greedily: an honest neighbour of a wrong result is predicted from
  it and can score higher. It scores every subset of size <= A of a small candidate pool (the top scores
  and their neighbours along the curve) by the LOO residuals of the workers that remain, and keeps the
  smallest set that leaves them all under the threshold (the best one of size A if none does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Any

import numpy as np

from .._arrays import check_finite, to_numpy

#: a remaining worker whose LOO residual exceeds this fraction of the results' robust spread is inconsistent
DEFAULT_THRESHOLD = 0.5
#: every locator a code may offer, by `method` name; a code lists the ones it has in `robust_methods`
METHODS = {"loo": "the leave-one-out search of gencc.codes.robust",
           "approxifer": "ApproxIFER's locator (Soleymani et al.), the baseline of BACC"}
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


@dataclass(frozen=True)
class Calibration:
    """A robust decode's threshold calibrated on honest runs (`calibrate`): pass it as `threshold=`.

    `weights[n]`: the honest spread of worker n's LOO score (its median over the runs that set the weights,
    relative to the median over workers; 1 where not measured): a score is divided by its worker's weight,
    so a worker point whose honest residual is large (a wide gap, a rough stretch of f o u_enc) is not what
    sets the threshold for all. `threshold`: the conformal bound on the weighted scores; `false_alarm`: the
    probability it was set for; `runs`: how many honest runs set it; `confidence`: the probability over the
    calibration draw that the false-alarm rate is at most `false_alarm` (None: on average)."""

    threshold: float
    weights: np.ndarray
    false_alarm: float
    runs: int
    confidence: float | None = None


def calibrate(code: Any, runs: Iterable[tuple[Any, Sequence[int]]], adversaries: int = 1,
              false_alarm: float = 0.01, confidence: float | None = 0.9, per_worker: bool = False) -> Calibration:
    """A threshold for `robust_decode` with a stated false-alarm probability, from honest runs of the same
    code, model and input distribution: `runs` yields (Y, returned) of decodes known (or trusted) to be honest.

    With `per_worker` the first third of the runs sets each worker's weight (Calibration; measured worse than
    one threshold for all on the models of benchmarks/robust_plausible.py, so off by default); on the rest, each
    run's `clean_threshold` (the code's `_clean_threshold` hook: the least threshold that flags nobody there)
    is collected, and the threshold is one of their order statistics (conformal bounds, for new honest runs
    exchangeable with these, whatever the weights). The k-th smallest of n leaves a false-alarm rate
    distributed as Beta(n + 1 - k, k) over the calibration draw: with `confidence` (default 0.9) k is the
    least with P(rate > false_alarm) <= 1 - confidence (needs n >= log(1 - confidence) / log(1 - false_alarm)
    runs: 230 for 1% at 0.9); with confidence None, k = ceil((1 - false_alarm)(n + 1)), the rate is at most
    false_alarm on average over calibrations but one calibration's can be higher (n >= 1 / false_alarm - 1).
    The default threshold
    (DEFAULT_THRESHOLD) is a fixed fraction of the results' spread, right for no model in particular: a
    calibrated one is far lower for smooth models at large N (and catches lies the default misses) and
    higher for rough ones at small N (and keeps false alarms at the rate asked)."""
    A = check_adversaries(adversaries)
    if isinstance(false_alarm, bool) or not isinstance(false_alarm, (int, float, np.floating)) \
            or not 0 < false_alarm < 1:
        raise ValueError(f"false_alarm must be a probability in (0, 1), got {false_alarm!r}")
    data = []
    for Y, returned in runs:
        idx, Yn = _prepare(code, Y, returned)
        order = np.argsort(idx, kind="stable")
        data.append((idx[order], Yn[order]))
    if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, (int, float))
                                   or not 0 < confidence < 1):
        raise ValueError(f"confidence must be a probability in (0, 1) or None, got {confidence!r}")
    split = len(data) // 3 if per_worker else 0
    if confidence is None:
        need = int(np.ceil(1 / false_alarm)) - 1
    else:
        need = int(np.ceil(np.log1p(-confidence) / np.log1p(-false_alarm) - 1e-9))
    if len(data) - split < need:
        raise ValueError(f"calibrating a false-alarm rate of {false_alarm:g} needs at least {need + split} honest "
                         f"runs{' (a third of them set the per-worker weights)' if per_worker else ''}, got "
                         f"{len(data)}")
    weights = np.ones(code.N)
    if split:
        per: list[list[float]] = [[] for _ in range(code.N)]
        for idx, Yn in data[:split]:
            for n, v in zip(idx, code._honest_scores(idx, Yn), strict=True):
                per[int(n)].append(float(v))
        med = np.array([np.median(v) if v else np.nan for v in per])
        ok = np.isfinite(med) & (med > 0)
        if ok.any():
            weights[ok] = med[ok] / np.median(med[ok])
            weights[~ok] = weights[ok].max()
    crit = np.sort([float(code._clean_threshold(idx, Yn, A, weights=weights[idx])) for idx, Yn in data[split:]])
    t = float(crit[order_statistic(crit.size, false_alarm, confidence) - 1])
    t = float(np.nextafter(t, np.inf)) if t > 0 else float(np.finfo(float).tiny)
    weights.setflags(write=False)
    return Calibration(t, weights, float(false_alarm), len(data), confidence)


def order_statistic(n: int, false_alarm: float, confidence: float | None) -> int:
    """The k (1-based) of `calibrate`'s threshold among n sorted clean thresholds (see there)."""
    if confidence is None:
        return min(int(np.ceil((1 - false_alarm) * (n + 1))), n)
    from scipy.stats import beta

    ks = np.arange(1, n + 1)
    ok = beta.sf(false_alarm, n + 1 - ks, ks) <= 1 - confidence + 1e-12
    return int(ks[ok].min()) if ok.any() else n


def honest_runs(code: Any, f: Callable[[Any], Any], inputs: Any, runs: int = 300, stragglers: int = 0,
                seed: int = 0, order: Callable[[np.ndarray], Any] | None = None
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Honest runs for `calibrate` made with the model itself: run r draws K of the sample `inputs` (P, ...)
    and `stragglers` missing workers from seed + r, orders the K inputs by `order` when given (the job's own
    ordering, e.g. `gencc.order_inputs`), encodes them and yields (f of the returned workers' coded inputs,
    returned). `f` is batched (a batch of inputs in, their outputs out), as jobs apply it."""
    pool = np.asarray(to_numpy(inputs), dtype=float)
    if pool.ndim == 0 or len(pool) < code.K:
        raise ValueError(f"honest_runs needs at least K={code.K} sample inputs, got "
                         f"{0 if pool.ndim == 0 else len(pool)}")
    if not 0 <= stragglers <= code.N - code.min_results:
        raise ValueError(f"stragglers must lie in [0, {code.N - code.min_results}], got {stragglers!r}")
    for r in range(int(runs)):
        rng = np.random.default_rng(seed + r)
        X = pool[rng.choice(len(pool), code.K, replace=False)]
        if order is not None:
            X = X[np.asarray(order(X))]
        ret = np.sort(rng.choice(code.N, code.N - stragglers, replace=False))
        Y = np.asarray(to_numpy(f(code.encode(X)[ret])), dtype=float)
        yield Y.reshape(ret.size, -1), ret


# ----- the entry point -------------------------------------------------------------------------------------
def robust_decode(code: Any, Y: Any, returned: Sequence[int], adversaries: int = 1, *,
                  method: str = "loo", threshold: float | Calibration = DEFAULT_THRESHOLD
                  ) -> tuple[Any, np.ndarray]:
    """(Yhat, flagged) for `code.robust_decode`: the decode without the flagged workers, and their sorted indices.

    `code` is any `gencc.codes.Code`; what it can locate is its own business (the module docstring's hooks)."""
    A = check_adversaries(adversaries)
    idx, Yn = _prepare(code, Y, returned)
    _check_method(code, method)
    weights = None
    if isinstance(threshold, Calibration):
        if threshold.weights.shape != (code.N,):
            raise ValueError(f"this calibration is for N={threshold.weights.size} workers, the code has N={code.N}")
        threshold, weights = threshold.threshold, threshold.weights
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
            or not (np.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive number or a Calibration, got {threshold!r}")
    order = np.argsort(idx, kind="stable")
    kw = {} if weights is None else {"weights": weights[idx[order]]}
    flagged = np.sort(np.asarray(code._locate_wrong(idx[order], Yn[order], A, method=method, threshold=threshold,
                                                    **kw), dtype=np.int64))
    return code._decode_excluding(Y, idx, flagged), flagged


def min_results(code: Any, adversaries: int) -> int:
    """The fewest results a robust decode of `code` with this many adversaries accepts (`_robust_min_results`:
    LCC's (K-1) deg + 1 + 2A; for the approximate codes the decode's own minimum plus 2A, and at least
    2A + 2, so that an excluded set leaves a majority able to outvote it)."""
    return int(code._robust_min_results(check_adversaries(adversaries)))


def require_results(code: Any, n: int, adversaries: int) -> None:
    """Refuse a robust decode from n results when the code needs more for this many adversaries."""
    need = min_results(code, adversaries)
    if n < need:
        raise ValueError(f"robust decode with adversaries={adversaries} needs at least {need} results from "
                         f"{code.name} (got {n}): wait for more workers or lower adversaries")


def check_adversaries(adversaries: int) -> int:
    """`adversaries` as an int, refused unless a non-negative integer."""
    if isinstance(adversaries, bool) or not isinstance(adversaries, (int, np.integer)) or adversaries < 0:
        raise ValueError(f"adversaries must be a non-negative integer (an upper bound on wrong results), "
                         f"got {adversaries!r}")
    return int(adversaries)


def _check_method(code: Any, method: str) -> None:
    """Refuse a `method` the code does not offer (a code that offers none refuses in its `_locate_wrong`)."""
    offered = tuple(code.robust_methods)
    if not offered or (isinstance(method, str) and method in offered):
        return
    takes = " or ".join(f"method={m!r}" for m in offered)
    if isinstance(method, str) and method in METHODS:
        raise ValueError(f"method={method!r} is {METHODS[method]}; {code.name} takes {takes}")
    raise ValueError(f"unknown robust method {method!r}; choose one of {', '.join(map(repr, METHODS))} "
                     f"({code.name} takes {takes})")


def _prepare(code: Any, Y: Any, returned: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
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


__all__ = ["DEFAULT_THRESHOLD", "METHODS", "Calibration", "calibrate", "check_adversaries", "clean_threshold",
           "honest_runs", "min_results", "require_results", "robust_decode", "robust_spread", "search"]
