"""What dispatchers share: requests, the environment interface, a rolling quantile.

A dispatcher is written once against `Env`; the engine's `Workers` (threads or Ray actors, wall clock) and
`VirtualWorkers` (virtual time) both implement it and call the dispatcher from one thread only, so dispatchers
hold no locks. Tasks are the engine's (`gencc.engine.Task`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...engine import Task


@dataclass(eq=False)
class Request:
    """One prediction request. `respond(req)` is called exactly once, when status leaves 0."""

    id: int
    x: Any
    t_arrival: float
    respond: Callable[[Request], None] | None = None
    status: int = 0  # 0 pending, 200 answered, 503 overloaded / failed, 504 timed out
    output: Any = None
    degraded: bool = False
    error: str = ""
    t_done: float = math.nan
    tasks: list[Task] = field(default_factory=list, repr=False)
    retries: int = 0
    group: Any = field(default=None, repr=False)
    slot: int = -1
    decoded_from: list[int] | None = None  # worker slots a degraded answer was decoded from
    gate: str = ""  # gencc.serving._policy.gate: "passed" (the decode was sent), "held" (it was not), "" (not judged)
    uncertainty: float = math.nan  # the estimated error sd of the (last) decode judged; nan: none / no estimate
    gate_score: float = math.nan  # its top-1 margin over that sd (the gate's score)

    @property
    def latency(self) -> float:
        return self.t_done - self.t_arrival


class Env(Protocol):
    """What a dispatcher needs from the system it drives (real pool or simulator)."""

    n_workers: int

    def now(self) -> float:
        """Seconds on this environment's clock."""

    def send(self, worker: int, task: Task) -> None:
        """Append `task` to `worker`'s FIFO queue; the env later calls `task.on_done(task)` exactly once
        unless the task is dropped (cancelled before it started)."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn()` (on the dispatcher's thread) after `delay` seconds."""

    def loads(self) -> np.ndarray:
        """Per worker: tasks queued (not cancelled) plus running; inf for a dead worker."""


class RollingQuantile:
    """A quantile of the last `window` observations, recomputed every `every` additions (cheap enough per
    request); `default` until `min_count` observations exist."""

    def __init__(self, q: float, default: float, window: int = 2000, min_count: int = 50, every: int = 25):
        if not 0 < q < 1:
            raise ValueError(f"quantile must lie in (0, 1), got {q}")
        self.q, self.default, self.min_count, self.every = q, float(default), min_count, every
        self.values: deque[float] = deque(maxlen=window)
        self._value = float(default)
        self._since = 0

    def add(self, v: float) -> None:
        self.values.append(float(v))
        self._since += 1
        if self._since >= self.every and len(self.values) >= self.min_count:
            self._value = float(np.quantile(np.fromiter(self.values, float), self.q))
            self._since = 0

    @property
    def value(self) -> float:
        return self._value if len(self.values) >= self.min_count else self.default
