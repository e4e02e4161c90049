"""Straggler-set models: which workers' results are used.

FixedCount(S, pattern) and Bernoulli(p) decide the returned set F directly; Collected decides it by time, from
a latency model of `gencc.faults` and a collection policy (first N - S, a deadline, or both). The
worst-case search of docs/design.md section 2 lives here too: exact enumeration when C(N, S) is small, otherwise an
adversarial search that reports itself as a lower bound of the true worst case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from math import comb

import numpy as np

from .._util.validate import check_int, check_positive, check_probability
from .injection import LatencyModel

__all__ = ["PATTERNS", "SEARCHED", "Bernoulli", "Collected", "FixedCount", "WorstCase", "first_returned",
           "worst_case_returned"]

PATTERNS = ("random", "worst", "block", "worst-agreement")
#: the patterns a search over straggler sets finds (they depend on f and the code): "worst" maximises the loss
#: (`simulate`'s metric), "worst-agreement" minimises the top-1 agreement with argmax f (classifiers)
SEARCHED = ("worst", "worst-agreement")


@dataclass(frozen=True)
class FixedCount:
    """Exactly S stragglers: a uniform random subset, a random contiguous block, or the worst case: of the loss
    ("worst") or of the top-1 agreement with argmax f ("worst-agreement", classifiers), found by
    `worst_case_returned` in `gencc.simulate`."""

    S: int
    pattern: str = "random"

    def __post_init__(self):
        object.__setattr__(self, "S", check_int("S", self.S, 0))
        if self.pattern not in PATTERNS:
            raise ValueError(f"unknown straggler pattern {self.pattern!r}; choose one of {', '.join(PATTERNS)}")

    def check(self, N: int) -> None:
        if self.S >= N:
            raise ValueError(f"S={self.S} stragglers out of N={N} workers leaves nobody to decode from; "
                             "need S < N")

    def draw(self, N: int, rng: np.random.Generator) -> np.ndarray:
        """Sorted indices of the workers that return (random or block pattern)."""
        self.check(N)
        if self.searched:
            raise ValueError(f"the {self.pattern} pattern depends on f and the code: use worst_case_returned")
        if self.pattern == "block":
            start = int(rng.integers(0, N - self.S + 1))
            stragglers = np.arange(start, start + self.S)
        else:
            stragglers = rng.choice(N, size=self.S, replace=False)
        return np.setdiff1d(np.arange(N), stragglers)

    @property
    def searched(self) -> bool:
        """Whether the pattern is found by a search over straggler sets (worst, worst-agreement), not drawn."""
        return self.pattern in SEARCHED

    def describe(self) -> dict:
        return {"S": self.S, "p": None, "pattern": self.pattern}


@dataclass(frozen=True)
class Bernoulli:
    """Each worker straggles independently with probability p."""

    p: float

    def __post_init__(self):
        object.__setattr__(self, "p", check_probability("straggling probability p", self.p, below_one=True))

    def check(self, N: int) -> None:
        return None

    def draw(self, N: int, rng: np.random.Generator) -> np.ndarray:
        return np.flatnonzero(rng.random(N) >= self.p)

    def describe(self) -> dict:
        return {"S": None, "p": float(self.p), "pattern": "bernoulli"}


def first_returned(latencies: np.ndarray, wait_for: int | None = None, deadline: float | None = None) -> np.ndarray:
    """Workers a collection policy keeps: the first `wait_for` to finish, those before `deadline`, or both
    (whichever stops first). Sorted indices."""
    lat = np.asarray(latencies, dtype=float)
    if wait_for is None and deadline is None:
        return np.arange(lat.size)
    order = np.argsort(lat, kind="stable")
    keep = order if wait_for is None else order[: int(wait_for)]
    if deadline is not None:
        keep = keep[lat[keep] <= deadline]
    return np.sort(keep)


@dataclass(frozen=True)
class Collected:
    """Stragglers decided by time: draw each worker's delay from a latency model, keep what a collection
    policy keeps (the first `wait_for`, those before `deadline`, or both, whichever stops first).

    This is the runtime's stop rule without the runtime, so `simulate` can explore deadlines offline.
    """

    latency: LatencyModel
    wait_for: int | None = None
    deadline: float | None = None

    def __post_init__(self):
        if not isinstance(self.latency, LatencyModel):
            raise ValueError(f"latency must be a gencc LatencyModel, got {self.latency!r}")
        object.__setattr__(self, "wait_for", check_int("wait_for", self.wait_for, 1, optional=True))
        object.__setattr__(self, "deadline", check_positive("deadline", self.deadline, optional=True,
                                                            unit="seconds"))

    def check(self, N: int) -> None:
        if self.wait_for is not None and self.wait_for > N:
            raise ValueError(f"wait_for={self.wait_for} exceeds the N={N} workers")

    def draw(self, N: int, rng: np.random.Generator) -> np.ndarray:
        return first_returned(self.latency.sample(N, rng), self.wait_for, self.deadline)

    def describe(self) -> dict:
        return {"S": None, "p": None, "pattern": f"latency:{type(self.latency).__name__}",
                "wait_for": self.wait_for, "deadline": self.deadline}


# ----- worst-case search ---------------------------------------------------------------------------------
@dataclass
class WorstCase:
    """The worst straggler set found: `returned`, its `loss`, and whether the search was exhaustive."""

    returned: np.ndarray
    stragglers: np.ndarray
    loss: float
    exact: bool
    evaluated: int = 0


def worst_case_returned(
    loss: Callable[[np.ndarray], float],
    N: int,
    S: int,
    exact_limit: int = 5000,
    n_starts: int = 3,
    max_rounds: int = 50,
    window: int = 4,
) -> WorstCase:
    """Maximise loss(returned) over returned sets of size N - S.

    Exact by enumeration when C(N, S) <= exact_limit. Otherwise: every contiguous block of S workers (edges
    included), then greedy single swaps from the `n_starts` worst blocks (a straggler moves to any
    non-straggler within `window` positions, or anywhere when S (N - S) is small) until no swap helps.
    The result is then a lower bound of the true worst case (`exact` False).
    """
    FixedCount(S).check(N)
    everyone = np.arange(N)
    if S == 0:
        r = everyone
        return WorstCase(r, np.zeros(0, int), float(loss(r)), True, 1)
    total = comb(N, S)
    if total <= exact_limit:
        best, best_loss = None, -np.inf
        for st in combinations(range(N), S):
            r = np.setdiff1d(everyone, st)
            val = float(loss(r))
            if val > best_loss:
                best, best_loss = np.array(st), val
        return WorstCase(np.setdiff1d(everyone, best), best, best_loss, True, total)
    cache: dict[tuple, float] = {}

    def value(st: np.ndarray) -> float:
        key = tuple(sorted(st.tolist()))
        if key not in cache:
            cache[key] = float(loss(np.setdiff1d(everyone, st)))
        return cache[key]

    blocks = [np.arange(s, s + S) for s in range(N - S + 1)]
    vals = [value(b) for b in blocks]
    starts = [blocks[i] for i in np.argsort(vals)[::-1][:n_starts]]
    full = S * (N - S) <= 400
    best, best_loss = starts[0], value(starts[0])
    for st in starts:
        cur, cur_loss = st.copy(), value(st)
        for _ in range(max_rounds):
            improved = False
            for i in range(S):
                cand = everyone if full else np.arange(max(cur[i] - window, 0), min(cur[i] + window + 1, N))
                for c in cand:
                    if c in cur:
                        continue
                    trial = cur.copy()
                    trial[i] = c
                    v = value(trial)
                    if v > cur_loss:
                        cur, cur_loss, improved = trial, v, True
            if not improved:
                break
        if cur_loss > best_loss:
            best, best_loss = cur, cur_loss
    best = np.sort(best)
    return WorstCase(np.setdiff1d(everyone, best), best, best_loss, False, len(cache))
