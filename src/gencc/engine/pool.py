"""The one place a pool of workers is built (`make_pool`) and a backend by name (`make_backend`: the local
threads, or Ray actors with their cluster's address checked): how many threads serve the workers, and where
their tasks run. Jobs, serving and training call them, so each choice is made here once. Importing this module
never imports Ray (`gencc.engine.ray.backend` imports it only when a backend starts).

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

from .backends import Constant, ThreadBackend, backend_name
from .ray.backend import RayBackend, check_address
from .remote import Fleet, check_upstreams
from .remote_backend import RemoteBackend
from .workers import Workers

#: the most threads of a shared pool, whatever the cores
MAX_SHARED_THREADS = 32
#: a shared pool's threads per core (a per-input f that waits, an I/O call or a GIL-releasing kernel, overlaps)
SHARED_PER_CORE = 4


def shared_threads(cores: int | None = None) -> int:
    """Threads of a shared pool: SHARED_PER_CORE per core, at most MAX_SHARED_THREADS (O(1) in the workers)."""
    return max(1, min(MAX_SHARED_THREADS, SHARED_PER_CORE * (cores or os.cpu_count() or 1)))


def make_backend(kind: str, n_workers: int, functions: dict[str, Callable] | None = None, *,
                 factories: dict[str, Callable[[], Callable]] | None = None, dtype: Any = None,
                 address: str | None = None, upstreams: Any = None, **ray_options: Any) -> Any:
    """The one way a backend is built by name (every front end calls it: jobs, serving, training).

    kind: "local" (or its alias "threads"), a `ThreadBackend` running `functions` (name -> callable: "f",
    "parity") in the worker threads; "ray", a `gencc.engine.ray.backend.RayBackend` of `n_workers` actors, each
    building the models from `factories` (name -> picklable zero-argument builder, so a torch model is built on
    the actor), or, without `factories`, holding a pickled copy of each of `functions`. address: the Ray cluster
    to join ("auto", HOST:PORT or ray://HOST:PORT; checked before Ray starts: a ValueError names the forms),
    None for a private Ray on 127.0.0.1; ray_options: `RayBackend`'s other keyword arguments (num_cpus,
    max_concurrency, max_restarts, worker_placement, worker_cpus, worker_resources, actor_options, init_kwargs,
    temp_dir, ready_timeout, on_ready, connect_timeout).
    "remote": a `gencc.engine.remote_backend.RemoteBackend`, worker w being replica w of `upstreams` (their URLs,
    checked by `gencc.engine.remote.check_fleet` first, or a checked `Fleet`); `n_workers` must be their number,
    `functions` and `factories` do not apply (the replicas hold the model); its options (connect_s, read_s,
    max_in_flight, allow_degraded) come in `ray_options`' place. A ValueError for an unknown kind, or an option
    given to a backend it does not apply to."""
    kind = backend_name(kind)
    if kind != "remote" and upstreams is not None:
        raise ValueError(f"upstreams apply to the remote backend (replicas gencc does not run), not {kind}")
    if kind == "remote":
        if upstreams is None:
            raise ValueError("the remote backend needs upstreams: the URLs of the model replicas, one per worker")
        for name, value in (("address", address), ("factories", factories)):
            if value is not None:
                raise ValueError(f"{name} applies to the ray backend; the remote backend's workers are replicas")
        count = len(upstreams.upstreams) if isinstance(upstreams, Fleet) else len(check_upstreams(upstreams))
        if n_workers != count:
            raise ValueError(f"the remote backend has one worker per upstream: {count} upstreams, {n_workers} workers")
        return RemoteBackend(upstreams, **ray_options)
    if kind == "local":
        for name, value in (("address", address), ("factories", factories), *ray_options.items()):
            if value is not None:
                raise ValueError(f"{name} applies to the ray backend; the local backend runs its workers' "
                                 "functions in this process")
        return ThreadBackend(functions, dtype=dtype)
    if address is not None:
        check_address(address)
    if factories is None:
        factories = {name: Constant(fn) for name, fn in (functions or {}).items()}
    return RayBackend(n_workers, dict(factories), address, **ray_options)


def make_pool(n_workers: int, backend: Any, *args: Any, threads: int | str | None = None, **options: Any) -> Workers:
    """`Workers` over `backend` (an object, or a name for `make_backend`), served by `threads` (see the module
    docstring: None, an integer, or "shared"); `args` and `options` are the rest of `Workers`'s arguments
    (service times, stragglers, faults, ...). On a `RayBackend` with threads None: `RayWorkers`."""
    if isinstance(backend, str):
        backend = make_backend(backend, n_workers)
    if threads is None and isinstance(backend, RayBackend):
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
