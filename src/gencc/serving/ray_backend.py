"""Ray backend for the serving pool: one actor per worker, each holding its own models (built from factories).

The pool's worker threads keep the FIFO queues and the straggler state; each task is one remote call on that
worker's actor. A killed actor (fault "crash", or lost) fails its task with reason "crash" and the pool marks
the worker dead. Ray starts on 127.0.0.1 unless `address` names an existing cluster; run it inside the
loopback-only network namespace (gencc.testing.isolation) in tests and benchmarks.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .pool import execute


class _Worker:
    def __init__(self, factories: dict[str, Callable[[], Callable]]):
        self.functions = {name: make() for name, make in factories.items()}

    def run(self, fn: str, x: Any, extra_s: float, slow: float, fault: str, hang_s: float) -> np.ndarray:
        return execute(self.functions[fn], x, extra_s, slow, fault, hang_s)

    def ready(self) -> bool:
        return True


class RayBackend:
    """`n_workers` Ray actors; `factories` maps model names ("f", "parity") to picklable builders."""

    def __init__(self, n_workers: int, factories: dict[str, Callable[[], Callable]], address: str | None = None,
                 ready_timeout: float = 120.0):
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._owns = not ray.is_initialized()
        if self._owns:
            if address is not None:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
                         _temp_dir=tempfile.mkdtemp(prefix="gencc-ray-"))
        self.ray = ray
        actor = ray.remote(num_cpus=0, max_restarts=0)(_Worker)
        self.actors = [actor.remote(factories) for _ in range(n_workers)]
        ray.get([a.ready.remote() for a in self.actors], timeout=ready_timeout)

    def run(self, worker: int, fn: str, x: Any, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event) -> np.ndarray:
        ray = self.ray
        a = self.actors[worker]
        if fault == "crash":
            ray.kill(a, no_restart=True)
        try:
            return ray.get(a.run.remote(fn, np.asarray(x), extra_s, slow, fault, hang_s))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            raise ConnectionError("actor lost") from e
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            raise RuntimeError(str(cause) if cause is not None else "raise") from e

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # already dead
                pass
        if self._owns:
            self.ray.shutdown()
