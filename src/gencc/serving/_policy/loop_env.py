"""`LoopEnv`: a dispatcher's environment on a local pool, on the HTTP front door's event loop once attached."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ...engine import Task, Workers


class LoopEnv:
    """The environment of a dispatcher on a local pool: the pool's workers, with the dispatcher's thread the
    pool's control thread until `attach(loop)`, then the asyncio event loop serving the HTTP front door
    (`create_app`'s lifespan attaches it). Attached, a request is dispatched on the loop as it is parsed and a
    task's result goes from its worker thread straight to the loop (the pool runs its callbacks inline): two
    thread hand-offs per request, as a plain app calling the model in a thread pool makes, instead of four
    through the control thread. The coded schemes run there too: a group's encode and a decode at K = 8, N = 12
    take tens of microseconds, a small part of the loop's own time per request (`benchmarks/serving_floor.py`
    measures both). Ray keeps the control thread.

    Every callback into the dispatcher runs on its thread, whichever it is when the callback fires: a task's
    result, a timer set before an attach (or a detach) that fires after it, a `post` from any thread."""

    def __init__(self, pool: Workers):
        self.pool = pool
        self.loop: Any = None
        self._loop_thread: int | None = None
        self._control: int | None = None  # the pool's control thread (learned from the first thing it runs)
        self._queue: deque[Callable[[], None]] = deque()  # callbacks for the loop (`post`)
        self._wake = False  # a `_drain` of them is scheduled on the loop
        pool.post(self._learn_control)

    def _learn_control(self) -> None:
        self._control = threading.get_ident()

    @property
    def n_workers(self) -> int:
        return self.pool.n_workers

    def now(self) -> float:
        return self.pool.now()

    def loads(self) -> np.ndarray:
        return self.pool.loads()

    def attach(self, loop: Any, thread: int | None = None) -> None:
        """Run the dispatcher on `loop`, running in thread `thread` (an ident), from now on (None: back on the
        pool's control thread)."""
        self.loop, self._loop_thread = loop, (None if loop is None else thread)

    def on_loop(self) -> bool:
        """Whether this is the attached loop's thread."""
        return self.loop is not None and threading.get_ident() == self._loop_thread

    def on_thread(self) -> bool:
        """Whether this is the dispatcher's thread now: the attached loop's, else the pool's control thread."""
        return threading.get_ident() == (self._control if self.loop is None else self._loop_thread)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run fn on the dispatcher's thread after `delay` seconds (call from the dispatcher's thread)."""
        if self.loop is None:
            self.pool.call_later(delay, lambda: self._fire(fn))
        else:
            self.loop.call_later(max(float(delay), 0.0), self._fire, fn)

    def _fire(self, fn: Callable[[], None]) -> None:
        """A timer is due: run fn here if this is still the dispatcher's thread, else hand it there."""
        if self.on_thread():
            self.pool.call_guarded(fn)
        else:
            self.post(fn)

    def post(self, fn: Callable[[], None]) -> None:
        """Run fn on the dispatcher's thread (from any thread). Attached, callbacks queue up and one wake-up of
        the loop runs all those queued meanwhile (not one `call_soon_threadsafe`, a pipe write, each)."""
        loop = self.loop
        if loop is None:
            self.pool.post(fn)
            return
        self._queue.append(fn)
        if self._wake:  # a drain is due: it runs fn (it clears the flag before it drains)
            return
        self._wake = True
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop closed under us: the control thread serves
            self._wake = False
            self.pool.post(self._drain)

    def _drain(self) -> None:
        """Run the callbacks queued so far (those queued meanwhile: the next drain, which they scheduled); off
        the dispatcher's thread (detached meanwhile, or the loop closed) the control thread gets them."""
        self._wake = False
        queue = self._queue
        run = self.pool.call_guarded if self.on_thread() else self.pool.post
        for _ in range(len(queue)):
            run(queue.popleft())

    def send(self, worker: int, task: Task) -> None:
        done = task.on_done
        if done is not None:  # the pool calls it inline, in the worker's thread: hand it to the dispatcher's
            task.on_done = lambda t: self.post(lambda: done(t))
        self.pool.send(worker, task)
