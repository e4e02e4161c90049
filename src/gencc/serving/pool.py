"""The real environment: W long-lived workers (threads, or threads driving one Ray actor each) and a control
thread on the wall clock that runs the dispatcher, so policies stay single-threaded.

Each worker runs one task at a time from its own FIFO queue and drops a task cancelled before it starts. A task
costs the model's real compute plus injected time: `ServiceTimes` x the worker's persistent-straggler
multiplier (compute is slowed by the same factor). Faults make a task fail (a straggler for the dispatcher).
The pool also records its own delays (`lags`, seconds; the simulator can replay them): "post", a callback
(a submitted request, a finished task) waiting for the control thread; "timer", a timer firing late; "pickup",
a worker starting a task later than it could have (woken late).
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

from .core import Task
from .stragglers import Faults, PersistentStragglers, ServiceTimes, WrongResults

#: the pool's own delays it records (see the module docstring)
LAGS = ("post", "timer", "pickup")


def execute(fn: Callable, x: Any, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event | None = None) -> np.ndarray:
    """Run fn on one input with injected time (`extra_s` x `slow`, compute slowed by `slow` too) and a fault
    ('' none). Raises RuntimeError for a failed task; returns the float64 output."""
    t0 = time.perf_counter()
    wait = (stop.wait if stop is not None else time.sleep)
    if fault == "hang":
        wait(hang_s)
        raise RuntimeError("hang")
    out = np.asarray(fn(np.asarray(x, dtype=np.float32)[None]), dtype=float)[0]
    compute = time.perf_counter() - t0
    rest = extra_s * slow + compute * (slow - 1)
    if rest > 0:
        wait(rest)
    if fault == "raise":
        raise RuntimeError("raise")
    if fault == "nan":
        out = out * np.nan
    if not np.all(np.isfinite(out)):
        raise RuntimeError("nan")
    return out


class LocalBackend:
    """Runs tasks in the worker thread itself, with the models held in this process."""

    def __init__(self, functions: dict[str, Callable]):
        self.functions = functions

    def run(self, worker: int, fn: str, x: Any, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event) -> np.ndarray:
        if fault == "crash":
            raise ConnectionError("worker crashed")
        return execute(self.functions[fn], x, extra_s, slow, fault, hang_s, stop)

    def close(self) -> None:
        pass


class Pool:
    """Real `Env`: W worker threads with FIFO queues plus the control thread (see the module docstring).

    `post(fn)` runs fn on the control thread; the dispatcher must only be touched from there.
    """

    def __init__(self, n_workers: int, backend: Any, service: ServiceTimes | None = None,
                 stragglers: PersistentStragglers | None = None, faults: Faults | None = None, seed: int = 0,
                 wrong: WrongResults | None = None):
        if n_workers < 1:
            raise ValueError(f"need at least one worker, got {n_workers}")
        self.n_workers, self.backend, self.wrong = n_workers, backend, wrong
        self.service = service or ServiceTimes(0.0)
        self.stragglers, self.faults = stragglers, faults
        self._rngs = [np.random.default_rng([seed, 3, w]) for w in range(n_workers)]
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._cv = [threading.Condition(self._lock) for _ in range(n_workers)]
        self._queues: list[deque[Task]] = [deque() for _ in range(n_workers)]
        self._loads = np.zeros(n_workers)
        self.dead = np.zeros(n_workers, dtype=bool)
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
        self._threads = [threading.Thread(target=self._work, args=(w,), daemon=True, name=f"gencc-worker-{w}")
                         for w in range(n_workers)]
        self._control = threading.Thread(target=self._loop, daemon=True, name="gencc-control")
        for t in self._threads:
            t.start()
        self._control.start()

    # ----- Env (control thread) ----------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter() - self._t0

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self.now() + max(float(delay), 0.0), next(self._seq), fn))

    def loads(self) -> np.ndarray:
        with self._lock:
            return np.where(self.dead, np.inf, self._loads)

    def send(self, worker: int, task: Task) -> None:
        with self._lock:
            if self.dead[worker]:
                task.ok, task.reason, task.t_end = False, "crash", self.now()
                self.post(lambda: task.on_done(task))
                return
            self._loads[worker] += 1
            task.on_cancel = self._cancelled
            self._queues[worker].append(task)
            self._cv[worker].notify()

    def _cancelled(self, task: Task) -> None:
        with self._lock:
            if task.on_cancel is not None:  # still queued
                task.on_cancel = None
                self._loads[task.worker] -= 1

    # ----- control thread ------------------------------------------------------------------------------
    def post(self, fn: Callable[[], None]) -> None:
        """Run fn on the control thread (thread-safe)."""
        self._inbox.put((self.now(), fn))

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
        except Exception as e:  # a policy bug must not kill the control thread; it is kept for tests
            self.errors.append(e)

    # ----- workers ------------------------------------------------------------------------------------
    def _work(self, w: int) -> None:
        q, cv, rng = self._queues[w], self._cv[w], self._rngs[w]
        free_since = 0.0  # when this worker last finished a task
        while True:
            with cv:
                while not q and not self._stop.is_set():
                    cv.wait(0.1)
                if self._stop.is_set():
                    return
                task = q.popleft()
                if task.cancelled:
                    self.dropped += 1
                    continue
                task.on_cancel = None
                self.running += 1
                task.busy = self.running
            task.t_start = self.now()
            sent = task.t_start if math.isnan(task.t_sent) else task.t_sent
            self.lags["pickup"].append(task.t_start - max(sent, free_since))
            mult = self.stragglers.multiplier(w, task.t_start) if self.stragglers is not None else 1.0
            task.slow = mult > 1
            fault = self.faults.draw(rng) if self.faults is not None else ""
            hang_s = self.faults.hang_s if self.faults is not None else 0.0
            try:
                task.output = self.backend.run(w, task.fn, task.x, self.service.draw(rng), mult, fault, hang_s,
                                               self._stop)
                task.ok = True
                if self.wrong is not None:
                    task.output, task.wrong = self.wrong.corrupt(w, task.output, rng)
            except ConnectionError:
                task.ok, task.reason = False, "crash"
            except Exception as e:
                task.ok, task.reason = False, str(e) if str(e) in ("raise", "nan", "hang") else "raise"
            task.t_end = free_since = self.now()
            with self._lock:
                self.running -= 1
                self._loads[w] -= 1
                self.executed.append(task)
                self.slow_tasks += task.slow
                if task.reason == "crash":
                    self.dead[w] = True
                    lost = [t for t in q if not t.cancelled]
                    q.clear()
                    for t in lost:
                        t.on_cancel, t.ok, t.reason, t.t_end = None, False, "crash", self.now()
                        self._loads[w] -= 1
                        self.post(lambda t=t: t.on_done(t))
            self.post(lambda task=task: task.on_done(task))
            if task.reason == "crash":
                return

    def close(self) -> None:
        """Stop workers and the control thread (queued tasks are abandoned: drain the service first)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self._control.join(timeout=5)
        self.backend.close()
