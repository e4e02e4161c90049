"""The job layer: encode, dispatch to an executor, collect by a stop rule, decode.

An executor runs tasks (one coded input per logical worker) and reports completions; it knows nothing of
codes. A collection policy decides when to stop and how to turn the valid results into outputs. A worker
that raises, returns a non-finite or wrongly shaped output, is late, or is lost is a straggler: it is listed
with its reason and its result is never used.
"""

from __future__ import annotations

import queue
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._arrays import is_torch, to_numpy
from ..codes.base import Code
from ..stragglers import LatencyModel

#: default hard timeout (seconds) of a job that cannot yet decode
DEFAULT_TIMEOUT = 60.0


class JobFailed(RuntimeError):
    """Every task has finished or failed and the valid results are too few to decode."""

    def __init__(self, message: str, stragglers: dict[int, str] | None = None):
        super().__init__(message)
        self.stragglers = dict(stragglers or {})


class JobTimeout(JobFailed, TimeoutError):
    """The hard timeout passed before enough valid results arrived to decode."""


# ----- what executors exchange with the job layer --------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """One logical worker's work: apply f to `x` (one input, not a batch), deliver `delay` seconds later.

    `fn`, when set, replaces the job's f for this task (a code whose workers run different functions, e.g.
    ParM's parity model); only in-process executors run such tasks.
    """

    worker: int
    x: Any
    delay: float = 0.0
    fn: Callable | None = None


def refuse_task_functions(tasks: Sequence[Task], where: str) -> None:
    """Raise a ValueError when a task carries its own function, which `where` cannot run."""
    if any(t.fn is not None for t in tasks):
        raise ValueError(f"{where} runs one function built from its factory on every worker, but this code gives "
                         "some workers their own function (ParM's parity model); run it on a thread-backed "
                         "LocalExecutor (the default)")


@dataclass(frozen=True)
class Completion:
    """What came back from a worker: a value, or an error message (`value` None)."""

    worker: int
    value: Any = None
    error: str | None = None
    compute_time: float = float("nan")
    lost: bool = False


class Batch(ABC):
    """The tasks of one job on an executor: completions arrive in finishing order."""

    @abstractmethod
    def next(self, timeout: float | None) -> Completion | None:
        """The next completion, or None when `timeout` seconds pass first."""

    @abstractmethod
    def add(self, tasks: Sequence[Task]) -> None:
        """Dispatch more tasks in this job (hedged requests)."""

    @abstractmethod
    def cancel(self, workers: Sequence[int]) -> None:
        """Ask the workers to stop (cooperatively); their results, if any, are never delivered."""

    @abstractmethod
    def close(self) -> None:
        """Release what the batch holds; outstanding tasks are cancelled."""


class QueueBatch(Batch):
    """A batch whose completions are pushed into a thread-safe queue (the local executor's)."""

    def __init__(self, submit: Callable[[QueueBatch, Task], None]):
        self._q: queue.Queue[Completion] = queue.Queue()
        self._submit = submit
        self._events: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self.closed = threading.Event()

    def event(self, worker: int) -> threading.Event:
        """The cancellation flag of a worker's task."""
        with self._lock:
            return self._events.setdefault(worker, threading.Event())

    def deliver(self, c: Completion) -> None:
        if not self.closed.is_set() and not self.event(c.worker).is_set():
            self._q.put(c)

    def next(self, timeout: float | None) -> Completion | None:
        try:
            return self._q.get(timeout=timeout) if timeout is None or timeout > 0 else self._q.get_nowait()
        except queue.Empty:
            return None

    def add(self, tasks: Sequence[Task]) -> None:
        for t in tasks:
            self.event(t.worker)
            self._submit(self, t)

    def cancel(self, workers: Sequence[int]) -> None:
        for w in workers:
            self.event(int(w)).set()

    def close(self) -> None:
        self.closed.set()
        with self._lock:
            for e in self._events.values():
                e.set()


class Executor(ABC):
    """Runs tasks on logical workers. Subclasses: LocalExecutor (threads or processes), RayExecutor."""

    @abstractmethod
    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        """Start a job's tasks; `f` may be None when the executor was built from a factory."""

    @abstractmethod
    def close(self) -> None:
        """Free the executor's workers."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def call_one(f: Callable, x: Any) -> np.ndarray:
    """f applied to one input: batched functions (f.batched True) get a batch of one."""
    if getattr(f, "batched", False):
        y = f(x[None])
        y = to_numpy(y)
        y = np.asarray(y)
        if y.ndim == 0 or y.shape[0] != 1:
            raise ValueError(f"batched f returned shape {y.shape} for a batch of one input")
        return y[0]
    return np.asarray(to_numpy(f(x)))


# ----- the result ------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    """The outcome of one job.

    outputs: (K, *out_shape) estimates in the caller's order (same array kind as X).
    returned: sorted worker indices whose results were used. stragglers: worker index -> reason.
    timings: seconds for encode, dispatch, first_result (from dispatch), decode, total.
    arrivals: worker -> seconds from dispatch to its completion (every completion, valid or not).
    missing: inputs with no estimate (only replication-style schemes have any; their rows are zero).
    """

    outputs: Any
    returned: np.ndarray
    stragglers: dict[int, str]
    timings: dict[str, float]
    scheme: str = ""
    K: int = 0
    N: int = 0
    arrivals: dict[int, float] = field(default_factory=dict)
    missing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def latency(self) -> float:
        """End-to-end seconds of the job (timings['total'])."""
        return self.timings["total"]


# ----- collection policies -----------------------------------------------------------------------------
class Policy(ABC):
    """Decides when a job stops and assembles the outputs from the valid results."""

    N: int

    @abstractmethod
    def decodable(self, valid: dict[int, np.ndarray]) -> bool: ...

    @abstractmethod
    def satisfied(self, valid: dict[int, np.ndarray], elapsed: float) -> bool:
        """True when the stop rule is met (the caller also requires decodable)."""

    def wakeup(self, elapsed: float) -> float | None:
        """Seconds from dispatch at which the policy wants to be asked again (deadline, hedge)."""
        return None

    def extra_tasks(self, valid: dict[int, np.ndarray], outstanding: set[int], elapsed: float) -> list[Task]:
        """Tasks to add now (hedging); the default adds none."""
        return []

    @abstractmethod
    def assemble(self, valid: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(outputs in the code's input order, used workers sorted, missing inputs)."""


class CodedPolicy(Policy):
    """Stop at the first `wait_for` valid results, at `deadline` seconds, or both (whichever first), never
    before the code can decode (every input estimated); with neither, wait for every worker."""

    def __init__(self, code: Code, wait_for: int | None, deadline: float | None):
        self.code, self.N, self.wait_for, self.deadline = code, code.N, wait_for, deadline

    def decodable(self, valid: dict[int, np.ndarray]) -> bool:
        r = sorted(valid)
        return self.code.can_decode(r) and self.code.missing(r).size == 0

    def satisfied(self, valid: dict[int, np.ndarray], elapsed: float) -> bool:
        if self.wait_for is None and self.deadline is None:
            return False
        if self.wait_for is not None and len(valid) >= self.wait_for:
            return True
        return self.deadline is not None and elapsed >= self.deadline

    def wakeup(self, elapsed: float) -> float | None:
        return self.deadline if self.deadline is not None and elapsed < self.deadline else None

    def assemble(self, valid: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r = np.array(sorted(valid), dtype=np.int64)
        Y = np.stack([valid[int(w)] for w in r]).astype(float, copy=False)
        return np.asarray(self.code.decode(Y, r)), r, np.asarray(self.code.missing(r), dtype=np.int64)


# ----- validation helpers --------------------------------------------------------------------------------
def _check_int(name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
    return int(v)


def check_deadline(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not deadline > 0 \
            or not np.isfinite(deadline):
        raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")
    return float(deadline)


def check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


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


def as_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def check_inputs(X: Any, K: int) -> np.ndarray:
    """X as numpy, checked: first dimension K, numeric, finite."""
    if X is None or not hasattr(X, "shape") and not isinstance(X, (list, tuple)):
        raise ValueError(f"X must be an array of shape (K={K}, *in_shape), got {type(X).__name__}")
    Xn = np.asarray(to_numpy(X))
    if Xn.ndim == 0 or Xn.shape[0] != K:
        raise ValueError(f"X must have first dimension K={K} (one row per input), got shape {Xn.shape}")
    if Xn.dtype == object or not np.issubdtype(Xn.dtype, np.number):
        raise ValueError(f"X must be numeric, got dtype {Xn.dtype}")
    if not np.all(np.isfinite(Xn)):
        raise ValueError("X contains non-finite values (NaN or inf); coded computing needs finite inputs")
    return Xn


def restore_kind(out: np.ndarray, X: Any) -> Any:
    """numpy out for numpy in; a torch tensor on X's device (X's float dtype) for torch in."""
    if is_torch(X):
        import torch

        dtype = X.dtype if X.is_floating_point() else torch.get_default_dtype()
        return torch.as_tensor(out, device=X.device).to(dtype)
    return out


# ----- the collection loop -------------------------------------------------------------------------------
def collect(batch: Batch, policy: Policy, timeout: float, t_dispatch: float,
            outstanding: set[int]) -> tuple[dict[int, np.ndarray], dict[int, str], dict[int, float], float]:
    """Gather completions until the policy stops; returns (valid, stragglers, arrivals, first_result).

    Validation: errors and lost workers are stragglers at once; non-finite outputs likewise; shapes are
    judged against the most common shape among the finite results, so one worker with a wrong shape can
    never set the reference.
    """
    finite: dict[int, np.ndarray] = {}
    stragglers: dict[int, str] = {}
    arrivals: dict[int, float] = {}
    first = float("nan")

    def valid_now() -> dict[int, np.ndarray]:
        if not finite:
            return {}
        shapes = Counter(v.shape for v in finite.values())
        ref = max(shapes, key=lambda s: (shapes[s], -min(w for w, v in finite.items() if v.shape == s)))
        return {w: v for w, v in finite.items() if v.shape == ref}

    valid: dict[int, np.ndarray] = {}
    while True:
        elapsed = time.perf_counter() - t_dispatch
        for t in policy.extra_tasks(valid, outstanding, elapsed):
            outstanding.add(t.worker)
            batch.add([t])
        decodable = policy.decodable(valid)
        if decodable and (policy.satisfied(valid, elapsed) or not outstanding):
            break
        if not outstanding:
            raise JobFailed(_too_few(policy, valid, finite, stragglers, "every worker has answered or failed"),
                            _reasons(stragglers, finite, valid))
        if elapsed >= timeout:
            raise JobTimeout(_too_few(policy, valid, finite, stragglers, f"hard timeout of {timeout:g} s passed"),
                             _reasons(stragglers, finite, valid))
        limit = timeout - elapsed
        wake = policy.wakeup(elapsed)
        if wake is not None:
            limit = min(limit, max(wake - elapsed, 0.0))
        c = batch.next(max(limit, 0.0))
        if c is None:
            continue
        # one completion at a time, so "the first wait_for" is exact even when several arrive together
        now = time.perf_counter() - t_dispatch
        if np.isnan(first):
            first = now
        outstanding.discard(c.worker)
        arrivals[c.worker] = now
        if c.lost:
            stragglers[c.worker] = f"lost: {c.error}"
        elif c.error is not None:
            stragglers[c.worker] = f"raised: {c.error}"
        else:
            try:
                v = np.asarray(c.value, dtype=float)
            except (TypeError, ValueError) as e:
                stragglers[c.worker] = f"wrong shape: output is not a numeric array ({e})"
            else:
                if not np.all(np.isfinite(v)):
                    stragglers[c.worker] = "non-finite output (NaN or inf)"
                else:
                    finite[c.worker] = v
        valid = valid_now()
    return valid, _reasons(stragglers, finite, valid), arrivals, first


def _reasons(stragglers: dict[int, str], finite: dict[int, np.ndarray], valid: dict[int, np.ndarray]) -> dict:
    out = dict(stragglers)
    if valid:
        ref = next(iter(valid.values())).shape
        for w, v in finite.items():
            if w not in valid:
                out[w] = f"wrong shape: output {v.shape}, expected {ref}"
    return out


def _too_few(policy: Policy, valid: dict, finite: dict, stragglers: dict, why: str) -> str:
    reasons = _reasons(stragglers, finite, valid)
    listed = "; ".join(f"worker {w}: {r}" for w, r in sorted(reasons.items())[:6])
    more = f" (and {len(reasons) - 6} more)" if len(reasons) > 6 else ""
    return (f"job cannot decode: {why} with {len(valid)} valid result(s) of N={policy.N}, not enough to "
            f"estimate every input. Stragglers: {listed or 'none yet'}{more}. Raise the timeout, add workers, "
            "or fix the failing workers.")


def execute(executor: Executor, f: Callable | None, tasks: list[Task], policy: Policy, timeout: float,
            t_start: float, t_encode: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict, dict, dict]:
    """Dispatch `tasks`, collect by `policy`, cancel the rest, assemble.

    Returns (outputs, used workers, missing inputs, stragglers, arrivals, timings).
    """
    t0 = time.perf_counter()
    batch = executor.submit(f, tasks)
    t_dispatch = time.perf_counter() - t0
    try:
        outstanding = {t.worker for t in tasks}
        valid, stragglers, arrivals, first = collect(batch, policy, timeout, t0, outstanding)
        if outstanding:
            batch.cancel(sorted(outstanding))
        for w in outstanding:
            stragglers.setdefault(w, "late: no result when the job stopped")
    finally:
        batch.close()
    t1 = time.perf_counter()
    out, used, missing = policy.assemble(valid)
    t_dec = time.perf_counter() - t1
    stragglers.update(getattr(policy, "excluded", {}))  # results a robust decode flagged and left out
    for w in valid:
        if w not in set(used.tolist()):
            stragglers.setdefault(w, "unused: another replica answered first")
    timings = {"encode": t_encode, "dispatch": t_dispatch, "first_result": first, "decode": t_dec,
               "total": time.perf_counter() - t_start}
    return out, used, missing, stragglers, arrivals, timings
