"""The executor protocol: tasks go out, completions come back, in finishing order.

An executor runs tasks (one coded input per logical worker) and reports completions; it knows nothing of
codes. LocalExecutor (threads or processes) and RayExecutor implement it.
"""

from __future__ import annotations

import pickle
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrays import to_numpy


@dataclass(frozen=True)
class Task:
    """One logical worker's work: apply f to `x` (one input, not a batch), deliver `delay` seconds later.

    `fn`, when set, replaces the job's f for this task (a code whose workers run different functions, e.g.
    ParM's parity model). Executors whose workers are other processes ship it once per process through a
    `FunctionTable` and build it there.
    """

    worker: int
    x: Any
    delay: float = 0.0
    fn: Callable | None = None


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


def describe_error(e: BaseException) -> str:
    """An exception as a straggler reason: its type and message."""
    return f"{type(e).__name__}: {e}"


class Constant:
    """A picklable factory returning a fixed callable (ships a plain f to a process or an actor)."""

    def __init__(self, f: Callable):
        self.f = f

    def __call__(self) -> Callable:
        return self.f


class FunctionTable:
    """Numbers the functions tasks carry (`Task.fn`) so that an executor whose workers are other processes ships
    each one once and each process builds it once: what travels is `dumps(fn)` (a pickle, or a Ray object
    ref), and a gencc workload model pickles as its factory, so the model itself is built on the worker."""

    def __init__(self, dumps: Callable[[Any], Any] = pickle.dumps):
        self._dumps = dumps
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[Callable, int, Any]] = {}

    def entry(self, fn: Callable, where: str) -> tuple[int, Any]:
        """(the key of `fn`, its payload); a ValueError when `fn` cannot be shipped."""
        with self._lock:
            e = self._entries.get(id(fn))
            if e is None or e[0] is not fn:  # the table holds fn, so its id is not reused while listed
                try:
                    payload = self._dumps(fn)
                except Exception as err:
                    raise ValueError(f"{where} ships a worker's own function (e.g. ParM's parity model) to its "
                                     f"process, so it must pickle: {describe_error(err)}") from err
                e = (fn, len(self._entries), payload)
                self._entries[id(fn)] = e
            return e[1], e[2]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
