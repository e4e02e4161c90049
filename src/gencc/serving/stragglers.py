"""Service-time models shared by the real pool and the simulator: persistent slow states, per-task noise, faults."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..stragglers import ShiftedExponential
from .core import FAULTS


class PersistentStragglers:
    """Each worker alternates normal and slow periods (exponential lengths); slow for about `fraction` of the
    time, `factor` times slower while slow. Periods are drawn lazily per worker from one seeded stream, so the
    real pool and the simulator see the same kind of process. `mean_slow_s`: mean length of a slow period."""

    def __init__(self, n_workers: int, fraction: float = 0.0, factor: float = 1.0, mean_slow_s: float = 1.0,
                 seed: int = 0):
        if not 0 <= fraction < 1:
            raise ValueError(f"slow fraction must lie in [0, 1), got {fraction}")
        if not factor >= 1:
            raise ValueError(f"slow factor must be at least 1, got {factor}")
        if not mean_slow_s > 0:
            raise ValueError(f"mean slow period must be positive, got {mean_slow_s}")
        self.fraction, self.factor, self.mean_slow = float(fraction), float(factor), float(mean_slow_s)
        self.mean_normal = self.mean_slow * (1 - self.fraction) / self.fraction if self.fraction > 0 else np.inf
        self._rng = [np.random.default_rng([seed, w]) for w in range(n_workers)]
        # per worker: switch times (ascending) and the state from the first switch on
        self._edges: list[list[float]] = [[0.0] for _ in range(n_workers)]
        self._slow0 = [bool(r.random() < self.fraction) for r in self._rng]

    def slow(self, worker: int, t: float) -> bool:
        """Whether `worker` is in a slow period at time t >= 0."""
        if self.fraction == 0:
            return False
        edges, rng = self._edges[worker], self._rng[worker]
        while edges[-1] <= t:
            slow_now = self._slow0[worker] ^ (len(edges) % 2 == 0)
            edges.append(edges[-1] + rng.exponential(self.mean_slow if slow_now else self.mean_normal))
        i = bisect.bisect_right(edges, t)  # period i - 1 holds t
        return self._slow0[worker] ^ ((i - 1) % 2 == 1)

    def multiplier(self, worker: int, t: float) -> float:
        return self.factor if self.slow(worker, t) else 1.0


@dataclass(frozen=True)
class Faults:
    """Per-task fault probabilities (a failed task is a straggler): raise, NaN output, hang for `hang_s`,
    crash (the worker dies: a killed Ray actor; the local pool marks the worker dead)."""

    raise_p: float = 0.0
    nan_p: float = 0.0
    hang_p: float = 0.0
    crash_p: float = 0.0
    hang_s: float = 1.0

    def __post_init__(self):
        ps = (self.raise_p, self.nan_p, self.hang_p, self.crash_p)
        if any(not 0 <= p <= 1 for p in ps) or sum(ps) > 1:
            raise ValueError(f"fault probabilities must lie in [0, 1] and sum to at most 1, got {ps}")
        if not self.hang_s >= 0:
            raise ValueError(f"hang_s must be non-negative, got {self.hang_s}")

    def draw(self, rng: np.random.Generator) -> str:
        """'' (no fault) or one of FAULTS."""
        u = rng.random()
        for name, p in zip(FAULTS, (self.raise_p, self.nan_p, self.hang_p, self.crash_p), strict=True):
            if u < p:
                return name
            u -= p
        return ""


class ServiceTimes:
    """Injected base service time per task in seconds: a shifted exponential with mean `mean_s` (90% fixed,
    10% exponential noise), or draws from measured `samples` (the simulator's calibration)."""

    def __init__(self, mean_s: float = 0.0, samples: Sequence[float] | None = None):
        if samples is not None:
            self.samples = np.asarray(samples, dtype=float)
            if self.samples.size == 0 or not np.all(self.samples >= 0):
                raise ValueError("service-time samples must be a non-empty set of non-negative seconds")
        else:
            self.samples = None
            if not mean_s >= 0:
                raise ValueError(f"service time must be non-negative, got {mean_s}")
        self.mean_s = float(mean_s if samples is None else self.samples.mean())
        self._model = ShiftedExponential(0.9 * mean_s, 1 / (0.1 * mean_s)) if mean_s > 0 else None

    def draw(self, rng: np.random.Generator) -> float:
        if self.samples is not None:
            return float(self.samples[rng.integers(self.samples.size)])
        return 0.0 if self._model is None else float(self._model.sample(1, rng)[0])
