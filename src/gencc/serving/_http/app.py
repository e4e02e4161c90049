"""The HTTP front door (FastAPI): POST /predict, POST /predict/batch, GET /healthz, GET /metrics, and the Open
Inference Protocol under /v2 (`gencc.serving._http.v2`).

Overload -> 503 (bounded in-flight requests), bad input -> 4xx naming the problem before it reaches a worker
(`gencc.serving._http.limits`: API key, Content-Type, body size, read deadline; `gencc.serving._http.schemas`: strict
JSON numbers of the model's input shape, finite in float32), shutdown answers what is in flight (the lifespan
closes the service after uvicorn stops taking connections).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..service import Service
from .limits import DoorGuard, Limits, uvicorn_options
from .schemas import BadRequest, body_bytes_bound, parse_batch, parse_one, request_schemas
from .v2 import ModelSpec, V2Routes, server_metadata

log = logging.getLogger(__name__)
BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)


class Metrics:
    """Prometheus metrics of one service (own registry, so several apps can live in one process)."""

    def __init__(self, scheme: str):
        self.registry = CollectorRegistry()
        self.requests = Counter("gencc_requests", "requests answered, by HTTP status (4xx: refused at the door)",
                                ["status"],
                                registry=self.registry)
        self.degraded = Counter("gencc_degraded_answers", "answers decoded from coded results",
                                registry=self.registry)
        self.latency = Histogram("gencc_request_latency_seconds", "arrival to answer", buckets=BUCKETS,
                                 registry=self.registry)
        self.stragglers = Counter("gencc_straggler_tasks", "tasks that failed or ran slow, by reason",
                                  ["reason"], registry=self.registry)
        self.run_seconds = Counter("gencc_task_run_seconds", "run time of the tasks that returned (start to end on "
                                   "a worker), by worker state (slow: an injected slowdown hit it)", ["state"],
                                   registry=self.registry)
        self.runs = Counter("gencc_task_runs", "tasks that returned, by worker state", ["state"],
                            registry=self.registry)
        #: counters the checked dispatcher keeps (gencc.serving.checked), copied at each scrape
        self.checks = {attr: Counter(f"gencc_{name}", doc, registry=self.registry) for attr, name, doc in (
            ("unchecked", "unchecked_answers", "answers no wrong-result check covered (--check-results)"),
            ("verifications", "verification_tasks", "re-runs of a request to verify a result (--check-results)"))}
        self.deadline = Counter("gencc_deadline_answers", "requests with a latency target, by outcome: exact "
                                "(answered exactly inside it), degraded (a decode inside it), missed (a 504 at "
                                "it, or another error)", ["outcome"], registry=self.registry)
        #: the workers' health (`Service.health`), set at each scrape
        self.workers = Gauge("gencc_workers", "workers by state: alive, replacing (died, a fresh one on its way), "
                             "dead (not coming back)", ["state"], registry=self.registry)
        self.live = Gauge("gencc_workers_live", "alive workers not quarantined", registry=self.registry)
        self.ready = Gauge("gencc_ready", "1 when the live workers are at least as many as the scheme uses at once",
                           registry=self.registry)
        self.recreated = Counter("gencc_worker_restarts", "workers re-created after they died (a thread, a Ray "
                                 "actor)", registry=self.registry)
        self.lost = Counter("gencc_lost_tasks", "tasks lost with their worker (a crash, a dead actor or node)",
                            registry=self.registry)
        self.rebalanced = Counter("gencc_workers_rebalanced", "workers moved onto Ray nodes that joined "
                                  "(--worker-placement spread)", registry=self.registry)
        #: in front of replicas (`Service.upstream_states`), set at each scrape
        self.upstream_in = Gauge("gencc_upstream_in_rotation", "1 while a replica is in rotation, 0 while it is out "
                                 "(failed requests in a row, or its connection lost; its ready route probed)",
                                 ["upstream"], registry=self.registry)
        self.ejections = Counter("gencc_upstream_ejections", "times a replica was taken out of rotation",
                                 ["upstream"], registry=self.registry)
        self.scheme = scheme


#: the answers the prediction routes may give, for the OpenAPI schema
RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or wrong API key (servers started with --api-key)"},
    408: {"description": "the body did not arrive within the read timeout"},
    413: {"description": "body over the size limit"},
    415: {"description": "Content-Type is not application/json (UTF-8)"},
    422: {"description": "the body is not the declared schema: JSON numbers, the model's input shape, finite "
                         "in float32"},
    503: {"description": "overloaded or shutting down; retry later"},
    504: {"description": "no answer by the request's deadline (header X-Deadline-Ms, --deadline-ms) or the "
                         "request timeout"},
}
#: headers of POST /predict and /predict/batch: the request's latency target in milliseconds (the server's
#: --deadline-ms when absent), and "true" to take exact answers only (a 504 rather than a decoded answer)
DEADLINE_HEADER, EXACT_HEADER = b"x-deadline-ms", b"x-exact-only"


def _catch_up(counter: Any, total: float) -> None:
    """Advance a prometheus Counter to `total` (the dispatcher keeps plain counts; a Counter only increments)."""
    n = total - counter._value.get()
    if n > 0:
        counter.inc(n)


def _body(r: Any, scheme: str) -> tuple[int, dict[str, Any]]:
    if r.status == 200:
        return 200, {"output": np.asarray(r.output).tolist(), "degraded": bool(r.degraded), "scheme": scheme,
                     "latency_ms": round(r.latency * 1000, 3), "id": r.id, "gate": r.gate,
                     "uncertainty": r.uncertainty if math.isfinite(r.uncertainty) else None}  # the gate's estimate
    body = {"detail": r.error, "error": r.error, "scheme": scheme, "id": r.id}
    if math.isfinite(r.latency):  # arrival to answer on the server's clock: a 504 says how late it left
        body["latency_ms"] = round(r.latency * 1000, 3)
    return r.status, body


def deadline_headers(headers: Any) -> tuple[float | None, bool]:
    """(latency target in ms or None, exact only) from a request's headers (ASGI (name, value) byte pairs, or a
    mapping); BadRequest (400) naming a malformed value."""
    items = headers.items() if hasattr(headers, "items") else headers
    found = {(k.lower() if isinstance(k, bytes) else k.lower().encode()): v for k, v in items}
    ms, exact = found.get(DEADLINE_HEADER), found.get(EXACT_HEADER)
    out: float | None = None
    if ms is not None:
        text = ms.decode("latin-1") if isinstance(ms, bytes) else str(ms)
        try:
            out = float(text)
        except ValueError:
            out = math.nan
        if not 0 < out < math.inf:
            raise BadRequest(400, f"header X-Deadline-Ms is the request's latency target: a positive number of "
                                  f"milliseconds, got {text[:40]!r}")
    flag = False
    if exact is not None:
        text = (exact.decode("latin-1") if isinstance(exact, bytes) else str(exact)).strip().lower()
        if text not in ("true", "false"):
            raise BadRequest(400, f"header X-Exact-Only must be true or false, got {text[:40]!r}")
        flag = text == "true"
    return out, flag


class PredictRoutes:
    """ASGI middleware answering POST to the paths in `handlers` itself (handler(body) -> (status, JSON
    object)), without FastAPI's routing and dependency machinery on every request; other requests go on to
    the app. It sits inside `DoorGuard`, which has read the whole body within the limits and replays it as one
    message. An exception in a handler goes up to the app's error handler (a 500), as a route's would."""

    def __init__(self, app: Any, handlers: dict[str, Any]):
        self.app, self.handlers = app, handlers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        handler = self.handlers.get(scope.get("path")) if scope["type"] == "http" else None
        if handler is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:  # one message from DoorGuard; several if mounted without it
            msg = await receive()
            if msg["type"] != "http.request":
                return  # the client left
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        status, payload = await handler(body, scope.get("headers", ()))
        data = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-length", str(len(data)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


def _set(out: asyncio.Future, r: Any) -> None:
    if not out.done():  # not cancelled meanwhile (the client left)
        out.set_result(r)


def _answered_on_loop() -> tuple[asyncio.Future, Callable[[Any], None]]:
    """A future of the running loop and the callback that sets it, from any thread: at once on the loop's own
    thread (a dispatcher running on the loop answers there), else through `call_soon_threadsafe`."""
    loop, me = asyncio.get_running_loop(), threading.get_ident()
    out = loop.create_future()

    def answered(r: Any) -> None:
        if threading.get_ident() == me:
            _set(out, r)
            return
        try:
            loop.call_soon_threadsafe(_set, out, r)
        except RuntimeError:  # the loop has closed: no one awaits the answer
            pass

    return out, answered


def create_app(service: Service, drain_s: float = 30.0, *, limits: Limits | None = None,
               in_shape: tuple[int, ...] | None = None, name: str = "model",
               out_shape: tuple[int, ...] | None = None) -> FastAPI:
    """The app serving `service` (closed, after answering what is in flight, when the app shuts down), refusing
    what `limits` (default `Limits()`) refuses; inputs of `in_shape` (default: the service's) and outputs of
    `out_shape` (default: the service's model's); `name`: the model's name in the Open Inference Protocol's routes.
    The request schema is the one check an HTTP request gets: the service takes what it parsed without checking it
    again."""
    m = Metrics(service.scheme)
    limits = limits or Limits()
    if in_shape is None:  # the service's model's (a workload, or a model given to Service.build)
        if service.in_shape is None:
            raise ValueError("create_app needs in_shape= for a service built without a workload or model")
        in_shape = service.in_shape
    in_shape = tuple(int(n) for n in in_shape)
    if service.in_shape is not None and in_shape != tuple(service.in_shape):
        raise ValueError(f"in_shape={list(in_shape)} differs from the service's input shape "
                         f"{list(service.in_shape)}: leave in_shape out")
    if out_shape is None and service.model is not None:
        out_shape = service.model.out_shape
    schemas = request_schemas(in_shape, limits.max_batch)
    max_body = limits.max_body_bytes or body_bytes_bound(in_shape, limits.max_batch)

    counted: dict[int, Any] = {}  # status -> its labelled counter (labels() takes a lock and a lookup per call)

    def count(status: int) -> None:
        c = counted.get(status)
        if c is None:
            c = counted[status] = m.requests.labels(str(status))
        c.inc()

    outcomes = {k: m.deadline.labels(k) for k in ("exact", "degraded", "missed")}

    def observe(r: Any) -> None:
        count(r.status)
        if math.isfinite(r.deadline):
            outcomes[("degraded" if r.degraded else "exact") if r.in_target else "missed"].inc()
        if r.status == 200:
            m.latency.observe(r.latency)
            if r.degraded:
                m.degraded.inc()
        elif r.status >= 500 and r.status != 503 and not (r.status == 504 and math.isfinite(r.deadline)):
            log.warning("request %s answered %s: %s", r.id, r.status, r.error)
        else:
            log.debug("request %s answered %s: %s", r.id, r.status, r.error)

    service.dispatcher.on_answer = observe
    seen = {"n": 0}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        log.info("app up: %s on %d workers", service.scheme, service.pool.n_workers)
        attach = getattr(service, "attach_loop", None)
        if attach is not None:
            attach(asyncio.get_running_loop())  # a baseline's dispatcher runs on this loop (LoopEnv)
        yield
        log.info("shutting down: answering %d requests in flight (up to %g s)", service.pending, drain_s)
        try:
            await asyncio.to_thread(service.close, drain_s)
        except Exception:
            log.exception("closing the %s service failed", service.scheme)
            raise
        finally:
            if attach is not None:
                attach(None)
        log.info("shut down: %s service closed", service.scheme)

    app = FastAPI(title="gencc serving", lifespan=lifespan)
    app.state.service, app.state.metrics, app.state.limits = service, m, limits
    app.state.max_body_bytes = max_body

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(err).__name__, err,
                  exc_info=err)
        return JSONResponse({"detail": f"internal error: {type(err).__name__}"}, status_code=500)

    async def settle(x: np.ndarray, deadline_ms: float | None = None, exact_only: bool = False) -> Any:
        out, answered = _answered_on_loop()
        service.submit_to(answered, x, checked=True, deadline_ms=deadline_ms, exact_only=exact_only)
        r = await out
        if r.status == 503 and (r.error.startswith("overloaded") or (r.error == "shutting down" and not r.tasks)):
            count(503)
        return r

    async def answer_one(x: np.ndarray, target: tuple[float | None, bool] = (None, False)
                         ) -> tuple[int, dict[str, Any]]:
        return _body(await settle(x, *target), service.scheme)

    async def answer_batch(arrs: list[np.ndarray], target: tuple[float | None, bool] = (None, False)
                           ) -> tuple[int, dict[str, Any]]:
        res = await asyncio.gather(*(answer_one(a, target) for a in arrs))
        return 200, {"results": [dict(b, status=s) for s, b in res], "scheme": service.scheme}

    def route(parser: Any, answer: Any) -> Any:
        """A handler: the body parsed by `parser` (a refusal answered and counted) and then answered."""

        async def handler(body: bytes, headers: Any = ()) -> tuple[int, dict[str, Any]]:
            try:
                target = deadline_headers(headers)
                if len(body) > limits.parse_inline_bytes:  # off the event loop: /healthz stays live
                    parsed = await asyncio.to_thread(parser, body, schemas)
                else:
                    parsed = parser(body, schemas)
            except BadRequest as e:
                count(e.status)
                return e.status, {"detail": e.detail}
            return await answer(parsed, target)

        return handler

    one, batch = route(parse_one, answer_one), route(parse_batch, answer_batch)

    # POST /predict and /predict/batch are answered by `PredictRoutes`, between DoorGuard and FastAPI's routing;
    # the routes below declare them (OpenAPI) and answer the same way if reached
    app.add_middleware(PredictRoutes, handlers={"/predict": one, "/predict/batch": batch})

    @app.post("/predict", openapi_extra=schemas.openapi(schemas.one), responses=RESPONSES)
    async def predict(request: Request) -> JSONResponse:
        """Answer one input: {"input": <nested list of the model's input shape>}."""
        status, body = await one(await request.body(), request.headers.raw)
        return JSONResponse(body, status_code=status)

    @app.post("/predict/batch", openapi_extra=schemas.openapi(schemas.batch), responses=RESPONSES)
    async def predict_batch(request: Request) -> JSONResponse:
        """Answer 1 to max_batch inputs: {"inputs": [<input>, ...]}; one status per input."""
        status, body = await batch(await request.body(), request.headers.raw)
        return JSONResponse(body, status_code=status)

    from ..._util.version import __version__

    spec = ModelSpec(name, in_shape, out_shape, limits.max_batch, *getattr(service, "tensor_names", ()))
    app.add_middleware(V2Routes, spec=spec, scheme=service.scheme,
                       settle=settle, health=service.health, count=count, server=server_metadata(__version__),
                       parse_inline_bytes=limits.parse_inline_bytes, upstreams=service.upstream_states)
    app.add_middleware(DoorGuard, limits=limits, max_body_bytes=max_body, on_refuse=count,
                       protocol_prefix="/v2/")  # outermost

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        h = service.health()  # 503 unless the live workers can serve the scheme
        ups = service.upstream_states()
        if ups is not None:
            h["upstreams"] = ups
        return JSONResponse(h, status_code=200 if h["status"] == "ok" else 503)

    @app.get("/metrics", responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    async def metrics() -> Response:
        fails = dict(service.dispatcher.failures)
        slow = service.pool.slow_tasks - seen["n"]
        seen["n"] += slow
        for reason, n in fails.items():
            _catch_up(m.stragglers.labels(reason), n)
        if slow:
            m.stragglers.labels("slow").inc(slow)
        for attr, counter in m.checks.items():
            _catch_up(counter, getattr(service.dispatcher, attr, 0))
        for state, n in service.dispatcher.runs.items():
            _catch_up(m.runs.labels(state), n)
            _catch_up(m.run_seconds.labels(state), service.dispatcher.run_seconds[state])
        h = service.health()
        for state in ("alive", "replacing", "dead"):
            m.workers.labels(state).set(h[state])
        m.live.set(h["live"])
        m.ready.set(1 if h["status"] == "ok" else 0)
        _catch_up(m.recreated, h["restarts"])
        _catch_up(m.lost, h["lost_tasks"])
        for up in service.upstream_states() or ():
            m.upstream_in.labels(up["url"]).set(1 if up["state"] == "in" else 0)
            _catch_up(m.ejections.labels(up["url"]), up["ejections"])
        _catch_up(m.rebalanced, h["rebalanced"])
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def start_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0, wait_s: float = 30.0
                    ) -> tuple[Any, threading.Thread, int]:
    """Serve `app` with uvicorn in a daemon thread (port 0: a free one); returns (server, thread, port) once it
    listens. Stop it with `server.should_exit = True` and join the thread: in-flight requests are answered."""
    import uvicorn

    limits = getattr(app.state, "limits", None) or Limits()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           **uvicorn_options(limits)))
    th = threading.Thread(target=server.run, daemon=True, name="gencc-http")
    th.start()
    t_end = time.monotonic() + wait_s
    while not server.started and th.is_alive() and time.monotonic() < t_end:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise RuntimeError(f"uvicorn did not start on {host}:{port} within {wait_s} s")
    return server, th, server.servers[0].sockets[0].getsockname()[1]
