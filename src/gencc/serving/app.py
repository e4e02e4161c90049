"""The HTTP front door (FastAPI): POST /predict, POST /predict/batch, GET /healthz, GET /metrics.

Overload -> 503 (bounded in-flight requests), bad input -> 422 naming the problem, shutdown answers what is in
flight (the lifespan closes the service after uvicorn stops taking connections).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from .service import Service

log = logging.getLogger(__name__)
#: most inputs one batch request may carry
MAX_BATCH = 64
BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)


class Metrics:
    """Prometheus metrics of one service (own registry, so several apps can live in one process)."""

    def __init__(self, scheme: str):
        self.registry = CollectorRegistry()
        self.requests = Counter("gencc_requests", "requests answered, by HTTP status", ["status"],
                                registry=self.registry)
        self.degraded = Counter("gencc_degraded_answers", "answers decoded from coded results",
                                registry=self.registry)
        self.latency = Histogram("gencc_request_latency_seconds", "arrival to answer", buckets=BUCKETS,
                                 registry=self.registry)
        self.stragglers = Counter("gencc_straggler_tasks", "tasks that failed or ran slow, by reason",
                                  ["reason"], registry=self.registry)
        #: counters the checked dispatcher keeps (gencc.serving.checked), copied at each scrape
        self.checks = {attr: Counter(f"gencc_{name}", doc, registry=self.registry) for attr, name, doc in (
            ("unchecked", "unchecked_answers", "answers no wrong-result check covered (--check-results)"),
            ("verifications", "verification_tasks", "re-runs of a request to verify a result (--check-results)"))}
        self.scheme = scheme


def _catch_up(counter: Any, total: float) -> None:
    """Advance a prometheus Counter to `total` (the dispatcher keeps plain counts; a Counter only increments)."""
    n = total - counter._value.get()
    if n > 0:
        counter.inc(n)


def parse_input(x: Any, in_shape: tuple[int, ...], label: str = "input") -> np.ndarray:
    """A float32 array of `in_shape` from JSON, or ValueError naming what is wrong."""
    if x is None:
        raise ValueError(f"missing '{label}': send {{\"{label}\": <nested list of shape {list(in_shape)}>}}")
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"'{label}' must be a nested list of numbers of shape {list(in_shape)} "
                         "(found a non-numeric or ragged value)") from None
    if a.size > 4 * math.prod(in_shape) or a.shape != tuple(in_shape):
        raise ValueError(f"'{label}' has shape {list(a.shape)}; this workload expects {list(in_shape)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"'{label}' contains NaN or infinity; send finite numbers")
    return a.astype(np.float32)


def _body(r: Any, scheme: str) -> tuple[int, dict[str, Any]]:
    if r.status == 200:
        return 200, {"output": np.asarray(r.output).tolist(), "degraded": bool(r.degraded), "scheme": scheme,
                     "latency_ms": round(r.latency * 1000, 3), "id": r.id, "gate": r.gate,
                     "uncertainty": r.uncertainty if math.isfinite(r.uncertainty) else None}  # the gate's estimate
    return r.status, {"detail": r.error, "scheme": scheme, "id": r.id}


def create_app(service: Service, drain_s: float = 30.0) -> FastAPI:
    """The app serving `service` (closed, after answering what is in flight, when the app shuts down)."""
    m = Metrics(service.scheme)
    in_shape = tuple(service.workload.in_shape)

    def observe(r: Any) -> None:
        m.requests.labels(str(r.status)).inc()
        if r.status == 200:
            m.latency.observe(r.latency)
            if r.degraded:
                m.degraded.inc()
        elif r.status >= 500 and r.status != 503:
            log.warning("request %s answered %s: %s", r.id, r.status, r.error)
        else:
            log.debug("request %s answered %s: %s", r.id, r.status, r.error)

    service.dispatcher.on_answer = observe
    seen = {"n": 0}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        log.info("app up: %s on %d workers", service.scheme, service.pool.n_workers)
        yield
        log.info("shutting down: answering %d requests in flight (up to %g s)", service.pending, drain_s)
        try:
            await asyncio.to_thread(service.close, drain_s)
        except Exception:
            log.exception("closing the %s service failed", service.scheme)
            raise
        log.info("shut down: %s service closed", service.scheme)

    app = FastAPI(title="gencc serving", lifespan=lifespan)
    app.state.service, app.state.metrics = service, m

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(err).__name__, err,
                  exc_info=err)
        return JSONResponse({"detail": f"internal error: {type(err).__name__}"}, status_code=500)

    async def answer_one(x: np.ndarray) -> tuple[int, dict[str, Any]]:
        r = await asyncio.wrap_future(service.submit(x))
        if r.status == 503 and (r.error.startswith("overloaded") or (r.error == "shutting down" and not r.tasks)):
            m.requests.labels("503").inc()
        return _body(r, service.scheme)

    @app.post("/predict")
    async def predict(request: Request) -> JSONResponse:
        try:
            payload = await request.json()
        except ValueError:
            return JSONResponse({"detail": "body must be JSON: {\"input\": [...]}"}, status_code=422)
        if not isinstance(payload, dict):
            return JSONResponse({"detail": "body must be a JSON object with key 'input'"}, status_code=422)
        try:
            x = parse_input(payload.get("input"), in_shape)
        except ValueError as e:
            return JSONResponse({"detail": str(e)}, status_code=422)
        status, body = await answer_one(x)
        return JSONResponse(body, status_code=status)

    @app.post("/predict/batch")
    async def predict_batch(request: Request) -> JSONResponse:
        try:
            payload = await request.json()
        except ValueError:
            return JSONResponse({"detail": "body must be JSON: {\"inputs\": [...]}"}, status_code=422)
        xs = payload.get("inputs") if isinstance(payload, dict) else None
        if not isinstance(xs, list) or not 1 <= len(xs) <= MAX_BATCH:
            return JSONResponse({"detail": f"'inputs' must be a list of 1 to {MAX_BATCH} inputs"}, status_code=422)
        try:
            arrs = [parse_input(x, in_shape, f"inputs[{i}]") for i, x in enumerate(xs)]
        except ValueError as e:
            return JSONResponse({"detail": str(e)}, status_code=422)
        res = await asyncio.gather(*(answer_one(a) for a in arrs))
        return JSONResponse({"results": [dict(b, status=s) for s, b in res], "scheme": service.scheme})

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        pool = service.pool
        return {"status": "ok", "scheme": service.scheme, "workers": pool.n_workers,
                "alive": int((~pool.dead).sum()), "in_flight": service.pending,
                "quarantined": list(getattr(service.dispatcher, "quarantined_view", ()))}

    @app.get("/metrics")
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
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def start_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0, wait_s: float = 30.0
                    ) -> tuple[Any, threading.Thread, int]:
    """Serve `app` with uvicorn in a daemon thread (port 0: a free one); returns (server, thread, port) once it
    listens. Stop it with `server.should_exit = True` and join the thread: in-flight requests are answered."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True, name="gencc-http")
    th.start()
    t_end = time.monotonic() + wait_s
    while not server.started and th.is_alive() and time.monotonic() < t_end:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise RuntimeError(f"uvicorn did not start on {host}:{port} within {wait_s} s")
    return server, th, server.servers[0].sockets[0].getsockname()[1]
