"""RayExecutor: one long-lived Ray actor per worker slot, holding f built on the actor from a factory.

Ray is imported lazily (inside the executor), so `import gencc` never imports it.

- f: the actor calls `factory()` once when it starts (a torch model is built there, not shipped per call).
  Without a factory, the first f passed to `run` is shipped once to each actor. A worker's own function (a
  code's `worker_function`, e.g. ParM's parity model) is put in the object store once and built once per
  actor, on first use (a gencc workload model pickles as its factory).
- Collection: `ray.wait(refs, num_returns=1, timeout=...)`, then a zero-timeout sweep of whatever else is
  ready.
- Cancellation is cooperative: `cancel()` on the actor (a threaded actor, so it runs beside the tasks) sets
  a flag that the task checks before computing, after computing and while it waits its injected delay. No
  force-kill in steady state.
- Logical workers > actors: worker n runs on actor n % num_actors, in its own actor thread. Each logical
  worker keeps its own injected delay (delays overlap, they do not queue), while the real compute of the
  workers sharing an actor contends for that actor's process.
- An actor that dies mid-job turns its unfinished tasks into stragglers ("lost"); Ray restarts it (up to
  `max_restarts`) for later jobs, rebuilding f from the factory.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any

from .._validate import check_int, check_positive
from .executor import Batch, Completion, Constant, Executor, FunctionTable, Task, call_one, describe_error

_ACTOR_CLS: Any = None


class _Worker:
    """The actor body: holds f; computes one input per call; cooperative cancellation by key."""

    #: cancellation flags kept for tasks not yet seen (oldest dropped first)
    MAX_FLAGS = 100_000

    def __init__(self, factory: Callable[[], Callable]):
        self.f = factory()
        self._flags: OrderedDict[Any, threading.Event] = OrderedDict()
        self._lock = threading.Lock()
        self._fns: dict[int, Callable] = {}
        self._fn_lock = threading.Lock()

    def ready(self) -> int:
        return os.getpid()

    def _flag(self, key: Any) -> threading.Event:
        with self._lock:
            ev = self._flags.get(key)
            if ev is None:
                ev = self._flags[key] = threading.Event()
                if len(self._flags) > self.MAX_FLAGS:
                    self._flags.popitem(last=False)
            return ev

    def _function(self, fn_key: int, fn_box: list) -> Callable:
        """A task's own function, fetched from the object store and built on its first use on this actor."""
        with self._fn_lock:
            fn = self._fns.get(fn_key)
            if fn is None:
                import ray

                fn = self._fns[fn_key] = ray.get(fn_box[0])
            return fn

    def compute(self, key: Any, x: Any, delay: float, fn_key: int | None = None,
                fn_box: list | None = None) -> tuple[str, Any, float]:
        flag = self._flag(key)
        try:
            if flag.is_set():
                return ("cancelled", None, 0.0)
            t = time.perf_counter()
            try:
                f = self.f if fn_key is None else self._function(fn_key, fn_box)  # type: ignore[arg-type]
                out = ("ok", call_one(f, x), time.perf_counter() - t)
            except Exception as e:  # reported to the master as a straggler
                out = ("error", describe_error(e), time.perf_counter() - t)
            if flag.is_set():
                return ("cancelled", None, 0.0)
            if delay == float("inf"):
                flag.wait()
                return ("cancelled", None, 0.0)
            if delay > 0 and flag.wait(delay):
                return ("cancelled", None, 0.0)
            return out
        finally:
            with self._lock:
                self._flags.pop(key, None)

    def cancel(self, keys: list) -> None:
        for k in keys:
            self._flag(k).set()


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        _ACTOR_CLS = ray.remote(_Worker)
    return _ACTOR_CLS


class RayExecutor(Executor):
    """Ray backend.

    factory: picklable zero-argument callable that builds f on each actor (recommended for torch models).
    num_actors: actors to start (default: N of the first job, one per logical worker).
    address: an existing cluster ("127.0.0.1:6379", "auto"); None starts a private local Ray bound to
    127.0.0.1 (no dashboard, usage stats off unless set, a private temp dir) that `close()` shuts down.
    If Ray is already initialised in this process, it is used as it is.
    max_concurrency: threads per actor (tasks of several logical workers and jobs overlap on one actor).
    on_ready: called as on_ready(ready, total) when the actors are created and as each one has built f (building
    a torch model on each of 16 actors takes tens of seconds on a small machine: worth showing).
    A private temp dir this executor created is removed by `close()`.
    """

    def __init__(self, factory: Callable[[], Callable] | None = None, num_actors: int | None = None,
                 address: str | None = None, *, num_cpus: int | None = None, max_concurrency: int = 64,
                 max_restarts: int = 4, actor_options: dict | None = None, init_kwargs: dict | None = None,
                 temp_dir: str | None = None, ready_timeout: float = 180.0,
                 on_ready: Callable[[int, int], None] | None = None):
        if factory is not None and not callable(factory):
            raise ValueError("factory must be a zero-argument callable that builds f")
        num_actors = check_int("num_actors", num_actors, 1, optional=True)
        max_concurrency = check_int("max_concurrency", max_concurrency, 1)
        max_restarts = check_int("max_restarts", max_restarts, -1, hint="-1: restart without limit")
        ready_timeout = check_positive("ready_timeout", ready_timeout, unit="seconds")
        self.factory, self.num_actors, self.address = factory, num_actors, address
        self.num_cpus, self.max_concurrency, self.max_restarts = num_cpus, max_concurrency, max_restarts
        self.actor_options = dict(actor_options or {})
        self.init_kwargs = dict(init_kwargs or {})
        self.temp_dir, self.ready_timeout, self.on_ready = temp_dir, ready_timeout, on_ready
        self._own_tmp: str | None = None
        self.actors: list = []
        self.actor_pids: list[int] = []
        self._f: Callable | None = None
        self._owns_ray = False
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._ray: Any = None
        self._functions = FunctionTable(lambda fn: self._ray.put(fn))

    # ----- setup --------------------------------------------------------------------------------------------
    def _init_ray(self) -> Any:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("RayExecutor needs ray: pip install 'gencc[ray]'") from e
        if not ray.is_initialized():
            kw: dict[str, Any] = {"log_to_driver": False, **self.init_kwargs}
            if self.address is not None:
                ray.init(address=self.address, **kw)
            else:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                tmp = self.temp_dir
                if tmp is None:
                    tmp = self._own_tmp = tempfile.mkdtemp(prefix="gencc-ray-")
                kw.setdefault("num_cpus", self.num_cpus)
                ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, _temp_dir=tmp, **kw)
            self._owns_ray = True
        self._ray = ray
        return ray

    def start(self, f: Callable | None = None, num_workers: int | None = None) -> RayExecutor:
        """Start Ray (if needed) and the actors, and wait until each has built f. Idempotent."""
        with self._lock:
            if self.actors:
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
            ray = self._init_ray()
            cls = _actor_class(ray)
            opts = {"num_cpus": 0, "max_concurrency": self.max_concurrency, "max_restarts": self.max_restarts,
                    "max_task_retries": 0, **self.actor_options}
            actors = [cls.options(**opts).remote(factory) for _ in range(n)]
            self.actor_pids = self._wait_ready(ray, [a.ready.remote() for a in actors])
            self.actors = actors
            self.num_actors = n
        return self

    def _wait_ready(self, ray: Any, refs: list) -> list[int]:
        """The actors' pids once every actor has built f, reporting progress to on_ready."""
        deadline, pending = time.monotonic() + self.ready_timeout, list(refs)
        while pending:
            if self.on_ready is not None:
                self.on_ready(len(refs) - len(pending), len(refs))
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                raise TimeoutError(f"{len(pending)} of {len(refs)} Ray actors were not ready after "
                                   f"{self.ready_timeout} s")
        if self.on_ready is not None:
            self.on_ready(len(refs), len(refs))
        return ray.get(refs)

    def actor_for(self, worker: int) -> Any:
        """The actor that runs logical worker `worker` (worker % num_actors)."""
        return self.actors[worker % len(self.actors)]

    # ----- the Executor interface ---------------------------------------------------------------------------
    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        n = max((t.worker for t in tasks), default=0) + 1
        self.start(f, n)
        for t in tasks:  # a function that cannot be shipped fails the call, not the workers
            if t.fn is not None:
                self._functions.entry(t.fn, "RayExecutor")
        batch = _RayBatch(self, next(self._ids))
        batch.add(tasks)
        return batch

    def close(self) -> None:
        """Stop the actors; shut Ray down if this executor started or connected it."""
        with self._lock:
            if self._ray is None:
                return
            for a in self.actors:
                try:
                    self._ray.kill(a)
                except Exception:  # an actor already gone
                    pass
            self.actors = []
            self._functions.clear()
            if self._owns_ray and self._ray.is_initialized():
                self._ray.shutdown()
            self._ray = None
            if self._own_tmp is not None:  # only the folder this executor created
                shutil.rmtree(self._own_tmp, ignore_errors=True)
                self._own_tmp = None

    def __repr__(self) -> str:
        where = self.address or "local 127.0.0.1"
        return f"RayExecutor(num_actors={self.num_actors}, {where})"


class _RayBatch(Batch):
    def __init__(self, ex: RayExecutor, bid: int):
        self.ex, self.bid, self.ray = ex, bid, ex._ray
        self.refs: dict[Any, int] = {}
        self.ready: deque[Completion] = deque()

    def add(self, tasks: Sequence[Task]) -> None:
        for t in tasks:
            extra = () if t.fn is None else self._shipped(t.fn)
            ref = self.ex.actor_for(t.worker).compute.remote((self.bid, t.worker), t.x, float(t.delay), *extra)
            self.refs[ref] = t.worker

    def _shipped(self, fn: Callable) -> tuple[int, list]:
        key, ref = self.ex._functions.entry(fn, "RayExecutor")
        return key, [ref]  # inside a list, so Ray hands the actor the ref, not the (rebuilt) function

    def _convert(self, ref: Any, w: int) -> Completion | None:
        ray = self.ray
        try:
            status, val, dt = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            return Completion(w, error=f"actor died ({type(e).__name__})", lost=True)
        except ray.exceptions.RayError as e:
            return Completion(w, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                              lost=True)
        if status == "ok":
            return Completion(w, value=val, compute_time=dt)
        if status == "error":
            return Completion(w, error=val, compute_time=dt)
        return None  # cancelled: never delivered

    def next(self, timeout: float | None) -> Completion | None:
        if self.ready:
            return self.ready.popleft()
        if not self.refs:
            if timeout:
                time.sleep(min(timeout, 0.05))
            return None
        refs = list(self.refs)
        done, rest = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if done and rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            done = done + more
        for ref in done:
            c = self._convert(ref, self.refs.pop(ref))
            if c is not None:
                self.ready.append(c)
        return self.ready.popleft() if self.ready else None

    def cancel(self, workers: Sequence[int]) -> None:
        ws = {int(w) for w in workers}
        per_actor: dict[int, list] = {}
        for ref, w in list(self.refs.items()):
            if w in ws:
                del self.refs[ref]
        for w in ws:
            per_actor.setdefault(w % len(self.ex.actors), []).append((self.bid, w))
        for i, keys in per_actor.items():
            try:
                self.ex.actors[i].cancel.remote(keys)
            except Exception:  # the actor is gone: nothing left to cancel
                pass

    def close(self) -> None:
        if self.refs:
            self.cancel(sorted(set(self.refs.values())))
        self.ready.clear()
