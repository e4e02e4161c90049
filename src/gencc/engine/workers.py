"""W long-lived workers on the wall clock, each with a FIFO queue, served by worker threads, plus a control
thread that runs every callback (so the front end above, a job's collector or a serving dispatcher, stays
single-threaded; with `inline` the callbacks run in the worker threads, for a front end whose callbacks are
thread-safe).

Each worker runs one call at a time from its own queue and drops a task cancelled before it starts. A thread
serves one worker (default) or, with `threads=T`, workers w with w % T equal: it takes the head task of each
of its idle workers and runs those that share a function as one batched call (`gencc.engine.batch`; a failing
batch is retried task by task; a block task, `Task.block`, brings several inputs that join the call's stack as
rows and gets their outputs back as one block). A backend that takes several tasks of one worker as one call
(`group_limit`, `run_group`: a remote replica's batch) gets, when nothing is injected, the worker's queued tasks
behind the head one too, up to its limit, started together (and, where it has `can_serve`, a dead worker is
re-created only once its backend says it can serve). A task costs its backend's real compute plus injected time
(`gencc.faults`): `ServiceTimes` x the worker's persistent-straggler multiplier (compute is slowed by the same
factor); `Faults` make it fail, `WrongResults` corrupt its output; its `delay` (a job's injected latency) then
passes before the outcome is delivered. The injected time is a hold the thread waits out for all its workers
at once, the worker busy meanwhile (with the thread backend; other backends hold it inside their `run`, Ray on
the actor).

With `preempt`, cancelling a running task frees its worker: a held task is dropped at once; a thread still in
a call whose tasks were all cancelled `CANCEL_GRACE_S` ago is abandoned (it ends after its current call; its
results are dropped) and a fresh one serves its workers. With `task_timeout`, a call running longer is
abandoned the same way and its tasks fail ("hang"). At most `max_abandoned` abandoned threads live at once;
past that, the workers of a hung thread are marked dead (logged) until an abandoned thread ends. A crashed
worker (a "crash" fault, a lost backend) fails its task; with `mark_dead` it is dead, its queued tasks fail,
it gets no work, and after `restart_s` seconds it is re-created (a fresh thread; `restarts` counts them);
without, only the task fails and the worker is re-created at once (a backend that restarts its workers, Ray
with restarts).

The workers keep counters (`counts`, by outcome), a short record of the latest tasks (`executed`,
`gencc.engine.TaskRecord`s: no inputs or outputs) and their own delays (`lags`, seconds; the simulator can
replay them): "post", a callback waiting for the control thread; "timer", a timer firing late; "pickup", a
worker starting a task later than it could have (woken late).
"""

from __future__ import annotations

import heapq
import itertools
import math
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from itertools import filterfalse
from operator import attrgetter
from typing import Any

import numpy as np

from ..faults import Faults, PersistentStragglers, ServiceTimes, WrongResults
from . import blas
from .task import Task, TaskRecord, as_record
from .threads import CHUNK_S, RELEASE_S, WorkerThreads

_on_done_of, _cancelled_of = attrgetter("on_done"), attrgetter("cancelled")  # (read in C when tasks are delivered)

#: the workers' own delays they record (see the module docstring)
LAGS = ("post", "timer", "pickup")
#: seconds a thread may stay in a call whose tasks were all cancelled before it is abandoned (with `preempt`)
CANCEL_GRACE_S = 0.02


class Workers(WorkerThreads):
    """The engine on the wall clock (see the module docstring). `post(fn)` runs fn on the control thread;
    `send`, `call_later`, `loads`, `now` are for the front end, called from the control thread.

    threads: worker threads (None: one per worker). blas_threads: BLAS threads (process-wide) while the pool runs
    (`gencc.engine.blas`; "auto": 1 when several threads run, None: untouched). keep: tasks in `executed`.
    check_finite: False leaves the finiteness of a shared thread's lean call (a per-input f, nothing injected:
    `gencc.engine.batch.call_plain`) to the task's owner: such a task is ok when f returned an array, and a
    job's collector checks the outputs delivered together in one pass, not each tiny output on its own."""

    def __init__(self, n_workers: int, backend: Any, service: ServiceTimes | None = None,
                 stragglers: PersistentStragglers | None = None, faults: Faults | None = None, seed: int = 0,
                 wrong: WrongResults | None = None, *, preempt: bool = False, mark_dead: bool = True,
                 name: str = "gencc-worker", threads: int | None = None, shared: bool = False,
                 inline: bool = False,
                 restart_s: float | None = 0.5, task_timeout: float | None = None, max_abandoned: int = 32,
                 blas_threads: int | str | None = "auto", keep: int = 1000, check_finite: bool = True):
        if n_workers < 1:
            raise ValueError(f"need at least one worker, got {n_workers}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be None (one per worker) or a positive integer, got {threads!r}")
        if shared and threads is None:
            raise ValueError("shared threads need a thread count (threads=T)")
        for what, v in (("restart_s", restart_s), ("task_timeout", task_timeout)):
            if v is not None and not v > 0:
                raise ValueError(f"{what} must be None or a positive number of seconds, got {v!r}")
        self.backend, self.wrong, self.preempt, self.name = backend, wrong, bool(preempt), name
        self.mark_dead, self.inline, self.n_threads = bool(mark_dead), bool(inline), threads
        self.shared = bool(shared)
        self.check_finite = bool(check_finite)
        self._ready: deque[int] = deque()  # shared threads: workers that may be idle with a queued task (checked)
        self._idle = 0  # shared threads: threads waiting for a wake-up token
        self._call_s = [CHUNK_S] * 4  # shared threads: the latest calls' seconds (`_claim`), _n_calls of them
        self._n_calls = 0
        self.restart_s, self.task_timeout, self.max_abandoned = restart_s, task_timeout, int(max_abandoned)
        self._batching = hasattr(backend, "run_items")
        #: a backend that takes several queued tasks of one worker as one call (a replica's batch): its limit
        self._group_limit = getattr(backend, "group_limit", None) if not self._batching else None
        self._blas = blas.resolve(blas_threads, 2 if threads is None else threads)
        self._blas_held = False
        self.service = service or ServiceTimes(0.0)
        self.stragglers, self.faults, self.seed = stragglers, faults, seed
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._inbox: queue.SimpleQueue[tuple[float, Callable[[], None]]] = queue.SimpleQueue()
        self.lags: dict[str, deque[float]] = {k: deque(maxlen=100_000) for k in LAGS}
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._stopped = False  # set with _stop, under the lock; read there (the control thread waits on _stop)
        self.dropped = 0
        self.running = 0  # workers running a task right now
        self._records: deque[tuple] = deque(maxlen=keep)  # the latest tasks run, as `record_fields` (`executed`)
        self.counts: Counter[str] = Counter()  # finished tasks by outcome: "ok" or the failure's reason
        self.slow_tasks = 0
        self.errors: list[BaseException] = []  # front-end callbacks that raised (the latest 100)
        self.n_workers = 0
        self._rngs: list[np.random.Generator] = []
        self._queues: list[deque[Task]] = []
        self._current: list[Task | None] = []
        self._free_since: list[float] = []
        self._slot: list[int] = []  # worker -> the thread slot serving it
        self._loads: list[float] = []  # per worker: queued + running tasks (a list: updated per task)
        self.dead = np.zeros(0, dtype=bool)
        self.restarts = np.zeros(0, dtype=np.int64)  # workers re-created after a crash
        # per thread slot
        self._wake: list[queue.SimpleQueue[None]] = []  # a slot's wake-up tokens (a C queue, not a Condition)
        self._gen: list[int] = []  # the slot's thread generation (an abandoned thread sees it change and exits)
        self._members: list[list[int]] = []
        self._queued: list[set[int]] = []  # the slot's workers whose queue holds a task (_pick looks at those only)
        self._holds: list[list[tuple[float, int, Task]]] = []
        self._batch: list[list[Task]] = []  # the tasks in the slot's current call
        self._t_call: list[float] = []  # when that call started (nan: none)
        self._t_cancel: list[float] = []  # when its last task was cancelled (inf: not all are)
        self._rest: list[deque[Task]] = []  # shared threads: tasks the slot claimed, to run after its current call
        self._unsent: list[list[Task]] = []  # shared threads: finished tasks the slot has yet to deliver
        self._t_unsent: list[float] = []  # when the oldest of those finished (inf: none)
        self._thread: list[threading.Thread | None] = []
        self.threads: list[threading.Thread] = []  # the threads started (those that ended may be forgotten)
        self.abandoned: list[threading.Thread] = []  # abandoned threads (hung or preempted) still alive
        self._starved: list[int] = []  # slots without a thread, past max_abandoned (served again later)
        self._control = threading.Thread(target=self._loop, daemon=True, name=f"{name}-control")
        self._control.start()
        self.grow(n_workers)

    def grow(self, n_workers: int) -> None:
        """Have at least `n_workers` workers (thread-safe; new ones start idle)."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("these workers are closed")
            if n_workers <= self.n_workers:
                return
            k = n_workers - self.n_workers
            self._loads += [0.0] * k
            self.dead = np.concatenate([self.dead, np.zeros(k, dtype=bool)])
            self.restarts = np.concatenate([self.restarts, np.zeros(k, dtype=np.int64)])
            for w in range(self.n_workers, n_workers):
                self._rngs.append(np.random.default_rng([self.seed, 3, w]))
                self._queues.append(deque())
                self._current.append(None)
                self._free_since.append(0.0)
                if self.shared:  # every worker in one queue group; threads added up to min(workers, T)
                    self._slot.append(0)
                    if len(self._wake) < self.n_threads:  # type: ignore[operator]
                        self._add_slot(self._wake[0] if self._wake else queue.SimpleQueue())
                    continue
                s = w if self.n_threads is None else w % self.n_threads
                self._slot.append(s)
                if s == len(self._wake):
                    self._add_slot(queue.SimpleQueue())
                self._members[s].append(w)
            self.n_workers = n_workers
            if len(self._wake) > 1 and not self._blas_held:
                blas.acquire(self._blas)
                self._blas_held = True

    @property
    def executed(self) -> deque[TaskRecord]:
        """The latest tasks run (at most `keep`), oldest first, as `TaskRecord`s (calibration, tests): a copy, built
        when read (the workers keep each task's fields as a plain tuple)."""
        return deque(map(as_record, list(self._records)), maxlen=self._records.maxlen)

    def _add_slot(self, wake: queue.SimpleQueue) -> None:
        """A new thread slot (its state, its thread started); `wake` is its wake-up queue (shared: one for all)."""
        self._wake.append(wake)
        self._gen.append(0)
        self._members.append([])
        self._queued.append(set())
        self._holds.append([])
        self._batch.append([])
        self._t_call.append(math.nan)
        self._t_cancel.append(math.inf)
        self._rest.append(deque())
        self._unsent.append([])
        self._t_unsent.append(math.inf)
        self._thread.append(None)
        self._start_thread(len(self._wake) - 1)

    def _start_thread(self, s: int) -> None:
        if len(self.threads) > 2 * len(self._wake) + 64:  # forget the threads that ended
            self.threads = [t for t in self.threads if t.is_alive()]
        t = threading.Thread(target=self._work, args=(s, self._gen[s]), daemon=True, name=f"{self.name}-{s}")
        self._thread[s] = t
        self.threads.append(t)
        t.start()

    # ----- the front end's interface -----------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter() - self._t0

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run fn on the control thread after `delay` seconds (call from the control thread)."""
        heapq.heappush(self._timers, (self.now() + max(float(delay), 0.0), next(self._seq), fn))

    def loads(self) -> np.ndarray:
        with self._lock:
            return np.where(self.dead, np.inf, np.asarray(self._loads, dtype=float))

    def send(self, worker: int, task: Task) -> None:
        """Append `task` to `worker`'s queue (thread-safe)."""
        self.send_many(((worker, task),))

    def send_many(self, pairs: Iterable[tuple[int, Task]]) -> None:
        """Append each task to its worker's queue, under one lock (thread-safe)."""
        lost = []
        with self._lock:
            if self._stopped:
                raise RuntimeError("these workers are closed")
            wake = set()
            dead, loads, queues, slot, cancelled = self.dead, self._loads, self._queues, self._slot, self._cancelled
            queued, shared, ready = self._queued, self.shared, self._ready.append
            n = len(self._ready)
            for worker, task in pairs:
                task.worker = worker
                if dead[worker]:
                    task.ok, task.reason, task.error, task.t_end = False, "crash", "worker lost", self.now()
                    lost.append(task)
                    continue
                loads[worker] += 1
                task.on_cancel = cancelled
                queues[worker].append(task)
                if shared:
                    ready(worker)
                    continue
                s = slot[worker]
                queued[s].add(worker)
                wake.add(s)
            if shared and len(self._ready) > n and self._idle:  # one waiting thread woken: it wakes the next if any
                self._wake[0].put(None)
            for s in wake:  # one wake-up per thread, however many of its workers got a task
                self._wake[s].put(None)
        self._emit(lost)

    def _cancelled(self, task: Task) -> None:
        with self._lock:
            if task.on_cancel is None:
                return
            task.on_cancel = None
            w = task.worker
            if not task.state:  # still queued
                self._loads[w] -= 1
                return
            if task.state == "claimed":  # a shared thread took it to run after its current call: not started
                self._drop_claimed(task)
                return
            s = task.thread
            if task.state == "held":  # waiting out injected time: the worker is free at once
                self._holds[s] = [h for h in self._holds[s] if h[2] is not task]
                heapq.heapify(self._holds[s])
                task.state = "dropped"
                self._free(w)
                self._wake[s].put(None)
                return
            if task.stop is not None:
                task.stop.set()
            cancel = getattr(self.backend, "cancel", None)
            if cancel is not None:
                cancel(task)
            if all(t.cancelled for t in self._batch[s]):
                self._t_cancel[s] = self.now()  # abandoned if still in the call after CANCEL_GRACE_S

    def post(self, fn: Callable[[], None]) -> None:
        """Run fn on the control thread (thread-safe)."""
        self._inbox.put((self.now(), fn))

    # ----- control thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            timeout = 0.05
            if self._timers:
                timeout = min(timeout, max(self._timers[0][0] - self.now(), 0.0))
            try:
                item = self._inbox.get(timeout=timeout)
                while True:
                    self.lags["post"].append(self.now() - item[0])
                    self.call_guarded(item[1])
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            while self._timers and self._timers[0][0] <= self.now():
                due, _, fn = heapq.heappop(self._timers)
                self.lags["timer"].append(self.now() - due)
                self.call_guarded(fn)
            self._watch()

    def call_guarded(self, fn: Callable[[], None]) -> None:
        """fn(), as the control thread runs a front end's callback: an exception is kept in `errors` (the latest
        100), never raised."""
        try:
            fn()
        except Exception as e:  # a front-end bug must not kill the control thread; it is kept for tests
            if len(self.errors) >= 100:
                del self.errors[0]
            self.errors.append(e)

    def _deliver(self, task: Task) -> None:
        """Hand a finished task to its owner unless it was cancelled meanwhile (with `preempt`; without, a
        task that started is always delivered, as the dispatchers expect)."""
        if task.on_done is None or (self.preempt and task.cancelled):
            return
        task.on_done(task)

    def _emit(self, tasks: list[Task]) -> None:
        """Deliver finished tasks: in this thread (`inline`) or on the control thread. Never under the lock.
        Inline, tasks whose callback is a bound method of an object with `on_done_many(tasks)` are handed to
        it together (one hand-off to the thread waiting on them, not one per task)."""
        if not tasks:
            return
        if not self.inline:
            for t in tasks:
                self.post(lambda t=t: self._deliver(t))
            return
        if len(set(map(id, map(_on_done_of, tasks)))) == 1:  # one callback (a job's): the tasks handed on together
            cb = tasks[0].on_done
            many = getattr(getattr(cb, "__self__", None), "on_done_many", None)
            if many is not None or cb is None:
                if self.preempt:
                    tasks = list(filterfalse(_cancelled_of, tasks))
                if many is not None and tasks:
                    self.call_guarded(lambda: many(tasks))
                return
        groups: dict[int, tuple[Callable, list[Task]]] = {}
        preempt, last, group = self.preempt, None, None  # last: the previous task's callback, group its owner's
        for t in tasks:
            cb = t.on_done
            if cb is None or (preempt and t.cancelled):
                continue
            if cb is not last:  # a job's tasks share one bound method: looked up once
                last, owner = cb, getattr(cb, "__self__", None)
                group = groups.get(id(owner)) if owner is not None else None
                if group is None:
                    many = getattr(owner, "on_done_many", None)
                    if many is not None:
                        group = groups[id(owner)] = (many, [])
            if group is None:
                self.call_guarded(lambda t=t: self._deliver(t))
            else:
                group[1].append(t)
        for many, ts in groups.values():
            self.call_guarded(lambda many=many, ts=ts: many(ts))

    def _watch(self) -> None:
        """Abandon the threads whose call has run past `task_timeout` (their tasks fail as hung), or that are
        still in a call whose tasks were all cancelled `CANCEL_GRACE_S` ago (with `preempt`). A shared thread in
        a call longer than RELEASE_S gives back the tasks it claimed and has what it finished delivered."""
        out: list[Task] = []
        with self._lock:
            now = self.now()
            for s, batch in enumerate(self._batch):
                if not batch or math.isnan(self._t_call[s]):
                    continue
                if self._rest[s] and now - self._t_call[s] > RELEASE_S:  # a slow call: its claims go to others
                    self._release(s)
                if self._unsent[s] and now - self._t_unsent[s] > RELEASE_S:  # and what it finished is delivered
                    out += self._unsent[s]
                    self._unsent[s], self._t_unsent[s] = [], math.inf
                if now - self._t_cancel[s] > CANCEL_GRACE_S and all(t.cancelled for t in batch):
                    out += self._abandon(s, None)
                elif self.task_timeout is not None:
                    limit = self.task_timeout + (0.0 if self._batching else max(t.delay for t in batch))
                    if now - self._t_call[s] > limit:
                        out += self._abandon(s, f"hung: no result after {limit:g} s, its thread abandoned")
            if self._starved:
                self._unstarve()
        self._emit(out)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers and the control thread (queued tasks are abandoned: drain the front end first).
        Threads still in a task get up to `timeout` seconds in all to finish it; one still busy after that (a
        hung f) is abandoned: threads are daemons."""
        with self._lock:
            if self._stopped:
                return
            self._stop.set()
            self._stopped = True
            for batch in self._batch:
                for t in batch:
                    if t.stop is not None:
                        t.stop.set()
            for wake in self._wake:
                wake.put(None)
            threads = list(self.threads)
        end = time.monotonic() + timeout
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))
        self._control.join(max(0.0, end - time.monotonic()))
        self.backend.close()
        if self._blas_held:
            blas.release(self._blas)
            self._blas_held = False
