"""W long-lived workers on the wall clock, each with a FIFO queue, plus a control thread that runs every
callback (so the front end above, a job's collector or a serving dispatcher, stays single-threaded).

Each worker runs one task at a time from its own queue and drops a task cancelled before it starts. A task
costs its backend's real compute plus injected time (`gencc.faults`): `ServiceTimes` x the worker's
persistent-straggler multiplier (compute is slowed by the same factor); `Faults` make it fail, `WrongResults`
corrupt its output; its `delay` (a job's injected latency) then passes on the worker before the outcome is
delivered (on the actor, for Ray: an actor lost meanwhile makes the task lost).
With `preempt`, cancelling a running task stops its injected waits at once and hands the worker's queue to a
fresh thread (the old one ends after its current call of f; its result is dropped): a hung f costs a thread,
never a worker. A worker whose backend is lost (a crash) is dead: its queued tasks fail, it gets no more work
(with `mark_dead` False only the task fails: a backend that restarts its workers, Ray with restarts).

The workers also record their own delays (`lags`, seconds; the simulator can replay them): "post", a callback
waiting for the control thread; "timer", a timer firing late; "pickup", a worker starting a task later than it
could have (woken late).
"""

from __future__ import annotations

import heapq
import itertools
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..faults import Cancelled, Faults, InjectedFault, PersistentStragglers, ServiceTimes, WrongResults
from .task import Task, describe_error

#: the workers' own delays they record (see the module docstring)
LAGS = ("post", "timer", "pickup")


class Workers:
    """The engine on the wall clock (see the module docstring). `post(fn)` runs fn on the control thread;
    `send`, `call_later`, `loads`, `now` are for the front end, called from the control thread."""

    def __init__(self, n_workers: int, backend: Any, service: ServiceTimes | None = None,
                 stragglers: PersistentStragglers | None = None, faults: Faults | None = None, seed: int = 0,
                 wrong: WrongResults | None = None, *, preempt: bool = False, mark_dead: bool = True,
                 name: str = "gencc-worker"):
        if n_workers < 1:
            raise ValueError(f"need at least one worker, got {n_workers}")
        self.backend, self.wrong, self.preempt, self.name = backend, wrong, bool(preempt), name
        self.mark_dead = bool(mark_dead)
        self.service = service or ServiceTimes(0.0)
        self.stragglers, self.faults, self.seed = stragglers, faults, seed
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._inbox: queue.SimpleQueue[tuple[float, Callable[[], None]]] = queue.SimpleQueue()
        self.lags: dict[str, deque[float]] = {k: deque(maxlen=100_000) for k in LAGS}
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stop = threading.Event()
        self.dropped = 0
        self.running = 0  # workers running a task right now
        self.executed: deque[Task] = deque(maxlen=100_000)  # the latest tasks run (calibration, tests)
        self.slow_tasks = 0
        self.errors: list[BaseException] = []
        self.n_workers = 0
        self._rngs: list[np.random.Generator] = []
        self._cv: list[threading.Condition] = []
        self._queues: list[deque[Task]] = []
        self._current: list[Task | None] = []
        self._gen: list[int] = []  # a worker's thread generation (a preempted thread sees it change and exits)
        self._loads = np.zeros(0)
        self.dead = np.zeros(0, dtype=bool)
        self.threads: list[threading.Thread] = []  # the threads started (those that ended may be forgotten)
        self._control = threading.Thread(target=self._loop, daemon=True, name=f"{name}-control")
        self._control.start()
        self.grow(n_workers)

    def grow(self, n_workers: int) -> None:
        """Have at least `n_workers` workers (thread-safe; new ones start idle)."""
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("these workers are closed")
            for w in range(self.n_workers, n_workers):
                self._rngs.append(np.random.default_rng([self.seed, 3, w]))
                self._cv.append(threading.Condition(self._lock))
                self._queues.append(deque())
                self._current.append(None)
                self._gen.append(0)
                self._start_thread(w)
            if n_workers > self.n_workers:
                self._loads = np.concatenate([self._loads, np.zeros(n_workers - self.n_workers)])
                self.dead = np.concatenate([self.dead, np.zeros(n_workers - self.n_workers, dtype=bool)])
                self.n_workers = n_workers

    def _start_thread(self, w: int) -> None:
        if len(self.threads) > 2 * self.n_workers + 64:  # forget the threads that ended (preempted ones)
            self.threads = [t for t in self.threads if t.is_alive()]
        t = threading.Thread(target=self._work, args=(w, self._gen[w]), daemon=True, name=f"{self.name}-{w}")
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
            return np.where(self.dead, np.inf, self._loads)

    def send(self, worker: int, task: Task) -> None:
        """Append `task` to `worker`'s queue (thread-safe)."""
        task.worker = worker
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("these workers are closed")
            if self.dead[worker]:
                task.ok, task.reason, task.error, task.t_end = False, "crash", "worker lost", self.now()
                self.post(lambda: self._deliver(task))
                return
            self._loads[worker] += 1
            task.on_cancel = self._cancelled
            self._queues[worker].append(task)
            self._cv[worker].notify()

    def _cancelled(self, task: Task) -> None:
        with self._lock:
            if task.on_cancel is None:
                return
            w = task.worker
            if self._current[w] is task:  # running: preempt it
                task.on_cancel = None
                if task.stop is not None:
                    task.stop.set()
                cancel = getattr(self.backend, "cancel", None)
                if cancel is not None:
                    cancel(task)
                self._current[w] = None
                self._gen[w] += 1
                self.running -= 1
                self._loads[w] -= 1
                self._start_thread(w)
            else:  # still queued
                task.on_cancel = None
                self._loads[w] -= 1

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
                    self._call(item[1])
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            while self._timers and self._timers[0][0] <= self.now():
                due, _, fn = heapq.heappop(self._timers)
                self.lags["timer"].append(self.now() - due)
                self._call(fn)

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # a front-end bug must not kill the control thread; it is kept for tests
            self.errors.append(e)

    def _deliver(self, task: Task) -> None:
        """On the control thread: hand a finished task to its owner unless it was cancelled meanwhile (with
        `preempt`; without, a task that started is always delivered, as the dispatchers expect)."""
        if task.on_done is None or (self.preempt and task.cancelled):
            return
        task.on_done(task)

    # ----- workers -----------------------------------------------------------------------------------
    def _work(self, w: int, gen: int) -> None:
        q, cv, rng = self._queues[w], self._cv[w], self._rngs[w]
        free_since = 0.0  # when this worker last finished a task
        while True:
            with cv:
                while not q and not self._stop.is_set() and self._gen[w] == gen:
                    cv.wait(0.1)
                if self._stop.is_set() or self._gen[w] != gen:
                    return
                task = q.popleft()
                if task.cancelled:
                    self.dropped += 1
                    continue
                self.running += 1
                task.busy = self.running
                task.stop = threading.Event()
                self._current[w] = task
                if not self.preempt:  # cancelling it from now on does not stop it
                    task.on_cancel = None
            task.t_start = self.now()
            sent = task.t_start if math.isnan(task.t_sent) else task.t_sent
            self.lags["pickup"].append(task.t_start - max(sent, free_since))
            mult = self.stragglers.multiplier(w, task.t_start) if self.stragglers is not None else 1.0
            task.slow = mult > 1
            fault = self.faults.draw(rng) if self.faults is not None else ""
            hang_s = self.faults.hang_s if self.faults is not None else 0.0
            extra = self.service.draw(rng)
            try:
                out = self.backend.run(w, task, extra, mult, fault, hang_s, task.stop)
                task.output, task.ok = out, True
                if self.wrong is not None:
                    task.output, task.wrong = self.wrong.corrupt(w, task.output, rng)
            except Cancelled:
                task.ok, task.reason, task.error = False, "cancelled", "cancelled"
            except ConnectionError as e:  # the worker is lost: its message says how
                task.ok, task.reason, task.error = False, "crash", str(e)
            except InjectedFault as e:
                task.ok, task.reason, task.error = False, str(e), f"injected {e}"
                task.output = e.output
            except Exception as e:  # f raised: a straggler, never a crash of the master
                task.ok, task.reason, task.error = False, "raise", describe_error(e)
            task.t_end = free_since = self.now()
            task.compute_time = task.t_end - task.t_start
            with self._lock:
                if self._gen[w] != gen:  # preempted meanwhile: a fresh thread has the queue
                    return
                task.on_cancel = None
                self._current[w] = None
                self.running -= 1
                self._loads[w] -= 1
                self.executed.append(task)
                self.slow_tasks += task.slow
                if task.reason == "crash" and self.mark_dead:
                    self.dead[w] = True
                    lost = [t for t in q if not t.cancelled]
                    q.clear()
                    for t in lost:
                        t.on_cancel, t.ok, t.reason, t.error, t.t_end = None, False, "crash", "worker lost", self.now()
                        self._loads[w] -= 1
                        self.post(lambda t=t: self._deliver(t))
            self.post(lambda task=task: self._deliver(task))
            if task.reason == "crash" and self.mark_dead:
                return

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers and the control thread (queued tasks are abandoned: drain the front end first).
        Threads still in a task get up to `timeout` seconds in all to finish it; one still busy after that (a
        hung f) is abandoned: threads are daemons."""
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            for t in self._current:
                if t is not None and t.stop is not None:
                    t.stop.set()
            for cv in self._cv:
                cv.notify_all()
            threads = list(self.threads)
        end = time.monotonic() + timeout
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))
        self._control.join(max(0.0, end - time.monotonic()))
        self.backend.close()
