"""The executor protocol of jobs: tasks go out, completions come back, in finishing order.

An executor runs a job's tasks (one coded input per logical worker, `gencc.engine.Task`) on the engine's
long-lived workers and reports completions; it knows nothing of codes. `LocalExecutor` (threads or processes)
and `RayExecutor` (one actor per worker) are the two, both `EngineExecutor`s: worker n of a job runs on the
engine's worker n, whose FIFO queue holds the tasks of every job in flight. A task a job no longer needs is
cancelled: dropped if it has not started, stopped at its injected delay if it has (its thread is replaced).
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine import Task, Workers


@dataclass(slots=True)
class Completion:
    """What came back from a worker: a value, or an error message (`value` None). (A plain slotted record: a
    job makes one per task, and a frozen dataclass costs three times as much to build.)"""

    worker: int
    value: Any = None
    error: str | None = None
    compute_time: float = float("nan")
    lost: bool = False
    finite: bool | None = None  # whether `value` is finite, when the executor checked it already (None: unknown)


def completion(task: Task) -> Completion | None:
    """A finished engine task as a job's completion (None: cancelled, never delivered)."""
    w = task.slot
    if task.ok:  # a backend fails a non-finite output (gencc.engine.backends), so an ok one is finite unless
        # the injection corrupted it afterwards
        return Completion(w, task.output, None, task.compute_time, False, None if task.wrong else True)
    if task.reason == "cancelled":
        return None
    if task.reason == "crash":
        return Completion(w, error=task.error, lost=True)
    if task.reason == "nan" and task.output is not None:  # judged by the collector: a non-finite output
        return Completion(w, value=task.output, compute_time=task.compute_time)
    return Completion(w, error=task.error, compute_time=task.compute_time)


class Batch(ABC):
    """The tasks of one job on an executor: completions arrive in finishing order."""

    @abstractmethod
    def next(self, timeout: float | None) -> Completion | None:
        """The next completion, or None when `timeout` seconds pass first."""

    def ready(self) -> bool:
        """Whether a completion is there to take without waiting (False: unknown or none)."""
        return False

    def take(self, timeout: float | None) -> list[Completion]:
        """The completions there now, waiting up to `timeout` seconds for the first ([]: none came)."""
        c = self.next(timeout)
        if c is None:
            return []
        out = [c]
        while self.ready():
            c = self.next(0.0)
            if c is None:
                break
            out.append(c)
        return out

    @abstractmethod
    def add(self, tasks: Sequence[Task]) -> None:
        """Dispatch more tasks in this job (hedged requests)."""

    @abstractmethod
    def cancel(self, workers: Sequence[int]) -> None:
        """Ask the workers to stop (cooperatively); their results, if any, are never delivered."""

    @abstractmethod
    def close(self) -> None:
        """Release what the batch holds; outstanding tasks are cancelled."""


class EngineBatch(Batch):
    """A job's tasks on the engine's `Workers`: logical worker n runs on engine worker n, a task without a
    function of its own runs `fn`; completions are queued by whichever thread delivers them (the engine's
    control thread, or a worker thread when the workers deliver inline)."""

    def __init__(self, workers: Workers, fn: Callable | str | None = None):
        self.workers, self._fn = workers, fn
        self._q: queue.SimpleQueue[list[Completion]] = queue.SimpleQueue()
        self._ready: deque[Completion] = deque()  # completions taken from the queue, not yet handed out
        self._tasks: list[Task] = []  # every task dispatched in this job (a hedge adds to it)
        self._rank: dict[int, int] = {}  # worker -> when its first task was dispatched (0, 1, ...)
        self._lock = threading.Lock()
        self.closed = False

    def _done(self, task: Task) -> None:
        self.on_done_many((task,))

    def on_done_many(self, tasks: Sequence[Task]) -> None:
        """Several finished tasks at once (the engine's inline delivery): one hand-off to the collector, in
        the order they were dispatched. A thread runs its workers' ready tasks in worker order; results that
        finish together then keep the job's (random) dispatch order, so a collector that needs fewer than all
        of them does not always take the lowest-numbered workers (a block of stragglers at the edge)."""
        if self.closed:
            return
        if len(tasks) > 1:
            rank = self._rank
            tasks = sorted(tasks, key=lambda t: rank.get(t.slot, 0))
        cs = [c for t in tasks if not t.cancelled and (c := completion(t)) is not None]
        if cs:
            self._q.put(cs)

    def ready(self) -> bool:
        return bool(self._ready) or not self._q.empty()

    def next(self, timeout: float | None) -> Completion | None:
        if not self._ready:
            try:
                self._ready.extend(self._q.get(timeout=timeout) if timeout is None or timeout > 0
                                   else self._q.get_nowait())
            except queue.Empty:
                return None
        return self._ready.popleft()

    def take(self, timeout: float | None) -> list[Completion]:
        out = list(self._ready)
        self._ready.clear()
        q = self._q
        if not out:
            try:
                out = q.get(timeout=timeout) if timeout is None or timeout > 0 else q.get_nowait()
            except queue.Empty:
                return []
        while not q.empty():  # whatever else came meanwhile (only this thread takes from the queue)
            out = out + q.get_nowait()
        return out

    def add(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            return
        fn, done, rank = self._fn, self._done, self._rank
        top = 0
        with self._lock:
            for t in tasks:
                t.slot = w = int(t.worker)
                if w not in rank:
                    rank[w] = len(rank)
                t.on_done = done
                if t.fn is None:
                    t.fn = fn
                if w >= top:
                    top = w + 1
            self._tasks += tasks
        if top > self.workers.n_workers:  # a hedge may reach workers beyond the job's first tasks
            self.workers.grow(top)
        self.workers.send_many([(t.slot, t) for t in tasks])

    def cancel(self, workers: Sequence[int]) -> None:
        stop = {int(w) for w in workers}
        with self._lock:
            tasks = [t for t in self._tasks if t.slot in stop]
        for t in tasks:
            t.cancel()

    def close(self) -> None:
        self.closed = True
        with self._lock:
            # finished ones need no cancel (a stale read of a task finishing now only cancels a finished task)
            tasks = [t for t in self._tasks if t.state != "done"]
            self._tasks = []  # no cycle task -> on_done -> batch -> task: a job's objects go without the cyclic GC
        for t in tasks:
            t.cancel()


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
