"""The serving policies (one copy, used by the real pool and by the simulator alike).

Every dispatcher answers each request exactly once (an output, a 503 when its workers all failed, or a 504 at
`request_timeout`), cancels work that is no longer needed (a worker drops it before starting) and retries a
request whose every live task failed. Schemes: `UncodedDispatcher` (least-loaded worker),
`ReplicatedDispatcher` (copies on distinct workers, first answer wins), `HedgedDispatcher` (a second copy after
the observed p95) and `CodedDispatcher` (groups of K requests with any systematic `Code`: GCC, BACC, ParM; see
its docstring).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine import Task
from .requests import Env, Request, RollingQuantile


class Dispatcher:
    """Base: answers, cancellation, retries, least-loaded choice, timing statistics."""

    name = "base"

    def __init__(self, env: Env, *, request_timeout: float = 30.0, max_retries: int = 2, seed: int = 0,
                 on_answer: Callable[[Request], None] | None = None):
        self.env = env
        self.request_timeout = float(request_timeout)
        self.max_retries = int(max_retries)
        self.rng = np.random.default_rng(seed)
        self.on_answer = on_answer
        self.latency = RollingQuantile(0.95, default=math.inf)
        self.failures: dict[str, int] = {}
        self.tasks_sent = 0
        self.pending = 0

    # ----- what schemes implement ---------------------------------------------------------------------
    def dispatch(self, req: Request) -> None:
        raise NotImplementedError

    def task_done(self, task: Task) -> None:
        """A task finished (ok or failed); default: a plain copy of its request."""
        req: Request = task.owner
        if task.ok:
            self.answer(req, task.output, degraded=False)
        else:
            self.maybe_retry(req)

    # ----- shared machinery ---------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Take a new request (the env calls this on the dispatcher thread)."""
        self.pending += 1
        self.env.call_later(self.request_timeout, lambda: self.answer(req, None, status=504,
                                                                      error="request timed out"))
        self.dispatch(req)

    def answer(self, req: Request, output: Any, degraded: bool = False, status: int = 200,
               error: str = "") -> bool:
        """Answer `req` unless already answered; cancels its outstanding tasks. True when this call answered."""
        if req.status:
            return False
        req.status, req.output, req.degraded, req.error = status, output, degraded, error
        req.t_done = self.env.now()
        self.pending -= 1
        if status == 200:
            self.latency.add(req.latency)
        for t in req.tasks:
            t.cancel()
        self.answered(req)
        if self.on_answer is not None:
            self.on_answer(req)
        if req.respond is not None:
            req.respond(req)
        return True

    def answered(self, req: Request) -> None:
        """Hook for schemes (a coded group learns a member is done)."""

    def least_loaded(self, exclude: Any = ()) -> int:
        """A worker with the fewest queued + running tasks, ties at random; -1 if none is available."""
        loads = np.asarray(self.env.loads(), dtype=float) + self.rng.random(self.env.n_workers) * 0.5
        if exclude:
            loads[list(exclude)] = math.inf
        w = int(np.argmin(loads))
        return -1 if not math.isfinite(loads[w]) else w

    def send(self, worker: int, task: Task) -> Task:
        task.worker, task.t_sent = worker, self.env.now()
        self.tasks_sent += 1
        self.env.send(worker, task)
        return task

    def send_copy(self, req: Request, kind: str, exclude: Any = ()) -> Task | None:
        """Send a plain copy of `req` (f on its input) to the least-loaded worker not in `exclude`."""
        w = self.least_loaded(exclude)
        if w < 0:
            return None
        t = Task(x=req.x, fn="f", on_done=self._done, kind=kind, owner=req)
        req.tasks.append(t)
        return self.send(w, t)

    def _done(self, task: Task) -> None:
        if not task.ok:
            self.failures[task.reason] = self.failures.get(task.reason, 0) + 1
        self.task_done(task)

    def live(self, req: Request) -> bool:
        """Whether some task that could answer `req` is still queued or running."""
        return any(not t.cancelled and math.isnan(t.t_end) for t in req.tasks)

    def maybe_retry(self, req: Request) -> None:
        """After a failure: if nothing else can answer `req`, retry it elsewhere or give up with a 503."""
        if req.status or self.live(req):
            return
        if req.retries >= self.max_retries:
            self.answer(req, None, status=503, error=f"all {req.retries + 1} attempts failed on workers")
            return
        req.retries += 1
        tried = {t.worker for t in req.tasks}
        if self.send_copy(req, "retry", exclude=tried if len(tried) < self.env.n_workers else ()) is None:
            self.answer(req, None, status=503, error="no live worker")


class UncodedDispatcher(Dispatcher):
    """Each request to the least-loaded worker."""

    name = "uncoded"

    def dispatch(self, req: Request) -> None:
        if self.send_copy(req, "primary") is None:
            self.answer(req, None, status=503, error="no live worker")


class ReplicatedDispatcher(Dispatcher):
    """`copies` copies on distinct least-loaded workers; the first answer wins, the others are cancelled."""

    name = "replication"

    def __init__(self, env: Env, copies: int = 2, **kw):
        super().__init__(env, **kw)
        if not 1 <= copies <= env.n_workers:
            raise ValueError(f"copies must lie in [1, workers={env.n_workers}], got {copies}")
        self.copies = copies

    def dispatch(self, req: Request) -> None:
        for _ in range(self.copies):
            self.send_copy(req, "copy", exclude={t.worker for t in req.tasks})
        if not req.tasks:
            self.answer(req, None, status=503, error="no live worker")


class HedgedDispatcher(Dispatcher):
    """One copy at once, a second on another worker if unanswered after the observed `quantile` of latency
    (`initial_delay` until enough requests were answered)."""

    name = "hedged"

    def __init__(self, env: Env, quantile: float = 0.95, initial_delay: float = 0.05, **kw):
        super().__init__(env, **kw)
        self.latency = RollingQuantile(quantile, default=initial_delay)

    def dispatch(self, req: Request) -> None:
        if self.send_copy(req, "primary") is None:
            self.answer(req, None, status=503, error="no live worker")
            return
        self.env.call_later(self.latency.value, lambda: self._hedge(req))

    def _hedge(self, req: Request) -> None:
        if not req.status:
            self.send_copy(req, "hedge", exclude={t.worker for t in req.tasks})
