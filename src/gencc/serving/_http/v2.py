"""The Open Inference Protocol (KServe "v2" REST, Triton's HTTP API) beside gencc's own /predict.

Clients that already speak it (`tritonclient.http`, `perf_analyzer`, KServe's REST client, curl) reach a coded
service without change:

    GET  /v2                               server metadata (extensions: binary_tensor_data)
    GET  /v2/health/live, /v2/health/ready readiness is /healthz's: 503 unless the live workers serve the scheme
    GET  /v2/models                        {"models": [the model's metadata]} (what `gencc loadtest` reads first)
    GET  /v2/models/NAME[/versions/1]      model metadata: input `input` FP32 [-1, *input_shape], output `output`
    GET  /v2/models/NAME[/versions/1]/ready
    GET  /v2/models/NAME[/versions/1]/config   Triton's model configuration (what perf_analyzer reads first)
    POST /v2/models/NAME[/versions/1]/infer

An infer request carries one tensor `input` of shape [B, *input_shape], datatype FP32, 1 <= B <= max_batch,
either as JSON `data` (flat or nested, row-major) or, with Triton's binary tensor extension, as B * prod(shape)
little-endian float32 after the JSON header (header `Inference-Header-Content-Length`, input parameter
`binary_data_size`). Each of the B inputs is one request to the coding layer (`Service.submit`), answered
together: output `output` [B, *output_shape] FP32, as JSON `data` or binary (output parameter `binary_data`,
request parameter `binary_data_output`), and `parameters` {"scheme": ..., "degraded": bool} (B = 1) or
{"scheme": ..., "degraded": [bool, ...]} (one per input, B > 1): degraded means decoded from coded results
(then also "uncertainty": the decode's estimated error sd, null without an estimate).

A request may carry its latency target, as Triton reads it: request parameter `timeout`, in microseconds (the
server's --deadline-ms when absent). It is answered by then: exactly if the answer came in time, else (coded
schemes) with a decode from the results that have arrived, when the gate trusts it (not with request parameter
`exact_only: true`), else 504 at the deadline.

Errors are `{"error": "..."}`: 400 for a body that is not the protocol or not this model's tensor, 404 for an
unknown model, route or version, 405 for a wrong method, and the answer's own status (503 overloaded, 504 timed
out, ...) when any input of the batch was not answered. The door's limits (`gencc.serving._http.limits.DoorGuard`:
API key, body size, read deadline, Content-Type) apply before any of this runs.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

import numpy as np
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ...errors import ProtocolError
from .schemas import F32_MAX, Number

#: the only version a gencc model has (the path form /versions/1 is accepted)
VERSION = "1"
#: the protocol extensions served (reported by GET /v2)
EXTENSIONS = ("binary_tensor_data",)
INPUT, OUTPUT, DATATYPE = "input", "output", "FP32"

_STRICT = ConfigDict(extra="forbid", strict=True)
#: the fields of a request, an input and a requested output (the models below); what a JSON number parses to
_BODY_KEYS = frozenset(("id", "model_name", "model_version", "parameters", "inputs", "outputs"))
_TENSOR_KEYS = frozenset(("name", "shape", "datatype", "parameters", "data"))
_WANTED_KEYS = frozenset(("name", "parameters"))
_NUMBERS = frozenset((float, int))
_EMPTY: dict[str, Any] = {}
#: the most numbers a request's data may hold for `ModelSpec._plain`'s check (larger ones: the models')
_PLAIN_MAX = 4096


class TensorIn(BaseModel):
    """$request_input: a named tensor, data in `data` or (binary extension) after the JSON header."""

    model_config = _STRICT
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] = {}
    data: Any = None


class TensorWanted(BaseModel):
    """$request_output: an output the client asks for (`binary_data`: return it as binary)."""

    model_config = _STRICT
    name: str
    parameters: dict[str, Any] = {}


class InferBody(BaseModel):
    """$inference_request (the JSON part of a binary request)."""

    model_config = _STRICT
    id: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    parameters: dict[str, Any] = {}
    inputs: Annotated[list[TensorIn], Field(min_length=1)]
    outputs: list[TensorWanted] | None = None


@dataclass(frozen=True)
class Inference:
    """A parsed infer request: the inputs (B, *input_shape) float32, the id to echo, binary output or JSON; its
    latency target in ms (request parameter `timeout`, in microseconds as Triton reads it; None: the server's
    default) and whether it takes exact answers only (request parameter `exact_only`)."""

    x: np.ndarray
    id: str | None
    binary_output: bool
    deadline_ms: float | None = None
    exact_only: bool = False


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_model_name(name: str) -> str:
    """`name` if it can be a model's name in the protocol's paths (letters, digits, '_', '.', '-'; up to 128,
    not starting with a symbol), else ValueError saying so."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a model name is 1 to 128 letters, digits, '_', '.' or '-' (starting with a letter or "
                         f"digit), got {name!r}")
    return name


@lru_cache(maxsize=256)
def _adapter(shape: tuple[int, ...], nested: bool) -> TypeAdapter:
    """Strict finite-float32 numbers: a flat list of prod(shape), or lists nested exactly as `shape`."""
    t: Any = Number
    for n in reversed(shape if nested else (math.prod(shape),)):
        t = Annotated[list[t], Field(min_length=n, max_length=n)]
    return TypeAdapter(t)


def _first_problem(err: ValidationError, what: str) -> str:
    e = err.errors(include_url=False)[0]
    where = what + "".join(f"[{i}]" if isinstance(i, int) else f".{i}" for i in e["loc"])
    more = len(err.errors()) - 1
    got = e.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {json.dumps(got)[:40]})"
    return f"{where}: {e['msg']}{shown}" + (f" ({more} more problem{'s' if more > 1 else ''})" if more else "")


class ModelSpec:
    """What the protocol says about the served model: its `name`, the shape of one input and one output
    (`out_shape` None: unknown until answered, reported as [-1, -1]), the largest batch, and the names of its input
    and output tensors (gencc's own "input" and "output"; in front of replicas, theirs, so a client written for
    the replicas keeps its names)."""

    def __init__(self, name: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...] | None, max_batch: int,
                 input_name: str = INPUT, output_name: str = OUTPUT):
        check_model_name(name)
        self.name, self.in_shape, self.max_batch = name, tuple(in_shape), int(max_batch)
        self.out_shape = None if out_shape is None else tuple(out_shape)
        self.input_name, self.output_name = str(input_name), str(output_name)
        self._row = math.prod(self.in_shape)  # numbers in one input

    def metadata(self) -> dict[str, Any]:
        out = [-1, *self.out_shape] if self.out_shape is not None else [-1, -1]
        return {"name": self.name, "versions": [VERSION], "platform": "gencc",
                "inputs": [{"name": self.input_name, "datatype": DATATYPE, "shape": [-1, *self.in_shape]}],
                "outputs": [{"name": self.output_name, "datatype": DATATYPE, "shape": out}]}

    def config(self) -> dict[str, Any]:
        """Triton's model configuration extension: the batch axis is `max_batch_size`, dims exclude it."""
        out = list(self.out_shape) if self.out_shape is not None else [-1]
        return {"name": self.name, "platform": "gencc", "backend": "gencc", "max_batch_size": self.max_batch,
                "input": [{"name": self.input_name, "data_type": "TYPE_FP32", "dims": list(self.in_shape)}],
                "output": [{"name": self.output_name, "data_type": "TYPE_FP32", "dims": out}]}

    def parse(self, body: bytes, header_length: int | None) -> Inference:
        """The inputs of an infer body (`header_length`: the Inference-Header-Content-Length header, binary
        tensors follow the JSON), or ProtocolError (400) naming the problem."""
        if header_length is None:
            head, rest = body, b""
        elif not 0 < header_length <= len(body):
            raise ProtocolError(400, f"Inference-Header-Content-Length {header_length} does not lie within the "
                                     f"body's {len(body)} bytes")
        else:
            head, rest = body[:header_length], body[header_length:]
        try:
            obj = pydantic_core.from_json(head, allow_inf_nan=False)
        except ValueError as e:
            raise ProtocolError(400, f"the inference request must be UTF-8 JSON ({e})") from None
        x = None if rest else self._plain(obj)
        if x is not None:  # the common request, checked without the models: the same answer, sooner
            params = obj.get("parameters", _EMPTY)
            outputs = obj.get("outputs")
            wanted = None if outputs is None else [(o["name"], o.get("parameters", _EMPTY)) for o in outputs]
            return self._finish(x, obj.get("id"), params, wanted)
        try:
            req = InferBody.model_validate(obj)
        except ValidationError as e:
            raise ProtocolError(400, f"not an inference request: {_first_problem(e, 'request')}") from None
        if len(req.inputs) != 1 or req.inputs[0].name != self.input_name:
            raise ProtocolError(400, f"model {self.name!r} takes one input named {self.input_name!r}, got "
                                     f"{[t.name for t in req.inputs]}")
        t = req.inputs[0]
        if t.datatype != DATATYPE:
            raise ProtocolError(400, f"input {self.input_name!r} has datatype {t.datatype!r}; model {self.name!r} "
                                     f"takes {DATATYPE}")
        shape = tuple(t.shape)
        if len(shape) != len(self.in_shape) + 1 or shape[1:] != self.in_shape:
            raise ProtocolError(400, f"input {self.input_name!r} has shape {list(shape)}; model {self.name!r} takes "
                                     f"[B, {', '.join(map(str, self.in_shape))}]")
        if not 1 <= shape[0] <= self.max_batch:
            raise ProtocolError(400, f"a batch of {shape[0]} inputs: this server takes 1 to {self.max_batch} per "
                                     "request (--max-batch)")
        x = self._tensor(t, shape, rest)
        wanted = None if req.outputs is None else [(o.name, o.parameters) for o in req.outputs]
        return self._finish(x, req.id, req.parameters, wanted)

    def _plain(self, obj: Any) -> np.ndarray | None:
        """The inputs of the common request, a JSON object the models would accept as it is: one input of this
        model's name, datatype and shape, its data a flat list of JSON numbers finite in float32, no binary
        parameters; request parameters and outputs of the models' types. None for any other body: `parse` then
        checks it with the models, which name what is wrong (this check refuses nothing itself)."""
        if type(obj) is not dict or not obj.keys() <= _BODY_KEYS:
            return None
        inputs, outputs = obj.get("inputs"), obj.get("outputs")
        if type(inputs) is not list or len(inputs) != 1 or type(obj.get("parameters", _EMPTY)) is not dict:
            return None
        if any(type(obj.get(k)) not in (str, type(None)) for k in ("id", "model_name", "model_version")):
            return None
        if outputs is not None and (type(outputs) is not list or not all(
                type(o) is dict and o.keys() <= _WANTED_KEYS and type(o.get("name")) is str
                and type(o.get("parameters", _EMPTY)) is dict for o in outputs)):
            return None
        t = inputs[0]
        if type(t) is not dict or not t.keys() <= _TENSOR_KEYS or t.get("name") != self.input_name or \
                t.get("datatype") != DATATYPE or t.get("parameters", _EMPTY) != _EMPTY:
            return None
        shape, data = t.get("shape"), t.get("data")
        if type(shape) is not list or len(shape) != len(self.in_shape) + 1 or \
                not all(type(n) is int for n in shape) or tuple(shape[1:]) != self.in_shape or \
                not 1 <= shape[0] <= self.max_batch:
            return None
        if type(data) is not list or len(data) != shape[0] * self._row or len(data) > _PLAIN_MAX or \
                not set(map(type, data)) <= _NUMBERS:
            return None
        if not -F32_MAX <= min(data) <= max(data) <= F32_MAX:  # the models' bound (exact for integers too)
            return None
        return np.array(data, dtype=np.float64).astype(np.float32).reshape(shape)  # as the models round: once to float

    def _finish(self, x: np.ndarray, id: str | None, params: dict[str, Any],
                wanted: list[tuple[str, dict[str, Any]]] | None) -> Inference:
        """The `Inference` of checked inputs `x`, the request's parameters checked (`wanted`: the outputs asked
        for, (name, parameters) each, None: not given)."""
        timeout = params.get("timeout")
        if timeout is not None and (type(timeout) is not int or timeout < 1):
            raise ProtocolError(400, f"parameter 'timeout' is the request's latency target in microseconds, a "
                                     f"positive whole number; got {json.dumps(timeout)[:40]}")
        exact = params.get("exact_only", False)
        if not isinstance(exact, bool):
            raise ProtocolError(400, f"parameter 'exact_only' must be true or false, got {json.dumps(exact)[:40]}")
        return Inference(x, id, self._binary_output(params, wanted), None if timeout is None else timeout / 1000,
                         exact)

    def _tensor(self, t: TensorIn, shape: tuple[int, ...], rest: bytes) -> np.ndarray:
        size = t.parameters.get("binary_data_size")
        if size is None:
            if rest:
                raise ProtocolError(400, f"{len(rest)} bytes follow the JSON header but input {self.input_name!r} has "
                                         "no binary_data_size parameter")
            if t.data is None:
                raise ProtocolError(400, f"input {self.input_name!r} has neither 'data' nor a binary_data_size "
                                         "parameter")
            nested = isinstance(t.data, list) and bool(t.data) and isinstance(t.data[0], list)
            try:
                data = _adapter(shape, nested).validate_python(t.data)
            except ValidationError as e:
                form = f"nested as {list(shape)}" if nested else f"a flat list of {math.prod(shape)}"
                raise ProtocolError(400, f"input data must be finite float32 JSON numbers, {form}: "
                                         f"{_first_problem(e, 'data')}") from None
            x = np.asarray(data, dtype=np.float32).reshape(shape)
        else:
            want = 4 * math.prod(shape)
            if type(size) is not int or size != want:
                raise ProtocolError(400, f"binary_data_size {size!r}: an FP32 tensor of shape {list(shape)} is "
                                         f"{want} bytes")
            if t.data is not None:
                raise ProtocolError(400, f"input {self.input_name!r} has both 'data' and binary_data_size")
            if len(rest) != want:
                raise ProtocolError(400, f"{len(rest)} bytes of binary tensor data follow the JSON header; "
                                         f"binary_data_size says {want}")
            x = np.frombuffer(rest, dtype="<f4").reshape(shape).astype(np.float32)
        if not np.isfinite(x).all():
            raise ProtocolError(400, f"input {self.input_name!r} holds NaN or infinite values: send finite float32 "
                                     "numbers")
        return x

    def _binary_output(self, params: dict[str, Any], wanted: list[tuple[str, dict[str, Any]]] | None) -> bool:
        def flag(params: dict[str, Any], key: str, default: bool) -> bool:
            v = params.get(key, default)
            if not isinstance(v, bool):
                raise ProtocolError(400, f"parameter {key!r} must be true or false, got {json.dumps(v)[:40]}")
            return v

        every = flag(params, "binary_data_output", False)
        if wanted is None:
            return every
        names = [name for name, _ in wanted]
        if names != [self.output_name]:
            raise ProtocolError(400, f"model {self.name!r} has one output named {self.output_name!r}; requested "
                                     f"{names}")
        if "classification" in wanted[0][1]:
            raise ProtocolError(400, "the classification extension is not served: request the raw output")
        return flag(wanted[0][1], "binary_data", every)


def answer(spec: ModelSpec, scheme: str, inf: Inference, results: list[Any]
           ) -> tuple[int, dict[str, Any], bytes]:
    """The response to `inf` from its B answered `Request`s: (status, JSON object, binary tensor bytes)."""
    failed = [(i, r) for i, r in enumerate(results) if r.status != 200]
    if failed:
        i, r = failed[0]
        where = f"input {i} of {len(results)}: " if len(results) > 1 else ""
        return r.status, {"error": f"{where}{r.error}"}, b""
    with np.errstate(over="ignore"):
        y = np.asarray(results[0].output, dtype=np.float32)[None] if len(results) == 1 else \
            np.stack([np.asarray(r.output, dtype=np.float32) for r in results])
    if not np.isfinite(y).all():  # JSON has no NaN; a finite float64 output may overflow float32
        return 500, {"error": "the model's output is not finite in float32"}, b""
    degraded = [bool(r.degraded) for r in results]
    params: dict[str, Any] = {"scheme": scheme, "degraded": degraded[0] if len(degraded) == 1 else degraded}
    if any(degraded):  # a decoded answer's estimated error sd (null: no estimate)
        sd = [float(r.uncertainty) if r.degraded and math.isfinite(r.uncertainty) else None for r in results]
        params["uncertainty"] = sd[0] if len(sd) == 1 else sd
    out: dict[str, Any] = {"name": spec.output_name, "datatype": DATATYPE, "shape": list(y.shape)}
    blob = b""
    if inf.binary_output:
        blob = y.astype("<f4").tobytes()
        out["parameters"] = {"binary_data_size": len(blob)}
    else:
        out["data"] = y.ravel().tolist()
    return 200, {"model_name": spec.name, "model_version": VERSION,
                 "id": inf.id if inf.id is not None else str(results[0].id),
                 "parameters": params, "outputs": [out]}, blob


#: the answers' JSON (one encoder for every answer, not one built per call)
_to_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer|/config)?$")


class V2Routes:
    """ASGI middleware answering every path under /v2 (see the module docstring); other paths go on to the app.
    It sits inside `DoorGuard`, which has read an infer body within the limits and replays it as one message.

    `settle(x, deadline_ms, exact_only)` submits one input and awaits its answered `Request`; `health()` is
    `Service.health`; `count` counts a refusal by status (the app's metrics); bodies over `parse_inline_bytes` are
    parsed in a thread; `upstreams()` lists the replicas behind the server and their state (None: none), which the
    model's metadata carries in its `parameters`."""

    def __init__(self, app: Any, spec: ModelSpec, scheme: str,
                 settle: Callable[[np.ndarray, float | None, bool], Awaitable[Any]],
                 health: Callable[[], dict[str, Any]], count: Callable[[int], None], server: dict[str, Any],
                 parse_inline_bytes: int = 64 * 1024, upstreams: Callable[[], Any] | None = None):
        self.app, self.spec, self.scheme, self.settle = app, spec, scheme, settle
        self.health, self.count, self.server = health, count, server
        self.upstreams = upstreams
        self.parse_inline_bytes = int(parse_inline_bytes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/v2" and not path.startswith("/v2/"):
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        try:
            if method == "POST":
                status, obj, blob = await self._post(scope, receive, path)
            elif method in ("GET", "HEAD"):
                status, obj, blob = *self._get(path), b""
            else:
                raise ProtocolError(405, f"{method} is not served on {path}")
        except ProtocolError as e:
            self.count(e.status)
            status, obj, blob = e.status, {"error": e.message}, b""
        if obj is None:
            return  # the client left before its body arrived
        data = _to_json(obj).encode()
        headers = [(b"content-type", b"application/octet-stream" if blob else b"application/json"),
                   (b"content-length", str(len(data) + len(blob)).encode())]
        if blob:
            headers.append((b"inference-header-content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else data + blob})

    def _ready(self) -> tuple[int, dict[str, Any]]:
        h = self.health()
        if h["status"] == "ok":
            return 200, {"ready": True}
        if h.get("stalled_s"):
            return 503, {"error": f"not ready: no task has returned an output for {h['stalled_s']:.0f} s while "
                                  f"{h['in_flight']} requests wait (the workers do not answer)"}
        return 503, {"error": f"not ready: the service is {h['status']} ({h['live']} live workers, {h['scheme']} "
                              f"needs {h['needed']})"}

    def _model(self, path: str) -> tuple[str | None, str]:
        m = _MODEL.match(path)
        if m is None:
            raise ProtocolError(404, f"no route {path}: see GET /v2 and GET /v2/models/{self.spec.name}")
        name, version, tail = m.group(1), m.group(2), m.group(3) or ""
        if name != self.spec.name:
            raise ProtocolError(404, f"unknown model {name!r}: this server serves {self.spec.name!r}")
        if version is not None and version != VERSION:
            raise ProtocolError(404, f"model {name!r} has no version {version!r}; its only version is {VERSION!r}")
        return tail, name

    def _get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path in ("/v2", "/v2/"):
            return 200, self.server
        if path == "/v2/health/live":
            return 200, {"live": True}
        if path == "/v2/health/ready":
            return self._ready()
        if path in ("/v2/models", "/v2/models/"):  # the one model served, for a client that does not know its name
            return 200, {"models": [self.spec.metadata()]}
        tail, _ = self._model(path)
        if tail == "":
            meta = self.spec.metadata()
            ups = self.upstreams() if self.upstreams is not None else None
            if ups is not None:  # in front of replicas: where each stands
                meta["parameters"] = {"upstreams": ups}
            return 200, meta
        if tail == "/config":
            return 200, self.spec.config()
        if tail == "/ready":
            status, obj = self._ready()
            return status, ({"name": self.spec.name, "ready": True} if status == 200 else obj)
        raise ProtocolError(405, f"GET is not served on {path}: POST an inference request")

    async def _post(self, scope: Any, receive: Any, path: str) -> tuple[int, dict[str, Any] | None, bytes]:
        tail, _ = self._model(path)
        if tail != "/infer":
            raise ProtocolError(405, f"POST is not served on {path}: POST to /v2/models/{self.spec.name}/infer")
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding != b"identity":
            raise ProtocolError(415, f"Content-Encoding {encoding.decode('latin-1')!r} is not accepted: send the "
                                     "body uncompressed")
        raw = headers.get(b"inference-header-content-length")
        if raw is not None and not raw.strip().isdigit():
            raise ProtocolError(400, "Inference-Header-Content-Length must be a whole number of bytes")
        body = b""
        while True:  # one message from DoorGuard
            msg = await receive()
            if msg["type"] != "http.request":
                return 0, None, b""
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        n = None if raw is None else int(raw)
        if len(body) > self.parse_inline_bytes:  # off the event loop: the health routes stay live
            inf = await asyncio.to_thread(self.spec.parse, body, n)
        else:
            inf = self.spec.parse(body, n)
        if len(inf.x) == 1:  # one input: awaited here (gather would wrap it in a task, a turn of the loop later)
            results = [await self.settle(inf.x[0], inf.deadline_ms, inf.exact_only)]
        else:
            results = list(await asyncio.gather(*(self.settle(x, inf.deadline_ms, inf.exact_only) for x in inf.x)))
        return answer(self.spec, self.scheme, inf, results)


def server_metadata(version: str) -> dict[str, Any]:
    """GET /v2's answer."""
    return {"name": "gencc", "version": version, "extensions": list(EXTENSIONS)}
