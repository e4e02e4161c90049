"""The built-in plain policies, on the `gencc.serving.dispatch.Dispatcher` base (the same classes drive the real
pool and the simulator): `UncodedDispatcher` (least-loaded worker), `ReplicatedDispatcher` (copies on distinct
workers, first answer wins) and `HedgedDispatcher` (a second copy after the observed p95). The coded ones are
`CodedDispatcher` (groups of K requests with any systematic `Code`: GCC, BACC, ParM; `coded`) and
`CheckedDispatcher` (`checked`).
"""

from __future__ import annotations

from ..dispatch import Dispatcher, Env, Request, RollingQuantile


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

    def workers_needed(self) -> int:
        return self.copies

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

    def workers_needed(self) -> int:
        return min(2, self.env.n_workers)

    def dispatch(self, req: Request) -> None:
        if self.send_copy(req, "primary") is None:
            self.answer(req, None, status=503, error="no live worker")
            return
        delay = self.latency.value
        early = self.by_deadline(req, delay)
        if early < delay:  # its target comes first: a hedge then, if a worker is idle
            self.later(early, lambda: self._hedge(req, early=True), req)
        self.later(delay, lambda: self._hedge(req), req)

    def _hedge(self, req: Request, early: bool = False) -> None:
        if (early and not self.idle()) or any(t.kind == "hedge" for t in req.tasks):
            return
        if not req.status and self.can_make(req):  # no hedge for a request whose target is already lost
            self.send_copy(req, "hedge", exclude={t.worker for t in req.tasks})
