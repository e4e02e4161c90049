"""Robust decoding: locate and exclude up to A workers whose results are wrong but finite (docs/design.md section 9).

A decode mixes every returned result into every estimate, so one wrong result spoils all K answers. The
redundancy beyond what decoding needs lets us find them: predict each returned result from the others
(leave-one-out, LOO) and look for a set S of at most A workers whose removal leaves every remaining result
consistent with the rest.

This module is the code-agnostic half: the entry point `robust_decode` (validate, sort, ask the code to locate,
exclude, decode) and the calibration; the search that codes with LOO residuals share is
`gencc.codes.robust_search`. It imports no code class. Each code brings its own half through three hooks of
`gencc.codes.base.Code`:

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
from typing import Any

import numpy as np

from .._util.arrays import check_finite, to_numpy
from .robust_search import DEFAULT_THRESHOLD, clean_threshold, robust_spread, search

#: every locator a code may offer, by `method` name; a code lists the ones it has in `robust_methods`
METHODS = {"loo": "the leave-one-out search of gencc.codes.robust",
           "approxifer": "ApproxIFER's locator (Soleymani et al.), the baseline of BACC"}
@dataclass(frozen=True)
class Calibration:
    """A robust decode's threshold calibrated on honest runs (`calibrate`): pass it as `threshold=`.

    `weights[n]`: the honest spread of worker n's LOO score (its median over the runs that set the weights,
    relative to the median over workers; 1 where not measured): a score is divided by its worker's weight,
    so a worker point whose honest residual is large (a wide gap, a rough stretch of f o u_enc) is not what
    sets the threshold for all. `threshold`: the conformal bound on the weighted scores; `false_alarm`: the
    probability it was set for; `runs`: how many honest runs set it; `confidence`: the probability over the
    calibration draw that the false-alarm rate is at most `false_alarm` (None: on average); `adversaries`: the
    bound A it was calibrated for (a decode with A >= 2 also checks adjacent pairs, which A = 1 did not see)."""

    threshold: float
    weights: np.ndarray
    false_alarm: float
    runs: int
    confidence: float | None = None
    adversaries: int | None = None


def calibrate(code: Any, runs: Iterable[tuple[Any, Sequence[int]]], adversaries: int = 1,
              false_alarm: float = 0.01, confidence: float | None = 0.9, per_worker: bool = False) -> Calibration:
    """A threshold for `robust_decode` with a stated false-alarm probability, from honest runs of the same
    code, model and input distribution: `runs` yields (Y, returned) of decodes known (or trusted) to be honest.

    With `per_worker` the first third of the runs sets each worker's weight (Calibration; measured worse than
    one threshold for all on the models of benchmarks/investigations/robust_plausible.py, so off by default); on
    the rest, each run's `clean_threshold` (the code's `_clean_threshold` hook: the least threshold that flags
    nobody there) is collected, and the threshold is one of their order statistics (conformal bounds, for new
    honest runs exchangeable with these, whatever the weights). The k-th smallest of n leaves a false-alarm rate
    distributed as Beta(n + 1 - k, k) over the calibration draw: with `confidence` (default 0.9) k is the
    least with P(rate > false_alarm) <= 1 - confidence (needs n >= log(1 - confidence) / log(1 - false_alarm)
    runs: 230 for 1% at 0.9, `runs_needed`); with confidence None, k = ceil((1 - false_alarm)(n + 1)), the rate
    is at most false_alarm on average over calibrations but one calibration's can be higher (n >= 1 / false_alarm
    - 1). The default threshold (DEFAULT_THRESHOLD) is a fixed fraction of the results' spread, right for no
    model in particular: a calibrated one is far lower for smooth models at large N (and catches lies the
    default misses) and higher for rough ones at small N (and keeps false alarms at the rate asked)."""
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
    need = runs_needed(false_alarm, confidence)
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
    return Calibration(t, weights, float(false_alarm), len(data), confidence, A)


def runs_needed(false_alarm: float, confidence: float | None = 0.9) -> int:
    """The fewest honest runs `calibrate` sets a threshold from for this false-alarm rate and confidence (see
    there): log(1 - confidence) / log(1 - false_alarm), or 1 / false_alarm - 1 with confidence None."""
    if confidence is None:
        return int(np.ceil(1 / false_alarm)) - 1
    return int(np.ceil(np.log1p(-confidence) / np.log1p(-false_alarm) - 1e-9))


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
    threshold, weights = check_threshold(code, threshold, A)
    order = np.argsort(idx, kind="stable")
    kw = {} if weights is None else {"weights": weights[idx[order]]}
    flagged = np.sort(np.asarray(code._locate_wrong(idx[order], Yn[order], A, method=method, threshold=threshold,
                                                    **kw), dtype=np.int64))
    return code._decode_excluding(Y, idx, flagged), flagged


def check_threshold(code: Any, threshold: float | Calibration, adversaries: int
                    ) -> tuple[float, np.ndarray | None]:
    """(threshold, per-worker weights or None) of a robust decode's `threshold`: a positive number, or a
    Calibration for this code's N and for a bound that sees what this one does (refused otherwise)."""
    weights = None
    if isinstance(threshold, Calibration):
        cal = threshold
        if cal.weights.shape != (code.N,):
            raise ValueError(f"this calibration is for N={cal.weights.size} workers, the code has N={code.N}")
        if cal.adversaries is not None and min(cal.adversaries, 2) < min(adversaries, 2):
            raise ValueError(f"this calibration is for adversaries={cal.adversaries}; a decode with adversaries="
                             f"{adversaries} also checks adjacent pairs: calibrate with adversaries={adversaries}")
        threshold, weights = cal.threshold, cal.weights
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
            or not (np.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive number or a Calibration, got {threshold!r}")
    return float(threshold), weights


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


__all__ = ["DEFAULT_THRESHOLD", "METHODS", "Calibration", "calibrate", "check_adversaries", "check_threshold",
           "clean_threshold", "honest_runs", "min_results", "require_results", "robust_decode", "robust_spread",
           "runs_needed", "search"]
