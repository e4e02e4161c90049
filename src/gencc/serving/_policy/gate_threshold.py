"""The gate's threshold from a calibration's records: the agreement / share-sent frontier and the choice on it.

A calibration (`gencc.serving.calibrate_gate`) records, per degraded request, every decode the gate judged:
(request id, score z, decoded top-1). A gate at threshold t sends a request's first decode scoring >= t; its
sent decodes agree with f at some rate, and the least t whose rate clears `target` with confidence (the lower
end of a one-sided Wilson interval) is the threshold. That least t is a minimum over a noisy curve: between
calibration seeds it moved by a factor of 2 (digits-cnn, sgcc: 1.6 to 2.6 for three seeds of the same
conditions). So the threshold chosen is a one-sided upper confidence bound on that least t: its 0.9 quantile
over bootstrap resamples of the requests (`BOOTSTRAP_QUANTILE`). Their median, a point estimate, moved with the
calibration's seed on a model whose decodes plateau near the target (the MLP of
benchmarks/investigations/gate.py, sgcc) from inf to a threshold whose decodes fell short of the target on served
inputs.

Where the score is a z-score (the decoder gave an error estimate), the threshold is at least `score_floor`: the
score at which the decoder's own error estimate puts the top-1 right with probability `target`. The calibration's
inputs are training inputs, on which a model is more confident and a parity model more accurate than on served
ones: served inputs bring more low-score decodes, and those are right less often. On digits-cnn with sgcc-parity
every decode cleared the target on training inputs, so a calibration without the floor sent every one, and fell
short of it on test inputs; real threads return the same patterns (the same shares and agreement per score
band), so the shortfall measured there was this shift, not timing.
The floor does not depend on the inputs: at it and above, a decode is sent only when its own uncertainty says it
is likely right, whatever the mix of scores served.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

#: top-1 agreement the calibration asks of the decodes a gate lets through, as the lower end of a confidence
#: interval (it sees a few hundred degraded requests): 0.95, the agreement served answers are measured against
#: (docs/guides/serving.md), plus 0.01, because a model may be more confident on its training inputs than on
#: served ones (digits-cnn, sgcc: 0.97 on training inputs at a threshold that measured 0.92 to 0.95 on test
#: inputs; a torch MLP on digits the other way round)
DEFAULT_TARGET = 0.96
#: z of that interval (Wilson score interval; 1.645: one-sided 95%)
CONFIDENCE_Z = 1.645
#: bootstrap resamples of the calibration's requests whose least qualifying thresholds the choice takes a quantile
#: of (BOOTSTRAP_QUANTILE; 0: the least qualifying threshold of the records themselves)
BOOTSTRAP_DRAWS = 200
#: the quantile of those resamples' least qualifying thresholds that is kept (0.5: their median, a point estimate)
BOOTSTRAP_QUANTILE = 0.9


@dataclass
class GateCalibration:
    """A calibrated threshold (inf when none qualified); `target`; `candidates`, the degraded requests recorded;
    frontier rows (threshold, agreement of the decodes sent, fraction of degraded candidates sent) on the records;
    `draws`, the least qualifying threshold of each bootstrap resample, in draw order (empty without bootstrap);
    `floor`, the least threshold allowed (`score_floor`, or 0), which the threshold is at least."""

    threshold: float
    target: float
    candidates: int
    frontier: list[tuple[float, float, float]]
    draws: list[float] = field(default_factory=list, repr=False)
    floor: float = 0.0

    def spread(self, q: float = 0.25) -> tuple[float, float]:
        """The q and 1 - q quantiles of the bootstrap thresholds (the threshold itself twice without draws)."""
        if not self.draws:
            return self.threshold, self.threshold
        d = np.sort(np.asarray(self.draws, dtype=float))
        return float(d[int(q * (len(d) - 1))]), float(d[int(math.ceil((1 - q) * (len(d) - 1)))])


class _Table:
    """Records as intervals: a request's decode j is the one a gate at t sends iff z_j >= t > max(z_1..z_j-1),
    so each request contributes its record-breaking decodes with (lo, hi] = (previous max, z_j]."""

    def __init__(self, records: Sequence[tuple[int, float, int]], truth: Callable[[int], int]):
        req: dict[int, int] = {}
        best: dict[int, float] = {}
        idx, lo, hi, right = [], [], [], []
        for rid, z, top in records:
            z = float(z)
            i = req.setdefault(rid, len(req))
            prev = best.get(rid, -math.inf)
            if not z > prev:  # nan, or never the first to clear a threshold
                continue
            best[rid] = z
            idx.append(i)
            lo.append(prev)
            hi.append(z)
            right.append(top == truth(rid))
        self.n = len(req)
        self.idx, self.lo, self.hi = np.array(idx, dtype=int), np.array(lo), np.array(hi)
        self.right = np.array(right, dtype=float)

    def counts(self, grid: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per threshold of `grid`: (requests sent a decode, of them right), each request counted `weights[i]`
        times (default once)."""
        w = np.ones(self.n) if weights is None else np.asarray(weights, dtype=float)
        w = w[self.idx]
        T = np.asarray(grid, dtype=float)[:, None]
        H = (self.lo[None, :] < T) & (T <= self.hi[None, :])
        return H @ w, H @ (w * self.right)


def frontier(records: Sequence[tuple[int, float, int]], truth: Callable[[int], int],
             thresholds: Sequence[float]) -> list[tuple[float, float, float]]:
    """Per threshold t: (t, top-1 agreement of the decodes a gate at t sends, share of the requests that had a
    decode which get one sent). A request's sent decode is its first recorded one scoring >= t."""
    tab = _Table(records, truth)
    sent, right = tab.counts(np.asarray(thresholds, dtype=float))
    return [(float(t), r / s if s else math.nan, s / max(tab.n, 1))
            for t, s, r in zip(thresholds, sent, right, strict=True)]


def score_floor(target: float) -> float:
    """The z-score (top-1 margin / error sd) at which a decode whose coordinates carry independent Gaussian errors
    of that sd keeps its top-1 above the runner-up with probability `target`: P(e_2 - e_1 < margin) =
    Phi(z / sqrt 2), so z = sqrt 2 * Phi^-1(target) (2.48 at 0.96); other classes only lower that probability."""
    if not 0 < target < 1:
        raise ValueError(f"a score floor needs a target in (0, 1), got {target}")
    return math.sqrt(2.0) * NormalDist().inv_cdf(target)


def wilson_lower(right: float, n: float, z: float = CONFIDENCE_Z) -> float:
    """The Wilson score interval's lower end for `right` successes in `n` trials (0 when n = 0)."""
    if n <= 0:
        return 0.0
    p = right / n
    c = z * z / n
    return (p + c / 2 - z * math.sqrt(max(p * (1 - p), 0.0) / n + c / (4 * n))) / (1 + c)


def _least(grid: np.ndarray, sent: np.ndarray, right: np.ndarray, target: float) -> float:
    ok = [t for t, s, r in zip(grid, sent, right, strict=True) if s > 0 and wilson_lower(r, s) >= target]
    return float(min(ok)) if ok else math.inf


def choose_threshold(records: Sequence[tuple[int, float, int]], truth: Callable[[int], int],
                     target: float = DEFAULT_TARGET, points: int = 60, draws: int = BOOTSTRAP_DRAWS,
                     seed: int = 0, floor: float = 0.0, quantile: float = BOOTSTRAP_QUANTILE) -> GateCalibration:
    """The threshold, on a grid of the recorded scores' quantiles, whose sent decodes agree with f at `target`
    with confidence: the least one where the Wilson lower bound (z = CONFIDENCE_Z) of their agreement is at least
    `target` (inf when none is), taken as the (lower) `quantile` of that least threshold over `draws` bootstrap
    resamples of the requests (seeded by `seed`; draws 0: on the records as they are); at least `floor`."""
    if not 0 < target <= 1:
        raise ValueError(f"gate target must lie in (0, 1], got {target}")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 0:
        raise ValueError(f"bootstrap draws must be a non-negative integer, got {draws!r}")
    if not 0 <= quantile <= 1:
        raise ValueError(f"bootstrap quantile must lie in [0, 1], got {quantile}")
    if not floor >= 0:
        raise ValueError(f"a threshold floor must be a non-negative number, got {floor}")
    tab = _Table(records, truth)
    z = np.array([r[1] for r in records], dtype=float)
    fin = z[np.isfinite(z)]
    grid = np.unique(np.concatenate([[0.0], np.quantile(fin, np.linspace(0, 1, points)) if fin.size else []]))
    sent, right = tab.counts(grid)
    rows = [(float(t), r / s if s else math.nan, s / max(tab.n, 1)) for t, s, r in zip(grid, sent, right, strict=True)]
    least = _least(grid, sent, right, target)
    if not draws or not tab.n:
        return GateCalibration(max(least, floor), float(target), tab.n, rows, floor=float(floor))
    rng = np.random.default_rng(seed)
    got = [_least(grid, *tab.counts(grid, rng.multinomial(tab.n, np.full(tab.n, 1 / tab.n))), target)
           for _ in range(draws)]
    kept = sorted(got)[int(math.floor(quantile * (draws - 1)))]
    return GateCalibration(max(kept, floor), float(target), tab.n, rows, got, float(floor))
