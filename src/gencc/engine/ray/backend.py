"""The engine's Ray backend: one actor per worker (`RayBackend`), on a Ray started or joined by
`gencc.engine.ray.start` (`init_ray`; `check_address` checks a cluster's address; both importable from here too).
Build one with `gencc.engine.make_backend("ray", ...)`,
the one factory every front end uses (jobs, serving, training); it checks the address before Ray starts.

Ray is imported only in this package (`gencc.engine.ray`), inside functions, so `import gencc` never imports it.
Without `address`, Ray starts privately on 127.0.0.1 (no dashboard, usage stats off unless set, quiet: no
probe of 8.8.8.8 for a routable address, no colour codes, see `init_ray`; its temp dir inside a private 0700
folder removed at close or exit); run it inside the loopback-only network namespace of
`gencc.engine.ray.namespace` (tests, `gencc run`, `gencc serve`, `gencc train`). With `address` it joins an
existing cluster ("auto", HOST:PORT or ray://HOST:PORT) as given (a loopback HOST stays loopback; Ray would
otherwise replace it by the machine's network address), after checking within `connect_timeout` seconds that
something listens there (`reach_cluster`: a `gencc.errors.ClusterUnreachable` naming the address, instead of
Ray's retries for minutes). A Ray already initialised in this process is used as it is. No path that starts Ray
leaves a credential file others can read (`private_auth`).

Each actor holds the backend's models, built there from picklable factories (a torch model is built on the
actor, not shipped per call), and a task's own function is put in the object store once and built once per
actor on first use. A task runs `gencc.faults.run_injected` on the actor, so its injected delay passes there.
A call is sent without blocking (`RayBackend.submit`) and read once its ref is ready (`result`): the engine's
`gencc.engine.ray.workers.RayWorkers` waits on every call out from one thread with `ray.wait`. A call no longer
needed is cancelled with `ray.cancel` (one the actor has not started is dropped) and cooperatively (`cancel`
on the threaded actor sets a flag the task waits on); an actor lost meanwhile makes the task lost
(ConnectionError on the master: a straggler for that task). Each actor also holds a `watch` call that never
answers (in its own concurrency group), so the master finds a dead actor even when no call of a job is out to
it (`check_actors`).

A dead actor (killed, an injected crash, its process gone, e.g. `os._exit` inside f) is replaced: the master
that saw the loss kills its handle for good and creates a fresh actor in its slot from the same factories
(Ray's own restarts are off, so there is one mechanism; an injected crash is `ray.kill`). Later tasks of that
slot queue on the new actor while it builds its models. `max_restarts` bounds the replacements per slot (-1:
no limit); a slot whose last REPLACE_STREAK replacements failed to build their models (a factory that raises)
is not replaced again. A replacement is not placed on a node Ray still lists alive but whose raylet is gone
(being removed; `gencc.engine.ray.nodes.Nodes`). One that dies before it is ready for another reason is tried
again after a backoff (BACKOFF_S, doubled each time, at most BACKOFF_MAX_S). Each slot's state (`states`:
"alive", "replacing" while the fresh actor builds its models, "dead" when not replaced) is what health reports;
`restarts` counts the re-created actors per slot (a lost task is not one). With the "spread" placement, workers
move onto nodes that join (`rebalanced` in `nodes` counts them).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._util.lru import LRU
from ...faults import Cancelled, InjectedFault, run_injected
from ..backends import FunctionTable
from ..task import Task, WorkerError, describe_error
from .nodes import Nodes
from .placement import check_placement
from .start import (  # noqa: F401 - re-exported: starting or joining Ray lives in `start`
    CONNECT_ENV,
    CONNECT_TIMEOUT_S,
    MAX_TEMP_BASE,
    check_address,
    import_ray,
    init_ray,
    private_auth,
    private_temp_dir,
    remove_temp_dir,
)

log = logging.getLogger("gencc.engine")
_ACTOR_CLS: Any = None
#: the actors' concurrency group of their `watch` call (its own thread: the tasks keep `max_concurrency`)
WATCH_GROUP = "gencc_watch"
#: consecutive replacements of one slot that die before answering anything, after which it stays dead
REPLACE_STREAK = 3
#: a slot's states (`RayBackend.states`)
ALIVE, REPLACING, DEAD = "alive", "replacing", "dead"
#: seconds before a slot's next replacement when its last one died before it was ready (placed on a node being
#: removed, which Ray has not marked dead yet): BACKOFF_S, doubled at each such death, at most BACKOFF_MAX_S
BACKOFF_S, BACKOFF_MAX_S = 0.5, 8.0
#: seconds the view of the nodes may be old when a replacement is placed
FRESH_S = 0.2


class _Actor:
    """The actor body: the models; one task per call; cooperative cancellation by key."""

    def __init__(self, factories: dict[str, Callable[[], Callable]]):
        self.functions = {name: make() for name, make in factories.items()}
        self._flags: LRU[Any, threading.Event] = LRU(100_000)  # flags of tasks not yet seen are kept a while
        self._fns: dict[int, Callable] = {}
        self._fn_lock = threading.Lock()

    def ready(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node this actor runs on (where the scheduler placed it)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def _function(self, fn_key: int, fn_box: list) -> Callable:
        with self._fn_lock:
            fn = self._fns.get(fn_key)
            if fn is None:
                import ray

                fn = self._fns[fn_key] = ray.get(fn_box[0])
            return fn

    def compute(self, key: Any, name: str | None, x: Any, extra_s: float, slow: float, fault: str, hang_s: float,
                delay: float, fn_key: int | None = None, fn_box: list | None = None) -> tuple[str, Any, float]:
        flag = self._flags.get_or_build(key, threading.Event)
        t = time.perf_counter()
        try:
            if flag.is_set():
                return ("cancelled", None, 0.0)
            if fn_key is not None:
                fn, batched = self._function(fn_key, fn_box), None  # type: ignore[arg-type]
            else:
                fn, batched = self.functions[name or "f"], (True if name is not None else None)
            out = run_injected(fn, x, extra_s, slow, fault, hang_s, flag, batched, delay)
            return ("ok", out, time.perf_counter() - t)
        except Cancelled:
            return ("cancelled", None, 0.0)
        except InjectedFault as e:
            return ("fault", str(e), e.output)
        except Exception as e:  # reported to the master as a straggler
            return ("error", describe_error(e), time.perf_counter() - t)
        finally:
            self._flags.pop(key)

    def cancel(self, keys: list) -> None:
        for k in keys:
            self._flags.get_or_build(k, threading.Event).set()

    def watch(self) -> None:
        """Never answers: the master waits on this call to learn that the actor died (its ref then fails)."""
        threading.Event().wait()


def _init_failed(ray: Any, ref: Any) -> bool:
    """Whether the failed call `ref` (ready) says its actor died because its constructor raised (the factory)."""
    try:
        ray.get(ref, timeout=0)
    except ray.exceptions.RayActorError as e:
        return bool(getattr(e, "actor_init_failed", False))
    except Exception:  # noqa: BLE001 - another failure says nothing of the factory
        return False
    return False


@dataclass(eq=False, slots=True)
class Call:
    """One task's call on an actor: its cancel key, the ObjectRef of its answer, the actor and its slot, and
    whether an injected crash killed the actor first (a replacement that says nothing of the factory)."""

    key: int
    ref: Any
    actor: Any
    slot: int
    crash: bool


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        _ACTOR_CLS = ray.remote(concurrency_groups={WATCH_GROUP: 1})(_Actor)
    return _ACTOR_CLS


class RayBackend:
    """`n_actors` Ray actors; `factories` maps model names ("f", "parity") to picklable builders. Worker w runs
    on actor w % n_actors (in its own actor thread: `max_concurrency`). `on_ready(ready, total)` is called as
    the actors come up (building a torch model on 16 actors takes tens of seconds on a small machine).
    max_restarts: replacements of a dead actor per slot (-1: no limit; 0: a dead actor stays dead); `restarts`
    counts them per slot, `states` says where each slot stands. connect_timeout: seconds a cluster's `address`
    may take to answer (`init_ray`; None: $GENCC_RAY_CONNECT_MS, else CONNECT_TIMEOUT_S). worker_placement
    ("spread" or "pack"), worker_cpus, worker_resources: where the actors go
    (`gencc.engine.ray.placement.check_placement`, checked before Ray starts; `actor_options` override them);
    `nodes` keeps replacements off nodes being removed and, with "spread", moves workers onto nodes that join
    (`gencc.engine.ray.nodes.Nodes`)."""

    def __init__(self, n_actors: int, factories: dict[str, Callable[[], Callable]], address: str | None = None,
                 *, num_cpus: int | None = None, max_concurrency: int = 64, max_restarts: int = -1,
                 actor_options: dict | None = None, init_kwargs: dict | None = None, temp_dir: str | None = None,
                 ready_timeout: float = 120.0, on_ready: Callable[[int, int], None] | None = None,
                 connect_timeout: float | None = None, worker_placement: str | None = None,
                 worker_cpus: float | None = None, worker_resources: dict[str, float] | None = None):
        self.placement_options = check_placement(worker_placement, worker_cpus, worker_resources)  # before Ray starts
        ray, self._owns, self._own_tmp = init_ray(address, num_cpus=num_cpus, temp_dir=temp_dir,
                                                  init_kwargs=init_kwargs, connect_timeout=connect_timeout)
        self.ray = ray
        self._keys = itertools.count()
        self._table = FunctionTable(ray.put)
        self.max_restarts = int(max_restarts)
        self.restarts = [0] * n_actors
        self.states = [ALIVE] * n_actors  # per slot: alive, replacing (a fresh actor starting) or dead
        self._starting: dict[Any, tuple[int, Any]] = {}  # a replacement's `ready` call's ref -> (slot, actor)
        self._due: dict[int, float] = {}  # slot -> when its next replacement is created (after a backoff)
        self._unready = [0] * n_actors  # the slot's replacements in a row that died before they were ready
        self._streak = [0] * n_actors  # replacements of the slot since it last answered, whose factory failed
        self._watches: dict[Any, tuple[int, Any]] = {}  # a `watch` call's ref -> (slot, actor)
        self._crashed: set[Any] = set()  # actors killed by an injected crash (their loss says nothing of f)
        self._lock = threading.Lock()
        self._factories = factories
        self._opts = {"max_concurrency": max_concurrency, "max_restarts": 0, "max_task_retries": 0,
                      **self.placement_options.actor_options(), **(actor_options or {})}
        self._where: list[Any] = [None] * n_actors  # per slot: its actor's node id, or the ref of its `node` call
        self.nodes = Nodes(self, ready_timeout)
        try:
            self.nodes.check_fit()
            self._cls = _actor_class(ray)
            self.actors = [self._new_actor(slot) for slot in range(n_actors)]
            self.actor_pids = self._wait_ready([a.ready.remote() for a in self.actors], ready_timeout, on_ready)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, refs: list, timeout: float, on_ready: Callable[[int, int], None] | None) -> list[int]:
        deadline, pending = time.monotonic() + timeout, list(refs)
        while pending:
            if on_ready is not None:
                on_ready(len(refs) - len(pending), len(refs))
            done, pending = self.ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                raise TimeoutError(f"{len(pending)} of {len(refs)} Ray actors were not ready after {timeout} s")
        if on_ready is not None:
            on_ready(len(refs), len(refs))
        return self.ray.get(refs)

    def _new_actor(self, slot: int, node: str | None = None, watch: bool = True) -> Any:
        """A fresh actor for `slot` (on `node` only, if given), its `watch` call out unless not `watch`."""
        opts = self._opts if node is None else {**self._opts, "scheduling_strategy": self.nodes.on(node)}
        actor = self._cls.options(**opts).remote(self._factories)
        if watch:
            self._watch(slot, actor)
            self._where[slot] = actor.node.remote()
        return actor

    def _watch(self, slot: int, actor: Any) -> None:
        self._watches[actor.watch.options(concurrency_group=WATCH_GROUP).remote()] = (slot, actor)

    def check_actors(self) -> int:
        """Replace the actors found dead since the last look (their `watch` call failed), whether or not a
        call was out to them (a job that stopped waiting on a lost actor, or a worker with no task, would not
        notice), and mark the replacements that have built their models alive; returns how many were found dead.
        `RayWorkers` calls it every tenth of a second."""
        self._spawn_due()
        with self._lock:
            refs, starting = list(self._watches), list(self._starting)
        if not refs:
            return 0
        ray = self.ray
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        for ref in ready:
            with self._lock:
                slot, actor = self._watches.pop(ref, (-1, None))
            if actor is not None:
                how = ("replaced" if self.replace(slot, actor, actor not in self._crashed, _init_failed(ray, ref))
                       else "not replaced")
                log.warning("Ray actor of slot %d died (%s)", slot, how)
        if starting:
            up, _ = ray.wait(starting, num_returns=len(starting), timeout=0, fetch_local=False)
            for ref in up:
                with self._lock:
                    slot, actor = self._starting.pop(ref, (-1, None))
                    if actor is not None and slot < len(self.actors) and self.actors[slot] is actor:
                        try:
                            ray.get(ref, timeout=0)
                        except Exception:  # noqa: BLE001 - it died building its models: its watch says so
                            continue
                        self.states[slot] = ALIVE
                        self._streak[slot] = self._unready[slot] = 0
                        self.actor_pids[slot] = ray.get(ref, timeout=0)
                        log.info("Ray actor of slot %d replaced and ready", slot)
        self.nodes.step()
        return len(ready)

    def _spawn_due(self) -> None:
        """Create the replacements whose backoff has passed."""
        if not self._due:
            return
        now = time.monotonic()
        with self._lock:
            for slot in [s for s, t in self._due.items() if t <= now]:
                del self._due[slot]
                self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        """A fresh actor in `slot` (under the lock), replacing until it is ready."""
        actor = self.actors[slot] = self._new_actor(slot, self.nodes.target())
        self._starting[actor.ready.remote()] = (slot, actor)
        self.states[slot] = REPLACING
        self.restarts[slot] += 1

    def placement(self, timeout: float = 60.0) -> list[str]:
        """The Ray node id of each actor, in slot order (a replacement may sit elsewhere than the actor it
        replaced); an actor that does not answer within `timeout` seconds is "" (dead, or still starting)."""
        refs = [a.node.remote() for a in list(self.actors)]
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
        done = set(ready)
        out = []
        for r in refs:
            try:
                out.append(self.ray.get(r) if r in done else "")
            except self.ray.exceptions.RayError:
                out.append("")
        return out

    def actor_for(self, worker: int) -> Any:
        """The actor that runs worker `worker` (while its replacement waits out a backoff, the dead one: a call
        to it fails as lost)."""
        self._spawn_due()
        return self.actors[worker % len(self.actors)]

    def replace(self, slot: int, dead: Any, counted: bool = True, init_failed: bool = False) -> bool:
        """Replace the dead actor `dead` of `slot` by a fresh one (unless another thread did, or the budget is
        spent, or the slot's last REPLACE_STREAK replacements' factories failed: `init_failed`, counted unless
        `counted` is False, as for an injected crash, which says nothing of the factory); a slot whose last
        replacement died before it was ready otherwise (Ray placed it on a node being removed) gets its next one
        after a backoff. True when the slot holds a fresh actor now or soon (replaced by this call or, the loss
        seen twice, by another: a call out to it and the actor's watch)."""
        self.nodes.look(FRESH_S)  # which nodes are going: the replacement goes elsewhere
        with self._lock:
            if slot >= len(self.actors):
                return False
            if self.actors[slot] is not dead or slot in self._due:
                return True
            unready = self.states[slot] == REPLACING  # it died before it had built its models
            self._streak[slot] += bool(counted and init_failed)
            if (0 <= self.max_restarts <= self.restarts[slot]) or self._streak[slot] >= REPLACE_STREAK:
                self.states[slot] = DEAD
                return False
            try:
                self.ray.kill(dead, no_restart=True)
            except Exception:  # already gone
                pass
            self._crashed.discard(dead)
            self.nodes.forget(dead)
            if unready and not init_failed:
                k = self._unready[slot] = self._unready[slot] + 1
                self._due[slot] = time.monotonic() + min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (k - 1))
                self.states[slot] = REPLACING
                log.warning("Ray actor of slot %d died before it was ready: replaced again in %.1f s", slot,
                            self._due[slot] - time.monotonic())
                return True
            self._spawn(slot)
            return True

    def ship(self, fn: Callable) -> tuple[int, list]:
        """A task's own function, put in the object store once (a ValueError when it cannot be)."""
        key, ref = self._table.entry(fn, "the Ray backend")
        return key, [ref]  # inside a list, so Ray hands the actor the ref, not the (rebuilt) function

    def submit(self, worker: int, task: Task, extra_s: float, slow: float, fault: str, hang_s: float) -> Call:
        """Send `task` to worker `worker`'s actor and return at once: the `Call` to wait on (`ray.wait` over its
        `ref`) and to read with `result`. An injected crash kills the actor first (the call then fails as lost)."""
        ray, actor = self.ray, self.actor_for(worker)
        self.nodes.sent(actor, key := next(self._keys))
        if fault == "crash":
            self._crashed.add(actor)
            ray.kill(actor, no_restart=True)
        fn = task.fn
        spec: tuple = (None, ()) if fn is None else (fn, ()) if isinstance(fn, str) else (None, self.ship(fn))
        x = np.asarray(task.x) if not hasattr(task.x, "detach") else task.x
        ref = actor.compute.remote(key, spec[0], x, extra_s, slow, fault, hang_s, float(task.delay), *spec[1])
        call = task.key = Call(key, ref, actor, worker % len(self.actors), fault == "crash")
        return call

    def result(self, call: Call) -> np.ndarray:
        """The output of a finished call (its ref ready), or the exception that makes it a straggler:
        ConnectionError when the actor is lost (a dead actor replaced first), InjectedFault, WorkerError when f
        raised, Cancelled."""
        ray = self.ray
        self.nodes.answered(call)
        try:
            status, val, extra = ray.get(call.ref)
        except ray.exceptions.TaskCancelledError:
            raise Cancelled("cancelled") from None
        except ray.exceptions.ActorUnavailableError as e:
            raise ConnectionError(f"actor unavailable ({type(e).__name__})") from e
        except ray.exceptions.RayActorError as e:
            how = ("replaced" if self.replace(call.slot, call.actor, not call.crash, bool(getattr(
                e, "actor_init_failed", False))) else "not replaced")
            raise ConnectionError(f"actor died ({type(e).__name__}; {how})") from e
        except ray.exceptions.RayError as e:
            raise ConnectionError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        self._streak[call.slot] = 0
        if status == "ok":
            return val
        if status == "fault":
            raise InjectedFault(val, extra)
        if status == "error":
            raise WorkerError(val)
        raise Cancelled("cancelled")

    def wait(self, refs: list, timeout: float) -> list:
        """The calls' refs that are ready: `ray.wait` until one is (or `timeout` seconds pass), then every other
        one ready by then."""
        ray = self.ray
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=True)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
            ready += more
        return ready

    def run(self, worker: int, task: Task, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event) -> np.ndarray:
        """`submit` and `result` in the calling thread (a `Workers` with a thread per worker);
        `gencc.engine.ray.workers.RayWorkers` waits on every call from one thread instead."""
        call = self.submit(worker, task, extra_s, slow, fault, hang_s)
        self.ray.wait([call.ref], num_returns=1, fetch_local=True)
        return self.result(call)

    def cancel(self, task: Task) -> None:
        """The job no longer needs `task`: `ray.cancel` drops its call if the actor has not started it (queued
        behind a replacement still building its models), and the actor is told to stop it (cooperatively)."""
        call = task.key
        if isinstance(call, Call):
            self.drop(call)

    def drop(self, call: Call) -> None:
        """Cancel a call nobody waits for any more (see `cancel`); nothing if its actor is gone."""
        self.nodes.answered(call)
        try:
            self.ray.cancel(call.ref)
        except Exception:  # finished, or its actor is gone: nothing to cancel
            pass
        try:
            call.actor.cancel.remote([call.key])
        except Exception:  # the actor is gone: nothing left to cancel
            pass

    def close(self) -> None:
        """Kill the actors; shut Ray down if this backend started it; remove the temp dir it created."""
        with getattr(self, "_lock", threading.Lock()):
            actors, self.actors = getattr(self, "actors", []), []
        nodes = getattr(self, "nodes", None)
        for a in actors + (nodes.close() if nodes is not None else []):
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # already dead
                pass
        self._table.clear()
        self._watches.clear()
        getattr(self, "_starting", {}).clear()
        getattr(self, "_due", {}).clear()
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns = False
        remove_temp_dir(self._own_tmp)
        self._own_tmp = None
