"""RayExecutor: a job's logical workers on Ray actors. A thin executor: its backend is built by the engine's one
backend factory (`gencc.engine.make_backend("ray", ...)`, a `gencc.engine.ray.backend.RayBackend`: everything Ray
lives in `gencc.engine.ray`), which also checks the cluster's address.

Ray is imported lazily, so `import gencc` never imports it.

- f: each actor calls `factory()` once when it starts (a torch model is built there, not shipped per call).
  Without a factory, the first f passed to `run` is shipped once to each actor. A worker's own function (a
  code's `worker_function`, e.g. ParM's parity model) is put in the object store once and built once per
  actor, on first use (a gencc workload model pickles as its factory).
- Logical worker n of a job runs on the engine's worker n (a FIFO queue), whose tasks go to actor
  n % num_actors; one master thread sends them and waits with `ray.wait` over every call out
  (`gencc.engine.ray.workers.RayWorkers`: no master thread per worker); each call runs in its own actor thread, so
  the injected delays of the workers sharing an actor overlap while their real compute contends for that
  actor's process.
- Cancellation is cooperative: a cancelled task's actor gets `cancel(key)` (a threaded actor, so it runs beside
  the tasks), which ends the task's injected delay. No force-kill in steady state.
- An actor that dies mid-job (killed, crashed, its process gone) turns its unfinished tasks into stragglers
  ("lost"); the backend replaces it by a fresh actor (up to `max_restarts` times per actor, -1: no limit),
  which rebuilds f from the factory, for the later tasks of that worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._util.validate import check_int, check_positive
from ..engine import Constant, Task, Workers, make_backend, make_pool
from ..engine.ray import RayBackend, check_address
from ..engine.ray.placement import check_placement
from .executor import Batch, EngineBatch, Executor


class RayExecutor(Executor):
    """Ray backend.

    factory: picklable zero-argument callable that builds f on each actor (recommended for torch models).
    num_actors: actors to start (default: N of the first job, one per logical worker).
    address: an existing cluster ("auto", HOST:PORT or ray://HOST:PORT; anything else is a ValueError at once),
    used as given; None starts a private local Ray bound to 127.0.0.1 (no dashboard, usage stats off unless set, a
    private temp dir, no credential file on disk) that `close()` shuts down.
    connect_timeout: seconds the cluster at `address` may take to answer when the executor starts (None: the
    environment's GENCC_RAY_CONNECT_MS milliseconds, else 10 s); past it, `gencc.errors.ClusterUnreachable` (a
    `GenccError` and a ConnectionError) names the address.
    If Ray is already initialised in this process, it is used as it is.
    max_concurrency: threads per actor (tasks of several logical workers and jobs overlap on one actor).
    max_restarts: how many times each dead actor is replaced by a fresh one (-1: no limit; 0: never).
    worker_placement: "spread" puts the actors across the cluster's nodes (Ray's SPREAD) and moves them onto nodes that
    join; "pack" (None) is Ray's default. worker_cpus: CPUs each actor reserves (None: none);
    worker_resources: the custom resources each asks of its node, e.g. {"gpu_node": 1} (Ray then places it
    only on nodes offering them). Checked at once: a `gencc.errors.ConfigError` names the one to fix.
    actor_options: any other option of Ray's `.options()` for the actors (it overrides those above).
    on_ready: called as on_ready(ready, total) when the actors are created and as each one has built f (building
    a torch model on each of 16 actors takes tens of seconds on a small machine: worth showing).
    ready_timeout: seconds the actors may take to start and build f (`start`, before a job's clock starts: a
    job's timeout and deadline count from ready actors).
    A private temp dir this executor created is removed by `close()`.
    """

    def __init__(self, factory: Callable[[], Callable] | None = None, num_actors: int | None = None,
                 address: str | None = None, *, num_cpus: int | None = None, max_concurrency: int = 64,
                 max_restarts: int = -1, actor_options: dict | None = None, init_kwargs: dict | None = None,
                 temp_dir: str | None = None, ready_timeout: float = 180.0,
                 on_ready: Callable[[int, int], None] | None = None, connect_timeout: float | None = None,
                 worker_placement: str | None = None, worker_cpus: float | None = None,
                 worker_resources: dict[str, float] | None = None):
        if factory is not None and not callable(factory):
            raise ValueError("factory must be a zero-argument callable that builds f")
        num_actors = check_int("num_actors", num_actors, 1, optional=True)
        max_concurrency = check_int("max_concurrency", max_concurrency, 1)
        max_restarts = check_int("max_restarts", max_restarts, -1, hint="-1: restart without limit")
        ready_timeout = check_positive("ready_timeout", ready_timeout, unit="seconds")
        self.connect_timeout = check_positive("connect_timeout", connect_timeout, optional=True, unit="seconds")
        if address is not None:
            check_address(address)  # at once, not when the first job starts Ray
        self.factory, self.num_actors, self.address = factory, num_actors, address
        self.num_cpus, self.max_concurrency, self.max_restarts = num_cpus, max_concurrency, max_restarts
        self.actor_options = dict(actor_options or {})
        self.placement_options = check_placement(worker_placement, worker_cpus, worker_resources)
        self.init_kwargs = dict(init_kwargs or {})
        self.temp_dir, self.ready_timeout, self.on_ready = temp_dir, ready_timeout, on_ready
        self._f: Callable | None = None
        self._lock = threading.Lock()
        self._backend: RayBackend | None = None
        self._workers: Workers | None = None

    # ----- what the actors are ------------------------------------------------------------------------------
    @property
    def actors(self) -> list:
        return self._backend.actors if self._backend is not None else []

    @property
    def actor_pids(self) -> list[int]:
        return self._backend.actor_pids if self._backend is not None else []

    @property
    def _own_tmp(self) -> str | None:
        return self._backend._own_tmp if self._backend is not None else None

    @property
    def rebalanced(self) -> int:
        """Workers moved onto nodes that joined so far (the "spread" placement)."""
        return self._backend.nodes.rebalanced if self._backend is not None else 0

    @property
    def restarts(self) -> list[int]:
        """Replacements of a dead actor so far, per actor slot."""
        return list(self._backend.restarts) if self._backend is not None else []

    def placement(self, timeout: float = 60.0) -> list[str]:
        """The Ray node id each actor runs on, per actor slot ("" for one that did not answer within `timeout`
        seconds: dead, or a replacement still starting)."""
        if self._backend is None:
            raise RuntimeError("this RayExecutor has not started: call start() or run a job first")
        return self._backend.placement(timeout)

    def actor_for(self, worker: int) -> Any:
        """The actor that runs logical worker `worker` (worker % num_actors)."""
        if self._backend is None:
            raise RuntimeError("this RayExecutor has not started: call start() or run a job first")
        return self._backend.actor_for(worker)

    # ----- setup --------------------------------------------------------------------------------------------
    def start(self, f: Callable | None = None, num_workers: int | None = None) -> RayExecutor:
        """Start Ray (if needed) and the actors, and wait until each has built f. Idempotent."""
        with self._lock:
            if self._backend is not None:
                if self.factory is None and f is not None and f is not self._f:
                    raise ValueError("this RayExecutor's actors hold another function; create a new RayExecutor "
                                     "(or build it with factory=) for a different f")
                return self
            factory = self.factory
            if factory is None:
                if f is None:
                    raise ValueError("no function: pass f to run, or build RayExecutor(factory=...)")
                factory, self._f = Constant(f), f
            n = self.num_actors or num_workers
            if n is None:
                raise ValueError("num_actors unknown: pass num_actors or num_workers")
            self._backend = make_backend("ray", n, factories={"f": factory}, address=self.address,
                                         num_cpus=self.num_cpus, max_concurrency=self.max_concurrency,
                                         max_restarts=self.max_restarts, actor_options=self.actor_options,
                                         init_kwargs=self.init_kwargs, temp_dir=self.temp_dir,
                                         ready_timeout=self.ready_timeout, on_ready=self.on_ready,
                                         connect_timeout=self.connect_timeout,
                                         worker_placement=self.placement_options.strategy,
                                         worker_cpus=self.placement_options.cpus,
                                         worker_resources=dict(self.placement_options.resources))
            self._workers = make_pool(max(n, num_workers or 1), self._backend, preempt=True, mark_dead=False,
                                      name="gencc-ray-worker")
            self.num_actors = n
        return self

    # ----- the Executor interface ---------------------------------------------------------------------------
    def prepare(self, f: Callable | None, num_workers: int) -> None:
        """Start Ray and the actors (`start`) before a job's clock starts: their start-up is bounded by
        `ready_timeout`, not by the job's timeout."""
        self.start(f, num_workers)

    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        n = max((int(t.worker) for t in tasks), default=0) + 1
        self.start(f, n)
        backend, workers = self._backend, self._workers
        if backend is None or workers is None:
            raise RuntimeError("this RayExecutor is closed")
        for t in tasks:  # a function that cannot be shipped fails the call, not the workers
            if callable(t.fn):
                backend.ship(t.fn)
        workers.grow(n)
        batch = EngineBatch(workers)
        batch.add(tasks)
        return batch

    def close(self) -> None:
        """Stop the actors; shut Ray down if this executor started or connected it."""
        with self._lock:
            workers = self._workers
            self._workers = self._backend = None
        if workers is not None:
            workers.close(5.0)  # no thread waits in a call; closes the backend: its actors killed, Ray shut down
            # if this executor started it

    def __repr__(self) -> str:
        where = self.address or "local 127.0.0.1"
        return f"RayExecutor(num_actors={self.num_actors}, {where})"
