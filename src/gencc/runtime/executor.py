"""The executor protocol of jobs: tasks go out, completions come back, in finishing order.

An executor runs a job's tasks (one coded input per logical worker, `gencc.engine.Task`) on the engine's
long-lived workers and reports completions; it knows nothing of codes. `LocalExecutor` (threads or processes),
`RayExecutor` (one actor per worker) and `RemoteExecutor` (model replicas over the Open Inference Protocol) all
run their tasks as an `EngineBatch`: worker n of a job runs on the engine's worker n, whose FIFO queue holds the
tasks of every job in flight. A task a job no longer needs is cancelled: dropped if it has not started, stopped at
its injected delay if it has (its thread is replaced).
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import attrgetter, gt, itemgetter, ne
from typing import Any

import numpy as np

from .._util.arrays import is_torch, take_rows
from ..engine import Task, Workers
from ..engine.batch import stack_inputs
from ..engine.task import describe_error


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


class JobTasks(Sequence[Task]):
    """A coded job's tasks in dispatch order: worker `workers[i]` computes f on row `workers[i]` of X, its
    result delivered `delays[workers[i]]` seconds late. The `Task`s are built on first access; an executor that
    sends them as one block takes `block()` instead and builds none."""

    def __init__(self, X: Any, workers: list[int], delays: list[float]):
        self.X, self.workers, self._delays = X, workers, delays
        self._tasks: list[Task] | None = None

    def _built(self) -> list[Task]:
        if self._tasks is None:
            X, delays = self.X, self._delays
            self._tasks = [Task(n, X[n], delays[n]) for n in self.workers]
        return self._tasks

    def bind(self, fn: Callable | str | None, on_done: Callable[[Task], None]) -> list[Task] | None:
        """The tasks built with their function, callback and slot (the worker) set, as an executor sends a job's
        first tasks (one pass, not a second one over built tasks); None when they were built already."""
        if self._tasks is not None:
            return None
        workers, rows = self.workers, list(self.X)  # the rows as views (or items), made in C
        xs, delays = map(rows.__getitem__, workers), map(self._delays.__getitem__, workers)
        self._tasks = list(map(Task, workers, xs, delays, repeat(fn), repeat(on_done), repeat("primary"), workers))
        return self._tasks

    def __len__(self) -> int:
        return len(self.workers)

    def __getitem__(self, i):  # type: ignore[override]
        return self._built()[i]

    def __iter__(self):
        return iter(self._built())

    def block(self) -> Any | None:
        """The inputs in dispatch order as one array (one copy), or None when the tasks carry delays or were
        built already (then they travel one by one)."""
        if self._tasks is not None or any(self._delays) or isinstance(self.X, list):
            return None
        return take_rows(self.X, self.workers)


@dataclass(slots=True)
class BlockCompletion:
    """Several workers' results that came back together as one block (a job's tasks sent as one block task):
    `values[i]` is worker `workers[i]`'s output, rows in the job's dispatch order. A collector takes the rows
    in that order, as it would take `rows()`; nothing about them is checked yet."""

    workers: list[int]
    values: np.ndarray  # float64, (len(workers), *out_shape)
    compute_time: float = float("nan")

    def rows(self, start: int = 0) -> list[Completion]:
        """The block's rows from `start` on as one completion per worker, in order."""
        ct = self.compute_time
        return [Completion(w, v, None, ct) for w, v in zip(self.workers[start:], self.values[start:], strict=True)]


def _block_completions(task: Task, rows: list[int]) -> list[Completion | BlockCompletion]:
    """A finished block task as its rows' completions (none when it was cancelled)."""
    if task.ok:
        out = task.output
        if type(out) is list:  # the block's call raised: each row was called on its own
            return [Completion(w, v, None, task.compute_time) if not isinstance(v, BaseException)
                    else Completion(w, error=describe_error(v), compute_time=task.compute_time)
                    for w, v in zip(rows, out, strict=True)]
        return [BlockCompletion(rows, out, task.compute_time)]
    if task.reason == "cancelled":
        return []
    lost = task.reason == "crash"
    return [Completion(w, error=task.error, compute_time=task.compute_time, lost=lost) for w in rows]


_F64 = np.dtype(np.float64)
_slot_of, _state_of, _first, _output_of = attrgetter("slot"), attrgetter("state"), itemgetter(0), attrgetter("output")


def _one_block(tasks: Sequence[Task]) -> bool:
    """Whether the finished tasks are all ok, uncancelled plain tasks (no block, no corrupted output) whose outputs
    are float64 numpy arrays of one shape: what `EngineBatch.on_done_many` takes as one block."""
    shape = tasks[0].output.shape if type(tasks[0].output) is np.ndarray else None
    for t in tasks:
        o = t.output
        if not t.ok or t.cancelled or t.block or t.wrong or type(o) is not np.ndarray or o.dtype is not _F64 \
                or o.shape != shape:
            return False
    return True


def _bulk(ws: list[int], vs: list[np.ndarray], cs: list, checked: bool = True) -> None:
    """Append the run of ok outputs (workers ws, outputs vs) to cs, as one block of rows when several (one
    copy; the collector checks its rows finite), and empty the run; `checked`: the workers checked each output
    finite already."""
    if len(ws) > 1:
        cs.append(BlockCompletion(ws[:], np.array(vs)))
    elif ws:
        cs.append(Completion(ws[0], vs[0], None, float("nan"), False, True if checked else None))
    ws.clear()
    vs.clear()


def completion(task: Task, checked: bool = True) -> Completion | None:
    """A finished engine task as a job's completion (None: cancelled, never delivered). `checked`: the workers
    fail a non-finite output (`Workers.check_finite`), so an ok one is finite unless the injection corrupted it
    afterwards; else the collector judges it."""
    w = task.slot
    if task.ok:
        return Completion(w, task.output, None, task.compute_time, False, None if task.wrong or not checked else True)
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
    control thread, or a worker thread when the workers deliver inline).

    blocks: the workers run a batched `fn` with nothing injected, so a job's first tasks would run as one call
    and finish together anyway: when they share `fn`, carry no delay and have inputs of one shape, they go as
    one block task (`Task.block`) on the engine worker of the first of them, and come back as one
    `BlockCompletion` (rows in dispatch order). Tasks added later (hedges) go one by one."""

    def __init__(self, workers: Workers, fn: Callable | str | None = None, *, blocks: bool = False):
        self.workers, self._fn, self._blocks = workers, fn, blocks
        self._q: queue.SimpleQueue[list[Completion | BlockCompletion]] = queue.SimpleQueue()
        self._ready: deque[Completion | BlockCompletion] = deque()  # taken from the queue, not yet handed out
        self._tasks: list[Task] = []  # every task dispatched in this job (a hedge adds to it)
        self._rank: dict[int, int] = {}  # worker -> when its first task was dispatched (0, 1, ...)
        self._block_rows: list[int] = []  # the logical workers of the block task, in dispatch order
        self._lock = threading.Lock()
        self._checked = workers.check_finite  # whether an ok output was checked finite
        self.closed = False

    def _as_block(self, tasks: Sequence[Task]) -> tuple[Task, list[int]] | None:
        """(the tasks as one block task, its rows' workers in order), when they can travel as one: see the class
        docstring (and one task per worker)."""
        if not self._blocks or self._tasks or len(tasks) < 2:
            return None
        if type(tasks) is JobTasks:  # one task per worker, inputs of one array
            x, rows = tasks.block(), list(tasks.workers)
            if x is None:
                return None
        else:
            x0 = tasks[0].x
            kind, shape = type(x0), getattr(x0, "shape", None)
            if shape is None or not (kind is np.ndarray or is_torch(x0)):
                return None
            for t in tasks:
                if t.fn is not None or t.delay != 0 or type(t.x) is not kind or t.x.shape != shape:
                    return None
            rows = [int(t.worker) for t in tasks]
            if len(set(rows)) < len(rows):
                return None
            x = stack_inputs([t.x for t in tasks])
        block = Task(rows[0], x, 0.0, self._fn, block=True)
        block.slot = rows[0]
        return block, rows

    def _done(self, task: Task) -> None:
        self.on_done_many((task,))

    def on_done_many(self, tasks: Sequence[Task]) -> None:
        """Several finished tasks at once (the engine's inline delivery): one hand-off to the collector, in
        the order they were dispatched. A thread runs its workers' ready tasks in worker order; results that
        finish together then keep the job's (random) dispatch order, so a collector that needs fewer than all
        of them does not always take the lowest-numbered workers (a block of stragglers at the edge)."""
        if self.closed:
            return
        if len(tasks) == 1 and tasks[0].block:  # a job's block task alone (the batched pool's common case)
            t = tasks[0]
            if not t.cancelled and (cs := _block_completions(t, self._block_rows)):
                self._q.put(cs)
            return
        if len(tasks) > 1:  # the ranks looked up in C; sorted only when out of order (one thread's are not)
            ranks = list(map(self._rank.get, map(_slot_of, tasks), repeat(0)))
            if any(map(gt, ranks, islice(ranks, 1, None))):
                tasks = [t for _, t in sorted(zip(ranks, tasks, strict=True), key=_first)]
        if len(tasks) > 1 and _one_block(tasks):  # the common case: one block of rows
            self._q.put([BlockCompletion(list(map(_slot_of, tasks)), np.array(list(map(_output_of, tasks))))])
            return
        cs: list[Completion | BlockCompletion] = []
        checked = self._checked
        ws: list[int] = []  # a run of ok float64 outputs of one shape: one BlockCompletion (the collector takes
        vs: list[np.ndarray] = []  # such rows together, up to where its policy may stop, see `collect`)
        shape = None
        for t in tasks:
            if t.cancelled:
                continue
            o = t.output
            if t.ok and not t.block and not t.wrong and type(o) is np.ndarray and o.dtype is _F64:
                if o.shape != shape:
                    _bulk(ws, vs, cs, checked)
                    shape = o.shape
                ws.append(t.slot)
                vs.append(o)
                continue
            _bulk(ws, vs, cs, checked)
            shape = None
            if t.block:
                cs += _block_completions(t, self._block_rows)
            elif (c := completion(t, checked)) is not None:
                cs.append(c)
        _bulk(ws, vs, cs, checked)
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
        as_block = self._as_block(tasks)
        if as_block is not None:
            block, rows = as_block
            with self._lock:  # a block is a job's first dispatch
                self._block_rows = rows
                block.on_done = done
                self._tasks.append(block)
            top = max(rows) + 1
            if top > self.workers.n_workers:
                self.workers.grow(top)
            self.workers.send_many(((block.slot, block),))
            rank = dict(zip(rows, range(len(rows)), strict=True))  # its rows rank first, in order (read by later
            with self._lock:  # adds and multi-task deliveries, never by the block's own: built once it is out)
                self._rank = rank
            return
        if type(tasks) is JobTasks and not self._tasks:  # a job's first tasks, one per worker: built bound
            built = tasks.bind(fn, done)
            if built is not None:
                workers = tasks.workers
                with self._lock:
                    self._rank = dict(zip(workers, range(len(workers)), strict=True))
                    self._tasks += built
                top = max(workers) + 1
                if top > self.workers.n_workers:
                    self.workers.grow(top)
                self.workers.send_many(zip(workers, built, strict=True))
                return
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
            if not self._block_rows:  # no block task: picked in C
                tasks = list(compress(self._tasks, map(stop.__contains__, map(_slot_of, self._tasks))))
            else:  # a block task stops only when none of its rows is wanted any more
                tasks = [t for t in self._tasks
                         if (t.slot in stop if not t.block else stop.issuperset(self._block_rows))]
        for t in tasks:
            t.cancel()

    def close(self) -> None:
        self.closed = True
        with self._lock:
            # finished ones need no cancel (a stale read of a task finishing now only cancels a finished task)
            tasks = list(compress(self._tasks, map(ne, map(_state_of, self._tasks), repeat("done"))))
            self._tasks = []  # no cycle task -> on_done -> batch -> task: a job's objects go without the cyclic GC
        for t in tasks:
            t.cancel()


class Executor(ABC):
    """Runs tasks on logical workers. Subclasses: LocalExecutor (threads or processes), RayExecutor, RemoteExecutor
    (model replicas gencc does not run)."""

    @abstractmethod
    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        """Start a job's tasks; `f` may be None when the executor was built from a factory."""

    def check_job(self, f: Callable | None, X: np.ndarray, *, mixed: bool, uniform: bool) -> None:
        """Refuse, before any work, a job this executor cannot run (a ValueError, or a `gencc.errors.ConfigError`
        naming what to change): `X` the job's inputs as numpy (K, *in_shape), `mixed` whether its tasks carry
        real-valued mixes of them (a coded job) rather than copies, `uniform` whether every task runs f (False:
        some run a function of their own, a parity model). Default: every job runs."""
        return None

    def prepare(self, f: Callable | None, num_workers: int) -> None:
        """Get ready to run f on `num_workers` logical workers (start processes or actors), before a job's clock
        starts: a job's timeout and deadline count from a ready executor, its start-up has its own limit. Default:
        nothing to do (the workers start with the first task)."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Free the executor's workers."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
