"""The engine's unit of work: one task on one worker, for jobs and request streams alike."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

from ..errors import WorkerError


@dataclass(eq=False, slots=True)
class Task:
    """Apply a function to one input `x` on worker `worker`; `on_done(task)` is called once when it finishes
    (ok or failed) unless it was cancelled first.

    fn: the backend's function by name ("f", "parity"), a callable of its own (a code whose workers run
    different functions, e.g. ParM's parity model; shipped once to other processes), or None: "f".
    delay: injected delivery latency in seconds after the worker finished (inf: never delivered); the worker
    is free during it, so the delays of many tasks overlap. The rest is filled in by the workers: timing, `ok`,
    `output`, `reason` (one of `gencc.faults.FAULTS` when failed) and `error` (the exception, as text);
    `compute_time` is read from the timing.
    block: `x` is a block of inputs, one per row, that travel together (a job's coded inputs on a batched pool
    with nothing injected): its function is called on the rows with the other tasks of the call, `output` is
    the block of their outputs (or, when the block's call raised, one outcome per row: an output or the
    exception), and rows that are not finite are left for the owner to judge, row by row.
    """

    worker: int = -1
    x: Any = None
    delay: float = 0.0
    fn: str | Callable | None = None
    on_done: Callable[[Task], None] | None = field(default=None, repr=False)
    kind: str = "primary"
    slot: int = -1
    owner: Any = field(default=None, repr=False)
    cancelled: bool = False
    t_sent: float = math.nan
    t_start: float = math.nan
    t_end: float = math.nan
    ok: bool = False
    output: Any = field(default=None, repr=False)
    reason: str = ""
    error: str = ""
    slow: bool = False
    busy: int = 0  # workers running a task when this one started, itself included (shared-CPU contention)
    wrong: bool = False  # the injection corrupted the output (WrongResults): ground truth for measurement only
    on_cancel: Callable[[Task], None] | None = field(default=None, repr=False)
    stop: threading.Event | None = field(default=None, repr=False)  # set when a running task is cancelled
    key: Any = field(default=None, repr=False)  # the backend's handle of the running task (Ray: a cancel key)
    state: str = ""  # the workers' view: "running" (in a call), "held" (waiting out injected time), "done"
    block: bool = False
    thread: int = -1  # the workers' thread slot that took it (the workers' own bookkeeping)

    @property
    def compute_time(self) -> float:
        """Seconds from its start to its end, held time included (nan until it started and ended)."""
        return self.t_end - self.t_start

    def record(self) -> TaskRecord:
        """What the workers keep of this task once it is done: no input, no output (see `TaskRecord`)."""
        return as_record(record_fields(self))

    def cancel(self) -> None:
        """Mark as no longer needed: a worker drops it if it has not started it yet (the workers' `on_cancel`
        hook keeps their load counts right); a running one is told to stop where its backend allows."""
        if not self.cancelled:
            self.cancelled = True
            if self.on_cancel is not None:
                self.on_cancel(self)

    @property
    def function(self) -> str | Callable:
        """`fn`, with None read as "f"."""
        return "f" if self.fn is None else self.fn


class TaskRecord(NamedTuple):
    """A finished task as the workers remember it (`Workers.executed`): who ran what, when, and how it ended;
    never its input, output or owner, so a long run's memory does not grow with what requests carried.
    `fn` is the function's name ("f", "parity") or, for a task's own callable, its type's name."""

    worker: int
    fn: str
    kind: str
    ok: bool
    reason: str
    t_start: float
    t_end: float
    busy: int
    slow: bool
    wrong: bool


#: a finished task's `TaskRecord` fields as a plain tuple, its function as it is (`as_record` names it when the
#: record is read): what the workers keep per task (a shared thread's lean path builds the same tuple inline)
record_fields = attrgetter(*TaskRecord._fields)


def as_record(fields: tuple) -> TaskRecord:
    """The `TaskRecord` of a task's `record_fields`."""
    fn = fields[1]
    name = "f" if fn is None else fn if type(fn) is str else type(fn).__name__
    return TaskRecord(fields[0], name, *fields[2:])


def describe_error(e: BaseException) -> str:
    """An exception as a straggler reason: its type and message."""
    return str(e) if isinstance(e, WorkerError) else f"{type(e).__name__}: {e}"
