"""Injection, one family for every engine backend and simulator: latency, slowness, faults, wrong results.

- Latency models (`ShiftedExponential`, `Pareto`, `Bimodal`): per-task delivery delays in seconds (a job's
  `latency=`); `draw_delays` turns a model or an array into N delays.
- `PersistentStragglers`: each worker alternates normal and slow periods (slow: `factor` times slower).
- `ServiceTimes`: injected base service time per task (the time a worker is busy beyond f's own compute).
- `Faults`: per-task raise / NaN / hang / crash probabilities; `WrongResults`: finite but wrong results, from a
  `gencc.adversaries` model. A failed task is a straggler, never a crash of the master.
- `run_injected`: f on one input under an injection plan (the one place a worker applies it).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._util.validate import check_nonneg, check_positive, check_probability, check_real
from ..errors import Cancelled, InjectedFault
from ..model import apply_one
from .adversaries import Adversary, Noise, Offset, RandomValues, SignFlip

#: failure reasons a worker reports (a failed task is a straggler, never a crash)
FAULTS = ("raise", "nan", "hang", "crash")
#: adversaries that corrupt one result on its own (the others need the group and the code)
PER_RESULT = (Noise, Offset, RandomValues, SignFlip)


class LatencyModel:
    """Draws per-worker completion delays in seconds (added to the real compute time by a runtime)."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class ShiftedExponential(LatencyModel):
    """T = shift + Exp(rate): a minimum service time plus a memoryless tail (mean shift + 1/rate)."""

    shift: float = 0.0
    rate: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "shift", check_nonneg("shift", self.shift, unit="seconds"))
        object.__setattr__(self, "rate", check_positive("rate", self.rate, unit="per second"))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.shift + rng.exponential(1.0 / self.rate, size=n)


@dataclass(frozen=True)
class Pareto(LatencyModel):
    """Heavy tail: T = x_m (1 + Lomax(a)), so T >= x_m with P(T > t) = (x_m / t)^a."""

    x_m: float = 1.0
    a: float = 2.0

    def __post_init__(self):
        object.__setattr__(self, "x_m", check_positive("x_m", self.x_m, unit="seconds"))
        object.__setattr__(self, "a", check_positive("a", self.a))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.x_m * (1.0 + rng.pareto(self.a, size=n))


@dataclass(frozen=True)
class Bimodal(LatencyModel):
    """A worker is slow with probability p, and then `factor` times slower than the base latency."""

    p: float = 0.05
    factor: float = 10.0
    base: float | LatencyModel = 1.0

    def __post_init__(self):
        object.__setattr__(self, "p", check_probability("p", self.p))
        object.__setattr__(self, "factor", check_real("factor", self.factor, 1.0))
        if not isinstance(self.base, LatencyModel):
            object.__setattr__(self, "base", check_real("base", self.base, 0.0, unit="seconds",
                                                        what="a non-negative number of seconds or a LatencyModel"))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        base = self.base.sample(n, rng) if isinstance(self.base, LatencyModel) else np.full(n, float(self.base))
        slow = rng.random(n) < self.p
        return np.where(slow, base * self.factor, base)


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


class WrongResults:
    """Workers that return wrong but finite results (silent corruption; DESIGN section 9), for tests and
    benchmarks: every result of the `workers` listed (a bad accelerator) and each other result with
    probability `p` (a mercurial core) is corrupted by `model`, one of `gencc.adversaries` that perturbs a
    result on its own (default `Noise(1, scale)`: out + scale * rms(out) * z, z standard normal; the unit of a
    single result's perturbation is its rms). The dispatcher is never told; the task's `wrong` flag records the
    truth for measurement only."""

    def __init__(self, workers: Sequence[int] = (), p: float = 0.0, scale: float = 1.0,
                 model: Adversary | None = None):
        self.workers = frozenset(int(w) for w in workers)
        if any(w < 0 for w in self.workers):
            raise ValueError(f"wrong-result workers must be non-negative indices, got {sorted(self.workers)}")
        if not 0 <= p <= 1:
            raise ValueError(f"wrong-result probability must lie in [0, 1], got {p}")
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"wrong-result scale must be a positive number, got {scale}")
        if model is not None and not (isinstance(model, Adversary) and model.per_result):
            names = ", ".join(c.__name__ for c in PER_RESULT)
            raise ValueError(f"model must be an adversary of gencc.adversaries that corrupts one result on its own "
                             f"(e.g. {names}, or a plausible family such as Scaled or Permute), got {model!r}")
        self.p, self.scale = float(p), float(scale)
        self.model = model if model is not None else Noise(1, self.scale)

    def corrupt(self, worker: int, out: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
        """(the result worker `worker` returns, whether it is wrong)."""
        if worker not in self.workers and not (self.p > 0 and rng.random() < self.p):
            return out, False
        out = np.asarray(out, dtype=float)
        rms = float(np.sqrt(np.mean(out ** 2))) or 1.0
        return self.model.perturb_one(out, rms, rng), True


class ServiceTimes:
    """Injected base service time per task in seconds: a shifted exponential with mean `mean_s` (90% fixed,
    10% exponential noise), or draws from measured `samples` (the simulator's calibration).

    With `busy` (per sample: workers running a task when it started, itself included) a draw is conditional on
    the current number of busy workers: it comes from the samples measured at that count, widened to the nearest
    counts until `min_bucket` samples are in (counts above the largest measured use the largest). So a slowdown
    from a shared CPU is taken from the measurements, not assumed. With `starts` (per sample: when it started,
    on one run's clock) a draw at time t comes from the samples started within `window_s` of t (the nearest
    one if none): replaying that run, slowdowns that hit all workers at once (a stalled machine) stay at the
    time they happened instead of being spread over the run."""

    def __init__(self, mean_s: float = 0.0, samples: Sequence[float] | None = None,
                 busy: Sequence[int] | None = None, min_bucket: int = 50, starts: Sequence[float] | None = None,
                 window_s: float = 0.05):
        self._buckets: list[np.ndarray] | None = None
        self._starts: np.ndarray | None = None
        if samples is not None:
            self.samples = np.asarray(samples, dtype=float)
            if self.samples.ndim != 1 or self.samples.size == 0 or not np.all(self.samples >= 0):
                raise ValueError("service-time samples must be a non-empty set of non-negative seconds")
            if busy is not None:
                self._buckets = _buckets(self.samples, busy, min_bucket)
            if starts is not None:
                st = np.asarray(starts, dtype=float)
                if st.shape != self.samples.shape or not np.all(np.isfinite(st)) or not window_s >= 0:
                    raise ValueError(f"starts must hold one finite time per sample ({self.samples.size}) and "
                                     f"window_s must be non-negative; got shape {st.shape}, window_s={window_s}")
                order = np.argsort(st, kind="stable")
                self._starts, self._by_start, self.window_s = st[order], self.samples[order], float(window_s)
        else:
            self.samples = None
            if busy is not None or starts is not None:
                raise ValueError("busy counts and start times need measured samples (one per sample)")
            if not mean_s >= 0:
                raise ValueError(f"service time must be non-negative, got {mean_s}")
        self.mean_s = float(mean_s if samples is None else self.samples.mean())
        self._model = ShiftedExponential(0.9 * mean_s, 1 / (0.1 * mean_s)) if mean_s > 0 else None

    @property
    def conditional(self) -> bool:
        """Whether draws depend on the number of busy workers."""
        return self._buckets is not None

    def bucket_means(self) -> np.ndarray:
        """Mean service time (s) drawn at 1, 2, ... busy workers (conditional samples only)."""
        if self._buckets is None:
            raise ValueError("bucket_means needs samples with busy counts")
        return np.array([b.mean() for b in self._buckets[1:]])

    def draw(self, rng: np.random.Generator, busy: int = 0, t: float = 0.0) -> float:
        if self._starts is not None:
            st = self._starts
            lo = int(np.searchsorted(st, t - self.window_s, side="left"))
            hi = int(np.searchsorted(st, t + self.window_s, side="right"))
            if hi <= lo:  # nothing within the window: the nearest sample
                i = min(int(np.searchsorted(st, t)), st.size - 1)
                lo = i - 1 if i > 0 and t - st[i - 1] < st[i] - t else i
                hi = lo + 1
            return float(self._by_start[lo + rng.integers(hi - lo)])
        if self._buckets is not None:
            b = self._buckets[min(max(int(busy), 1), len(self._buckets) - 1)]
            return float(b[rng.integers(b.size)])
        if self.samples is not None:
            return float(self.samples[rng.integers(self.samples.size)])
        return 0.0 if self._model is None else float(self._model.sample(1, rng)[0])


def _buckets(samples: np.ndarray, busy: Sequence[int], min_bucket: int) -> list[np.ndarray]:
    """Per busy count k = 0..max (0 unused, as 1): the samples whose count lies within the smallest distance of
    k that holds at least `min_bucket` of them (all samples if fewer exist)."""
    b = np.asarray(busy)
    if b.shape != samples.shape or not np.issubdtype(b.dtype, np.integer) or np.any(b < 1):
        raise ValueError(f"busy must hold one positive integer count per sample ({samples.size}), got shape "
                         f"{b.shape} dtype {b.dtype}")
    if min_bucket < 1:
        raise ValueError(f"min_bucket must be positive, got {min_bucket}")
    top = int(b.max())
    out = []
    for k in range(top + 1):
        kk = max(k, 1)
        d = np.abs(b - kk)
        radius = np.sort(d)[min(min_bucket, d.size) - 1]
        out.append(samples[d <= radius])
    return out


def draw_delays(latency: LatencyModel | Sequence[float] | np.ndarray | None, n: int,
                rng: np.random.Generator) -> np.ndarray:
    """Per-worker injected delays: a latency model's draw, a given array (inf: never delivered), or zeros."""
    if latency is None:
        return np.zeros(n)
    if isinstance(latency, LatencyModel):
        d = np.asarray(latency.sample(n, rng), dtype=float)
    elif hasattr(latency, "sample"):
        raise ValueError(f"latency must be a gencc LatencyModel or an array of {n} delays, got {latency!r}")
    else:
        d = np.asarray(latency, dtype=float)
        if d.shape != (n,):
            raise ValueError(f"latency given as an array must hold one delay per worker: shape ({n},), "
                             f"got {d.shape}")
    if np.any(np.isnan(d)) or np.any(d < 0):
        raise ValueError("latency delays must be non-negative (inf means the worker never delivers)")
    return d


def run_injected(fn: Callable, x: Any, extra_s: float = 0.0, slow: float = 1.0, fault: str = "",
                 hang_s: float = 0.0, stop: threading.Event | None = None, batched: bool | None = None,
                 delay: float = 0.0) -> np.ndarray:
    """fn on one input (`gencc.model.apply_one`) with injected busy time (`extra_s` x `slow`, compute slowed by
    `slow` too) and a fault ('' none, or one of FAULTS but crash, which the backend enacts); `batched` as in
    `apply_one`. Then, failed or not, `delay` more seconds pass before the outcome is given (a job's injected
    latency; inf: never). Raises InjectedFault for an injected failure and a non-finite output, what fn raised,
    or Cancelled when `stop` is set during the delay; returns the float64 output."""
    try:
        out = _injected(fn, x, extra_s, slow, fault, hang_s, stop, batched)
    except Exception:
        _hold(delay, stop)
        raise
    _hold(delay, stop)
    return out


def _hold(delay: float, stop: threading.Event | None) -> None:
    if delay > 0:
        if stop is None:
            stop = threading.Event()
        if stop.wait(None if np.isinf(delay) else delay):
            raise Cancelled("cancelled")


def _injected(fn: Callable, x: Any, extra_s: float, slow: float, fault: str, hang_s: float,
              stop: threading.Event | None, batched: bool | None) -> np.ndarray:
    t0 = time.perf_counter()
    wait = stop.wait if stop is not None else time.sleep
    if fault == "hang":
        wait(hang_s)
        raise InjectedFault("hang")
    out = apply_one(fn, x, batched)
    compute = time.perf_counter() - t0
    rest = extra_s * slow + compute * (slow - 1)
    if rest > 0:
        wait(rest)
    if fault == "raise":
        raise InjectedFault("raise")
    if fault == "nan":
        out = out * np.nan
    if not np.all(np.isfinite(out)):
        raise InjectedFault("nan", out)
    return out
