"""The one place a pool of workers is built (`make_pool`): the backend, by name or as an object, and how many
threads serve the workers. Jobs, serving and training call it, so a choice of threads is made here once.

Threads: None, a thread per worker, except on a `RayBackend`, whose calls one thread sends and waits on with
`ray.wait` (`gencc.engine.ray.workers.RayWorkers`: no thread per worker or actor); an integer T, thread t
serving the workers w with w % T == t, running their ready tasks as one batched call; "shared",
`shared_threads()` threads that every worker's queue feeds: a free thread takes the next ready task of any idle
worker, one task per call, so a call that hangs holds only its own task (and its thread, which is replaced when
the task is cancelled or times out) while the other threads serve every other worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .backends import BACKENDS, ThreadBackend
from .workers import Workers

#: the most threads of a shared pool, whatever the cores
MAX_SHARED_THREADS = 32
#: a shared pool's threads per core (a per-input f that waits, an I/O call or a GIL-releasing kernel, overlaps)
SHARED_PER_CORE = 4


def shared_threads(cores: int | None = None) -> int:
    """Threads of a shared pool: SHARED_PER_CORE per core, at most MAX_SHARED_THREADS (O(1) in the workers)."""
    return max(1, min(MAX_SHARED_THREADS, SHARED_PER_CORE * (cores or os.cpu_count() or 1)))


def make_backend(kind: str, n_workers: int, functions: dict[str, Callable] | None = None, *, dtype: Any = None,
                 address: str | None = None, **ray_options: Any) -> Any:
    """A backend by name: "local" (or "threads"), a `ThreadBackend` holding `functions`; "ray", a `RayBackend`
    of `n_workers` actors each building `functions`' factories (`address`: a cluster; `ray_options`: its
    keyword arguments)."""
    if kind in ("local", "threads"):
        return ThreadBackend(functions, dtype=dtype)
    if kind == "ray":
        from .ray.backend import RayBackend

        return RayBackend(n_workers, dict(functions or {}), address, **ray_options)
    raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def make_pool(n_workers: int, backend: Any, *args: Any, threads: int | str | None = None, **options: Any) -> Workers:
    """`Workers` over `backend` (an object, or a name for `make_backend`), served by `threads` (see the module
    docstring: None, an integer, or "shared"); `args` and `options` are the rest of `Workers`'s arguments
    (service times, stragglers, faults, ...). On a `RayBackend` with threads None: `RayWorkers`."""
    if isinstance(backend, str):
        backend = make_backend(backend, n_workers)
    if threads is None:
        from .ray.backend import RayBackend  # no Ray import: the module imports it only when a backend starts

        if isinstance(backend, RayBackend):
            from .ray.workers import RayWorkers

            return RayWorkers(n_workers, backend, *args, **options)
    if threads == "shared":
        if not hasattr(backend, "run_items"):
            raise ValueError("shared threads need a backend that runs tasks in the thread (run_items); "
                             f"{type(backend).__name__} blocks a thread per worker: use threads=None")
        return Workers(n_workers, backend, *args, threads=shared_threads(), shared=True, **options)
    if isinstance(threads, str):
        raise ValueError(f"threads must be None, a positive integer or 'shared', got {threads!r}")
    return Workers(n_workers, backend, *args, threads=threads, **options)
