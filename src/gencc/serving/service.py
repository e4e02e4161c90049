"""The prediction service: a scheme's dispatcher on a worker pool, with bounded admission and graceful close.

    svc = Service.build("digits-cnn", scheme="gcc", workers=12, K=8, service_ms=30, faults=Faults(raise_p=0.01))
    req = svc.submit(x).result()        # Request: status 200 / 422 / 500 / 503 / 504, output, degraded
    svc.health()                        # {"status": "ok" | "degraded" | "down", ...} from the live workers
    svc.close()                         # answers everything in flight first

A bad input fails only its own request (422 from `submit`, checked in float32, the dtype the workers see); an
exception in the dispatcher's code fails or re-routes only the requests it concerns (`Dispatcher.guard`).
"""

from __future__ import annotations

import gc
import itertools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import numpy as np

from ..codes.ordering import order_inputs
from ..engine import Workers, make_backend, make_pool
from ..faults import Faults, WrongResults
from ._policy.checked import CheckedDispatcher, ResultCheck
from ._policy.coded import CodedDispatcher
from ._policy.dispatchers import HedgedDispatcher, ReplicatedDispatcher, UncodedDispatcher
from ._policy.gate import Gate, service_gate
from ._policy.loop_env import LoopEnv
from ._policy.redundancy import DEFAULT_REDUNDANCY, Redundancy
from .codes import scheme_code
from .config import ServiceConfig, Slowdown, _split, check_result_check, check_workers
from .config import scheme as scheme_entry
from .dispatch import Dispatcher, Env, Request
from .parity import calibrate_sgcc, coded_workers, parity_k, service_model

#: seconds the service may hold requests with no task returning an output (and 20 mean task times) before health
#: says "down": its workers no longer answer (a Ray cluster that lost its head, a fleet gone silent)
STALL_S = 10.0

__all__ = ["Service", "freeze_heap", "make_dispatcher", "worker_states"]


def make_dispatcher(scheme: str, env: Env, *, K: int = 8, parm_k: int = 2, parity: Callable | None = None,
                    calibration: dict[str, float] | None = None, max_wait: float = 0.05, check: str = "off",
                    check_data: tuple[Callable, Any] | None = None, gate: Gate | None = None,
                    redundancy: Redundancy | None = DEFAULT_REDUNDANCY, code_options: dict[str, Any] | None = None,
                    **kw: Any) -> Dispatcher:
    """The dispatcher of `scheme` on `env` (same policy code for the real pool and the simulator).

    CodedDispatcher schemes use groups of K; GCC and BACC take N = min(workers, 1.5 K) with beta "chebyshev2-nested" so
    K slots are systematic; SGCC (`gencc.SystematicGCC`, same N) has K systematic slots by construction, its
    coded slots compute f on the means of neighbouring ordered members, and a kriging decoder; `sgcc-parity` is
    SGCC whose coded slots run the trained parity model `parity` on groups of members kept in arrival order,
    with the decoder's prior from `calibration` (`gencc.serving.parity.calibrate_sgcc`, on training inputs),
    answering only parity recoveries (`CodedDispatcher`'s cover rule); ParM, as in its paper, groups
    parm_k requests with one parity query (N = parm_k + 1) and runs `parity` on the parity slot.

    check "on" / "strict" (eager gcc, bacc, sgcc, sgcc-parity): answers wait for the group's wrong-result check
    (`gencc.serving.CheckedDispatcher`), calibrated on `check_data` = (f, training inputs).
    gate (coded schemes, checked or not): `gencc.serving.Gate`, which holds back decodes unlikely to be right.
    redundancy (eager coded schemes without a check): `gencc.serving.Redundancy`, which sends a group's coded
    tasks only where the queues leave room (None: every coded task, whatever the load).
    code_options (gcc, bacc, sgcc and their -hedge forms): keyword arguments of the code (`serving.codes`).
    The check and the workers are refused as `ServiceConfig` refuses them (`config.check_result_check`,
    `config.check_workers`: a `gencc.errors.ConfigError` naming "check" or "workers")."""
    sch = scheme_entry(scheme)
    check_result_check(sch, check)
    if check != "off" and check_data is None:
        raise ValueError("a wrong-result check needs check_data=(f, training inputs) to calibrate on")
    W = env.n_workers
    check_workers(sch, K, W, parm_k)
    if sch.dispatcher == "uncoded":
        return UncodedDispatcher(env, **kw)
    if sch.dispatcher == "replication":
        return ReplicatedDispatcher(env, **kw)
    if sch.dispatcher == "hedged":
        return HedgedDispatcher(env, **kw)
    order_inputs(np.arange(3.0)[:, None])  # its first call imports scipy.spatial: now, not on a group's first hedge
    if sch.code == "parm":
        code = scheme_code(sch, K, parm_k + 1, parm_k=parm_k, parity=parity)
    else:
        N = coded_workers(K, W)  # redundancy 1.5 (ParM k = 2's) at any W; more than K (check_workers)
        code = scheme_code(sch, K, N, parity=parity, calibration=calibration, options=code_options)
        if sch.parity:  # sgcc-parity
            kw.setdefault("cover", True)  # answer parity recoveries (see CodedDispatcher)
            kw.setdefault("order", False)  # groups in arrival order, as the parity model was trained (random)
    if check != "off":
        kw.pop("cover", None)
        rc = ResultCheck.calibrate(code, *check_data, order=kw.get("order", True))
        return CheckedDispatcher(env, code, rc, strict=check == "strict", max_wait=max_wait,
                                 name=f"{scheme}-checked", gate=gate, **kw)
    return CodedDispatcher(env, code, mode=sch.mode, max_wait=max_wait, name=scheme, gate=gate,
                           redundancy=redundancy, **kw)


def worker_states(pool: Any) -> list[str]:
    """Per worker of `pool`: "alive", "replacing" (dead, to be re-created) or "dead" (not coming back). A pool that
    knows better says so itself (`worker_states()`: a Ray pool, from its actors); otherwise its `dead` flags, a dead
    worker being re-created where the pool re-creates crashed workers (`mark_dead` with a `restart_s`)."""
    own = getattr(pool, "worker_states", None)
    if callable(own):
        return list(own())
    coming = bool(getattr(pool, "mark_dead", False)) and getattr(pool, "restart_s", None) is not None
    return ["replacing" if d and coming else "dead" if d else "alive" for d in np.asarray(pool.dead, dtype=bool)]


def freeze_heap() -> None:
    """Collect, then move every live object (models, libraries, the service itself) out of the garbage
    collector's reach (`gc.freeze`), so a full collection while serving scans only request-time objects.

    Why: with the digits CNN loaded a full collection scans ~236,000 objects and took 136 ms on this machine,
    a stall of every worker thread at once that showed up in measured p99.9; after the freeze it takes ~0 ms.
    Call once in a long-lived serving process, after start-up."""
    gc.collect()
    gc.freeze()


class Service:
    """A dispatcher on the engine's `Workers` (`pool`), thread-safe `submit`, at most `max_pending` requests in
    flight (more: 503)."""

    def __init__(self, pool: Workers, make: Callable[[Env], Dispatcher], max_pending: int = 1000,
                 on_answer: Callable[[Request], None] | None = None, env: LoopEnv | None = None):
        if max_pending < 1:
            raise ValueError(f"max_pending must be positive, got {max_pending}")
        self.pool, self.max_pending = pool, int(max_pending)
        self.env = env  # a LoopEnv: the dispatcher may run on the front door's event loop (`attach_loop`)
        self.dispatcher = make(pool if env is None else env)
        self.dispatcher.on_answer = on_answer
        self.scheme = self.dispatcher.name
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._inflight: dict[int, Request] = {}
        self._closing = False
        self.stall_s = STALL_S
        self.rejected = 0
        self.invalid = 0  # inputs refused with 422
        self.in_shape: tuple[int, ...] | None = None  # inputs of another shape get a 422 (from_config: the workload's)
        #: the protocol's tensor names (input, output); empty: gencc's own; over upstreams, the replicas'
        self.tensor_names: tuple[str, ...] = ()
        self.model: Any = None  # the Model served (build / from_config set it), for the protocol's output shape
        self.workload: Any = None  # the built-in Workload, or None for your own model
        self.deadline_ms: float | None = None  # the latency target of a request that carries none (from_config)

    @classmethod
    def build(cls, workload: Any, scheme: str | None = None, workers: int | None = None, K: int | None = None, *,
              config: ServiceConfig | None = None, slowdown: Slowdown | None = None, faults: Faults | None = None,
              wrong: WrongResults | None = None, on_answer: Callable[[Request], None] | None = None,
              data: Any = None, parity: Any = None, **options: Any) -> Service:
        """A service for a named workload (gencc.workloads) or your own model (anything `gencc.as_model` takes,
        with `data`, training inputs for calibration and checks, and `parity`, a file from `gencc parity
        train`, for the parity schemes), or, with `upstreams=[URL, ...]` and workload None, for model replicas
        you run (one worker each, reached over the Open Inference Protocol: `gencc.serving.upstreams`; workers
        default to their number): configuration in `config` (a `ServiceConfig`; or
        its fields as keywords, `scheme`, `workers` and `K` also by position), injection apart: `slowdown` (a
        `Slowdown`, or its fields as keywords: service_ms, slow_fraction, slow_factor, mean_slow_s), `faults`
        (raise / NaN / hang / crash), `wrong` (wrong results). `check` see `make_dispatcher` (calibrated on the
        workload's training inputs)."""
        config, slowdown = _split(config, slowdown, scheme=scheme, workers=workers, K=K, **options)
        return cls.from_config(workload, config, slowdown=slowdown, faults=faults, wrong=wrong, on_answer=on_answer,
                               data=data, parity=parity)

    @classmethod
    def from_config(cls, workload: Any, config: ServiceConfig, *, slowdown: Slowdown | None = None,
                    faults: Faults | None = None, wrong: WrongResults | None = None,
                    on_answer: Callable[[Request], None] | None = None, data: Any = None,
                    parity: Any = None) -> Service:
        """`build` with the configuration and injection objects given as they are (`config` checked its options
        when it was built)."""
        if not isinstance(config, ServiceConfig):
            raise TypeError(f"config must be a ServiceConfig, got {type(config).__name__}")
        c, slowdown = config, slowdown or Slowdown()
        pk = parity_k(c.scheme, c.K, c.workers, c.parm_k)  # the parity model's k (None: the scheme runs none)
        fleet = None
        if c.upstreams:  # the workers are model replicas gencc does not run: their metadata describes the model
            from .upstreams import upstream_model

            fleet, model, X = upstream_model(c.upstreams, c.scheme, workload=workload, data=data, parity=parity,
                                             start_degraded=c.start_degraded)
            w = None
        else:
            served = service_model(workload, pk, bool(c.packed_parity), data=data, parity=parity, scheme=c.scheme)
            model, X, parity, w = served
        if c.check != "off" and X is None:
            raise ValueError("a wrong-result check calibrates on training inputs: pass data= (--data FILE.npy)")
        # a built-in workload's workers run its own call (unchecked); your model runs as the checked Model
        f, factory = (w.f, w.factory) if w is not None else (model, model.factory)
        fns: dict[str, Callable] = {"f": f}
        calibration = None
        if parity is not None:
            fns["parity"] = parity
            if c.scheme.startswith("sgcc-parity"):
                calibration = calibrate_sgcc(w or model, c.K, coded_workers(c.K, c.workers), parity,
                                             data=None if w is not None else X)
        factories = None
        if c.backend == "ray":  # each actor builds its models from picklable factories
            factories = {"f": factory} | ({"parity": parity.factory} if parity is not None else {})
        ray_options = {"worker_placement": c.worker_placement, "worker_cpus": c.worker_cpus,
                       "worker_resources": dict(c.worker_resources)} if c.backend == "ray" else {}
        be = make_backend(c.backend, c.workers, fns, factories=factories, dtype=np.float32, address=c.address,
                          upstreams=fleet, **ray_options)
        on_loop = c.backend in ("local", "remote")  # the dispatcher may run on the front door's loop: see LoopEnv
        pool = make_pool(c.workers, be, slowdown.service_times(), slowdown.stragglers(c.workers, c.seed), faults,
                         seed=c.seed, wrong=wrong, mark_dead=c.backend != "ray",  # Ray replaces dead actors
                         inline=on_loop)

        def make(gate: Gate | None, check: str = c.check) -> Callable[[Env], Dispatcher]:
            return lambda env: make_dispatcher(c.scheme, env, K=c.K, parm_k=c.parm_k, parity=parity,
                                               calibration=calibration, max_wait=c.max_wait_ms / 1000,
                                               request_timeout=c.request_timeout, seed=c.seed, check=check,
                                               check_data=(f, X), gate=gate,
                                               redundancy=DEFAULT_REDUNDANCY if c.redundancy == "adaptive" else None,
                                               code_options=dict(c.code_options), schedule=c.queueing)

        ident = workload if isinstance(workload, str) else model.identity  # weights sha256
        # under a wrong-result check the gate's threshold is the unchecked scheme's: the same code's decodes
        gate = service_gate(replace(c, check="off"), slowdown, lambda g: make(g, "off"), fns, X,
                            key=(ident, calibration))
        svc = cls(pool, make(gate), max_pending=c.max_pending, on_answer=on_answer,
                  env=LoopEnv(pool) if on_loop else None)
        svc.model, svc.workload = model, w  # the Model served; the built-in Workload, or None for your own model
        svc.config = c
        svc.deadline_ms = c.deadline_ms
        svc.in_shape = tuple(model.in_shape)
        svc.gate = gate
        if fleet is not None:  # the front door names its tensors as the replicas do
            svc.tensor_names = (fleet.signature.input.name, fleet.signature.output.name)
        return svc

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._inflight)

    def check_input(self, x: Any) -> np.ndarray | None:
        """`x` as the workers see it (float32; None passes: timing only), or ValueError naming what is wrong:
        not numbers, another shape than `in_shape`, or a value that is not finite in float32 (1e39 is inf)."""
        if x is None:
            return None
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                a = np.asarray(x, dtype=np.float32)
        except (TypeError, ValueError, OverflowError):
            raise ValueError("input must be an array of numbers") from None
        if self.in_shape is not None and a.shape != self.in_shape:
            raise ValueError(f"input has shape {list(a.shape)}; this service expects {list(self.in_shape)}")
        if not np.all(np.isfinite(a)):
            raise ValueError("input is not finite in float32 (NaN, infinity, or beyond +-3.4e38)")
        return a

    def submit(self, x: Any, *, checked: bool = False, deadline_ms: float | None = None,
               exact_only: bool = False) -> Future:
        """Queue one input; the future resolves to its answered `Request` (422 at once for a bad input, 503 at
        once when overloaded or closing). `checked`: x is already what `check_input` returns (the HTTP door's
        request schema parsed it), so a request is checked once. deadline_ms: its latency target from now
        (default: the service's `deadline_ms`, if any): answered by then, exactly, or decoded from the results
        that have arrived (`degraded`; not with `exact_only`), or 504 (ValueError unless positive and finite)."""
        fut: Future = Future()
        self.submit_to(fut.set_result, x, checked=checked, deadline_ms=deadline_ms, exact_only=exact_only)
        return fut

    def submit_to(self, answered: Callable[[Request], None], x: Any, *, checked: bool = False,
                  deadline_ms: float | None = None, exact_only: bool = False) -> None:
        """`submit` with a callback instead of a future: `answered(request)` is called once with the answered
        `Request`, in this call for a refusal (422, 503), else on the dispatcher's thread (the event loop serving
        the HTTP front door once attached), where it must not block."""
        req = Request(-1, None, self.pool.now(), exact_only=bool(exact_only))
        ms = self.deadline_ms if deadline_ms is None else deadline_ms
        if ms is not None:
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms < math.inf:
                raise ValueError(f"deadline_ms must be a positive finite number of milliseconds, got {ms!r}")
            req.deadline = req.t_arrival + ms / 1000
        if checked:
            req.x = x
        else:
            try:
                req.x = self.check_input(x)
            except ValueError as e:
                req.status, req.error = 422, str(e)
        with self._lock:
            req.id = next(self._ids)
            if req.status == 422:
                self.invalid += 1
            elif self._closing or len(self._inflight) >= self.max_pending:
                self.rejected += 1
                req.status = 503
                req.error = "shutting down" if self._closing else \
                    f"overloaded: {self.max_pending} requests already in flight; retry later"
            if not req.status:
                self._inflight[req.id] = req
        if req.status:
            req.t_done = req.t_arrival
            answered(req)
            return

        def respond(r: Request) -> None:
            with self._lock:
                self._inflight.pop(r.id, None)
            answered(r)

        req.respond = respond
        if self.env is not None and self.env.on_loop():
            self.dispatcher.submit(req)  # on the dispatcher's thread already (guarded: it cannot raise)
        else:
            self.post(lambda: self.dispatcher.submit(req))

    def post(self, fn: Callable[[], None]) -> None:
        """Run fn on the dispatcher's thread: the pool's control thread, or the event loop once attached."""
        (self.pool if self.env is None else self.env).post(fn)

    def attach_loop(self, loop: Any) -> bool:
        """Run the dispatcher on `loop` (the caller's running loop; None: detach), see `LoopEnv`; only while
        nothing is in flight. False when it keeps the control thread (a Ray backend)."""
        if self.env is None:
            return False
        done, me = threading.Event(), threading.get_ident()

        def switch() -> None:  # on the control thread: nothing of the dispatcher's runs there meanwhile
            if not self._inflight:
                self.env.attach(loop, me)
            done.set()

        if loop is None:
            self.env.attach(None)
            return True
        self.pool.post(switch)
        done.wait(5)
        return self.env.loop is loop

    def health(self) -> dict[str, Any]:
        """What the workers can serve now. Each worker is "alive", "replacing" (it died and a fresh one is on its
        way: a crashed thread re-created after a pause, a Ray actor building its models) or "dead" (not coming
        back); `live` counts the alive ones the dispatcher has not quarantined. "ok" when at least as many are
        live as the scheme uses at once (`Dispatcher.workers_needed`: N for a coded group), "degraded" when fewer
        but some are, "down" when none is, when the service is closing, or when it is stalled (`stalled_s`: requests
        held and no output for `stall_s` seconds). `/healthz` answers it, 503 unless ok.
        "restarts" counts workers re-created after they died, "lost_tasks" the service's tasks lost with their
        worker (run there when it died, queued on it, or sent to it while dead), "rebalanced" the workers moved
        onto Ray nodes that joined (worker_placement "spread")."""
        pool, d = self.pool, self.dispatcher
        states = worker_states(pool)
        alive = np.array([s == "alive" for s in states], dtype=bool)
        quarantined = [int(w) for w in d.quarantined_view]
        usable = alive.copy()
        usable[[w for w in quarantined if w < len(usable)]] = False
        live, need = int(usable.sum()), d.workers_needed()
        stalled = self.stalled_s()
        status = "down" if self._closing or live == 0 or stalled else ("ok" if live >= need else "degraded")
        config = getattr(self, "config", None)
        recreated = getattr(pool, "recreated", None)
        rebalanced = getattr(pool, "rebalanced", None)
        return {"status": status, "scheme": self.scheme,
                "backend": config.backend if config is not None else type(getattr(pool, "backend", pool)).__name__,
                "workers": int(pool.n_workers), "alive": int(alive.sum()), "replacing": states.count("replacing"),
                "dead": states.count("dead"), "live": live, "needed": need, "quarantined": quarantined,
                "in_flight": self.pending, "errors": int(sum(d.errors.values())),
                "restarts": int(recreated() if callable(recreated) else np.sum(getattr(pool, "restarts", 0))),
                "lost_tasks": int(d.failures.get("crash", 0)),
                "rebalanced": int(rebalanced() if callable(rebalanced) else 0),
                "stalled_s": round(stalled, 3)}

    def stalled_s(self) -> float:
        """Seconds the service has held requests while no task returned an output, once that is past `stall_s` and
        20 mean task times (0: not stalled; the time counts from the later of the last output and the oldest
        request in flight). Workers that stop answering without dying (a Ray cluster that lost its head: every
        call hangs, every actor still listed alive) show here, and health says "down"."""
        with self._lock:
            oldest = min((r.t_arrival for r in self._inflight.values()), default=None)
        if oldest is None:
            return 0.0
        d = self.dispatcher
        since = float(self.pool.now()) - max(oldest, d.last_ok)
        return since if since > max(self.stall_s, 20 * d.task_seconds()) else 0.0

    def upstream_states(self) -> list[dict[str, Any]] | None:
        """In front of replicas: each one's URL, "in" or "out" of rotation (and why), its failed requests in a row
        and how many times it was taken out (`gencc.engine.remote_backend.RemoteBackend.replica_states`); None
        on other backends."""
        states = getattr(getattr(self.pool, "backend", None), "replica_states", None)
        return states() if callable(states) else None

    def close(self, drain_s: float = 30.0) -> None:
        """Stop admitting, wait up to `drain_s` for in-flight requests, answer any left with 503, stop workers
        (once: a second call returns at once)."""
        if getattr(self, "gate", None) is not None:
            self.gate.stopped.set()  # abandon its calibration, if still running
        with self._lock:
            if self._closing:
                return
            self._closing = True
        deadline = time.monotonic() + drain_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        done = threading.Event()

        def flush() -> None:
            for r in list(self._inflight.values()):
                self.dispatcher.answer(r, None, status=503, error="shutting down")
            done.set()

        self.post(flush)
        done.wait(5)
        if getattr(self, "gate", None) is not None:  # its calibration stops at its next model call: let it end
            self.gate.ready.wait(30)  # before the caller's process may exit (torch aborts if a thread is in it)
        self.pool.close()
