"""The engine in virtual time: a discrete-event simulator (a heap) with the interface of `Workers`, so the same
front-end code (serving's dispatchers) runs unchanged on it.

Workers are FIFO queues running one task at a time; a task's duration is a base service time (drawn from
`ServiceTimes`, e.g. measured samples, conditional on how many workers are busy when it starts where the samples
carry that) times the worker's persistent-straggler multiplier at its start. With `functions` the models really
run (outputs and decodes are real, time stays virtual); without, outputs are None. A model runs once for all the
tasks running at that moment (one batched call, made when the first of them finishes; `batch` False: one call per
task): a model whose rows do not depend on each other gives the same outputs either way, and a remote model (one
request per call) answers in a fraction of the calls. With `lags` (seconds, per
kind, as real `Workers` record them in `Workers.lags`) the simulator also replays the real system's own delays,
drawn independently: "post" before the front end sees a request or a finished task, "timer" added to every
timer, "pickup" before a worker starts a task.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from ..faults import Faults, PersistentStragglers, ServiceTimes, WrongResults
from ..model import apply_batch, apply_one
from .task import Task
from .workers import LAGS


class VirtualWorkers:
    """The engine in virtual time: `send`, `call_later`, `loads`, `now` as `Workers` has them; `run` advances
    time. `functions` maps names to batched models (called on the inputs of the tasks running at once, or with
    `batch` False on a batch of one); a task may carry its own callable."""

    def __init__(self, n_workers: int, service: ServiceTimes, stragglers: PersistentStragglers | None = None,
                 faults: Faults | None = None, functions: dict[str, Callable] | None = None, seed: int = 0,
                 lags: dict[str, Sequence[float]] | None = None, wrong: WrongResults | None = None,
                 batch: bool = True):
        if n_workers < 1:
            raise ValueError(f"need at least one worker, got {n_workers}")
        self.n_workers = n_workers
        self.service, self.stragglers, self.faults = service, stragglers, faults
        self.functions, self.wrong, self.batch = functions, wrong, bool(batch)
        self.rng = np.random.default_rng([seed, 1])
        self.t = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.queues = [deque() for _ in range(n_workers)]
        self.busy = [False] * n_workers
        self.running = 0  # workers running a task right now
        self._loads = np.zeros(n_workers)
        self.dead = np.zeros(n_workers, dtype=bool)
        self.executed: list[Task] = []
        self.dropped = 0
        self._running: dict[int, tuple[Task, str]] = {}  # worker -> (its running task, the task's fault)
        self._outputs: dict[Task, np.ndarray] = {}  # outputs computed ahead, in a batch with a task finishing
        self.lags = {}
        for k, v in (lags or {}).items():
            a = np.asarray(v, dtype=float)
            if k not in LAGS or a.ndim != 1 or a.size == 0 or not np.all(a >= 0):
                raise ValueError(f"lags must map 'post', 'timer' or 'pickup' to non-empty non-negative seconds; "
                                 f"got {k!r} with {a.size} values")
            self.lags[k] = a

    # ----- Env ---------------------------------------------------------------------------------------
    def now(self) -> float:
        return self.t

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self._at(delay + self._lag("timer"), fn)

    def deliver(self, delay: float, fn: Callable[[], None]) -> None:
        """Run fn after `delay` plus a "post" lag: what reaches the dispatcher from outside (a request)."""
        self._at(delay + self._lag("post"), fn)

    def loads(self) -> np.ndarray:
        return np.where(self.dead, np.inf, self._loads)

    def send(self, worker: int, task: Task) -> None:
        task.worker = worker
        self._loads[worker] += 1
        task.on_cancel = self._cancelled
        self.queues[worker].append(task)
        if not self.busy[worker]:
            self._start(worker)

    # ----- mechanics -------------------------------------------------------------------------------
    def _at(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.t + max(float(delay), 0.0), next(self._seq), fn))

    def _lag(self, kind: str) -> float:
        a = self.lags.get(kind)
        return 0.0 if a is None else float(a[self.rng.integers(a.size)])

    def _cancelled(self, task: Task) -> None:
        self._loads[task.worker] -= 1

    def _start(self, w: int) -> None:
        q = self.queues[w]
        while q and q[0].cancelled:
            q.popleft()
            self.dropped += 1
        if not q:
            if self.busy[w]:
                self.running -= 1
            self.busy[w] = False
            return
        task = q.popleft()
        task.on_cancel = None
        if not self.busy[w]:
            self.running += 1
        self.busy[w] = True
        task.busy = self.running
        pickup = self._lag("pickup")
        task.t_start = self.t + pickup
        mult = self.stragglers.multiplier(w, task.t_start) if self.stragglers is not None else 1.0
        task.slow = mult > 1
        fault = self.faults.draw(self.rng) if self.faults is not None else ""
        dur = self.service.draw(self.rng, busy=self.running, t=task.t_start) * mult
        if fault == "hang":
            dur = self.faults.hang_s
        self._running[w] = (task, fault)
        self._at(pickup + dur, lambda: self._finish(w, task, fault))

    def _finish(self, w: int, task: Task, fault: str) -> None:
        task.t_end = self.t
        self._loads[w] -= 1
        self._running.pop(w, None)
        if fault:
            task.ok, task.reason = False, fault
        else:
            task.ok = True
            if self.functions is not None and task.x is not None:
                task.output = self._evaluate(task)
                if self.wrong is not None:
                    task.output, task.wrong = self.wrong.corrupt(w, task.output, self.rng)
        self.executed.append(task)
        if fault == "crash":
            self.dead[w] = True
            for t in self.queues[w]:  # what was queued on a dead worker fails too
                if not t.cancelled:
                    t.on_cancel, t.ok, t.reason, t.t_end = None, False, "crash", self.t
                    self._loads[w] -= 1
                    self.deliver(0.0, lambda t=t: t.on_done(t))
            self.queues[w].clear()
            self.busy[w] = False
            self.running -= 1
        else:
            self._start(w)
        if task.delay > 0:  # injected delivery latency (inf: never delivered)
            if math.isfinite(task.delay):
                self._at(task.delay, lambda: None if task.cancelled else task.on_done(task))
        elif "post" in self.lags:
            self.deliver(0.0, lambda: task.on_done(task))
        else:
            task.on_done(task)

    def _model(self, task: Task) -> tuple[Callable, bool | None] | None:
        """(the model task runs, its `batched` flag for `apply_batch`); None: it cannot share a batched call."""
        fn = task.function
        if not callable(fn):
            return self.functions[fn], True  # a named function is batched
        return (fn, None) if getattr(fn, "batched", False) else None

    def _evaluate(self, task: Task) -> np.ndarray:
        """task's output: computed ahead (it ran in the batch of an earlier task), or now, in one batched call
        with every other task running with the same model on an input of the same shape and dtype (`batch`)."""
        if task in self._outputs:
            return self._outputs.pop(task)
        model, x = self._model(task), task.x
        if self.batch and model is not None and not task.block and isinstance(x, np.ndarray):
            group = [task] + [t for t, fault in self._running.values()
                              if not fault and t is not task and t not in self._outputs and not t.block
                              and isinstance(t.x, np.ndarray) and t.x.shape == x.shape and t.x.dtype == x.dtype
                              and self._model(t) is not None and _same(t.function, task.function)]
            if len(group) > 1:
                try:
                    Y = apply_batch(model[0], np.stack([t.x for t in group]), model[1])
                except Exception:  # noqa: BLE001 - which input failed is unknown: this task runs alone below
                    Y = None
                if Y is not None:
                    for t, y in zip(group[1:], Y[1:], strict=True):
                        self._outputs[t] = y
                    return Y[0]
        fn = task.function
        return apply_one(fn, x) if callable(fn) else apply_one(self.functions[fn], x, True)

    def run(self, until: float = math.inf, max_events: int = 50_000_000) -> None:
        """Process events in time order up to virtual time `until` (bounded in count)."""
        for _ in range(max_events):
            if not self._heap or self._heap[0][0] > until:
                break
            self.t, _, fn = heapq.heappop(self._heap)
            fn()
        else:
            raise RuntimeError(f"simulation exceeded {max_events} events")


def _same(a: str | Callable, b: str | Callable) -> bool:
    """Whether two task functions are the same model (a name, or the same callable object)."""
    return a == b if isinstance(a, str) and isinstance(b, str) else a is b
