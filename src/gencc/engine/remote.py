"""Workers that are model servers gencc does not run: one replica each, reached over the Open Inference Protocol
(KServe v2 REST, Triton's HTTP API, MLServer, `gencc serve` itself).

A replica is named by a URL `http://HOST:PORT/v2/models/NAME[/versions/V]` (`parse_upstream`); `check_fleet`
reads each replica's metadata (`GET .../v2/models/NAME`: its input and output tensors) and ready route before any
request, and refuses a fleet that cannot serve: an unreachable replica (unless degraded starts are allowed),
replicas whose signatures differ, a model of several inputs, shapes that are not fixed, string tensors. The
`Fleet` it returns knows the shapes (`Fleet.model()`: a `gencc.model.Model` that calls the fleet, so the front
ends know `in_shape` and `out_shape` without a local model) and whether the inputs can be coded
(`Fleet.codable`: float inputs only; integer inputs take copies, hedging and replication).

A request to a replica (`Replica.infer`: one input, or a block of them in requests of at most the replica's max
batch size) carries its tensors binary (Triton's binary tensor extension) where the replica's server metadata
(`GET /v2`) lists `binary_tensor_data`, JSON otherwise, on keep-alive connections per replica
(`gencc.engine.keepalive`: plain sockets read by httptools' parser, a urllib3 pool for https), with bounded
timeouts and at most `max_in_flight` requests out to a replica at once; a refused or reset connection raises
ConnectionError, an answer that cannot be used `RemoteError`. Metadata, ready probes and the server metadata go
through an `httpx.Client`. The engine's backend over a fleet is `gencc.engine.remote_backend.RemoteBackend`.
httpx, httptools and urllib3 are imported when a fleet is checked or a backend starts, so `import gencc` imports
none of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np

from ..errors import ConfigError, RemoteError
from ..model import Model
from .keepalive import connections

#: seconds to open a connection to a replica, and to wait for its answer (per request)
CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 2.0, 30.0
#: requests out to one replica at once, at most (a request past it waits for a slot, up to the read timeout)
MAX_IN_FLIGHT = 8
#: what a request's path may hold as it is (anything else is percent-encoded)
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
#: inputs per request when a replica says nothing of its largest batch (Triton's config says max_batch_size)
DEFAULT_MAX_BATCH = 64
#: the protocol's datatypes gencc can send, by name: numpy dtype, and whether it can carry a coded input
DATATYPES: dict[str, tuple[Any, bool]] = {
    "FP16": (np.float16, True), "FP32": (np.float32, True), "FP64": (np.float64, True), "BF16": (np.float32, True),
    "INT8": (np.int8, False), "INT16": (np.int16, False), "INT32": (np.int32, False), "INT64": (np.int64, False),
    "UINT8": (np.uint8, False), "UINT16": (np.uint16, False), "UINT32": (np.uint32, False),
    "UINT64": (np.uint64, False), "BOOL": (np.bool_, False),
}
#: the datatypes that travel as binary tensors (little-endian, numpy's layout; BF16 has no numpy dtype)
_BINARY = frozenset(DATATYPES) - {"BF16"}
_PATH = re.compile(r"^/v2/models/([A-Za-z0-9_.-]+)(?:/versions/([A-Za-z0-9_.-]+))?/?$")
_FIELD = "upstreams"


@dataclass(frozen=True)
class Upstream:
    """One replica: its server's base URL (scheme://host:port[/prefix]), the model's name and version (None:
    the server's default)."""

    url: str
    base: str
    name: str
    version: str | None = None

    @property
    def path(self) -> str:
        """The model's route: /v2/models/NAME[/versions/V] (after `base`)."""
        return f"/v2/models/{self.name}" + (f"/versions/{self.version}" if self.version else "")


def parse_upstream(url: str) -> Upstream:
    """The replica a URL names: http(s)://HOST:PORT/v2/models/NAME[/versions/V] (a path prefix before /v2 is
    kept, as behind a gateway); a `ConfigError` naming "upstreams" otherwise."""
    form = "http://HOST:PORT/v2/models/NAME[/versions/V]"
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"an upstream is a URL {form}, got {url!r}", _FIELD)
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or parts.query or parts.fragment:
        raise ConfigError(f"an upstream is a URL {form}, got {url!r}", _FIELD)
    at = parts.path.find("/v2/models/")
    m = _PATH.match(parts.path[at:]) if at >= 0 else None
    if m is None:
        raise ConfigError(f"an upstream names a model's route: {form}, got {url!r}", _FIELD)
    base = f"{parts.scheme}://{parts.netloc}{parts.path[:at]}"
    return Upstream(url.strip(), base, m.group(1), m.group(2))


def read_upstreams(path: str | Path) -> list[str]:
    """The upstream URLs of a file, one a line (blank lines and lines starting with # are skipped); a
    `ConfigError` naming "upstreams" when it cannot be read or names none."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the upstreams file {path}: {getattr(e, 'strerror', None) or e}",
                          _FIELD) from None
    urls = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not urls:
        raise ConfigError(f"the upstreams file {path} names no upstream (one URL a line)", _FIELD)
    return urls


def check_upstreams(urls: Iterable[str]) -> tuple[Upstream, ...]:
    """The replicas of `urls`, each parsed, none named twice; a `ConfigError` naming "upstreams" otherwise."""
    if isinstance(urls, str):
        urls = [urls]
    ups = tuple(parse_upstream(u) for u in urls)
    if not ups:
        raise ConfigError("no upstream: give at least one replica's URL", _FIELD)
    seen: set[tuple] = set()
    for u in ups:
        key = (u.base.rstrip("/").lower(), u.name, u.version)
        if key in seen:
            raise ConfigError(f"upstream {u.url} is named twice: each worker is one replica", _FIELD)
        seen.add(key)
    return ups


@dataclass(frozen=True)
class Tensor:
    """One tensor of a model's signature: its name, datatype and shape without the batch axis."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Signature:
    """What a replica's metadata says: its one input, its output (the first one, when several), whether requests
    carry a batch axis, the largest batch per request."""

    input: Tensor
    output: Tensor
    batched: bool
    max_batch: int

    @property
    def codable(self) -> bool:
        """Whether a coded input (a real-valued mix of inputs) can be sent: a float input datatype."""
        return DATATYPES[self.input.datatype][1]

    def same_as(self, other: Signature) -> bool:
        """The same tensors (names, datatypes, shapes) and batch axis; the largest batch may differ."""
        return (self.input, self.output, self.batched) == (other.input, other.output, other.batched)

    def describe(self) -> str:
        def shape(t: Tensor) -> str:
            return "[" + ", ".join(map(str, ((-1,) if self.batched else ()) + t.shape)) + "]"

        return (f"input {self.input.name} {self.input.datatype} {shape(self.input)} -> output {self.output.name} "
                f"{self.output.datatype} {shape(self.output)}")


def signature(metadata: Any, config: Any = None, where: str = "the replica") -> Signature:
    """The `Signature` of a model's metadata (the protocol's model metadata response) and, when the server has it,
    its configuration (Triton's: `max_batch_size`); a `ConfigError` naming `where` for what gencc cannot serve."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{where}: {why}", _FIELD)

    if not isinstance(metadata, dict) or not isinstance(metadata.get("inputs"), list) \
            or not isinstance(metadata.get("outputs"), list):
        raise bad("its model metadata has no inputs and outputs lists (is it an Open Inference Protocol server?)")
    ins, outs = metadata["inputs"], metadata["outputs"]
    if not ins or not outs:
        raise bad(f"its model metadata declares no {'input' if not ins else 'output'} tensor: declare the model's "
                  "inputs and outputs (name, datatype, shape) in the server's model configuration (MLServer: "
                  "model-settings.json; Triton: config.pbtxt)")
    if len(ins) != 1:
        raise bad(f"the model takes {len(ins)} input tensors; gencc sends one input tensor per request")

    def tensor(t: Any, what: str) -> tuple[str, str, list[int]]:
        try:
            name, dt, shape = str(t["name"]), str(t["datatype"]).upper(), [int(d) for d in t["shape"]]
        except (KeyError, TypeError, ValueError):
            raise bad(f"its {what} tensor is not described by name, datatype and shape: {t!r}") from None
        if dt == "BYTES":
            raise bad(f"its {what} {name} is a string tensor (BYTES); gencc forwards numeric tensors only")
        if dt not in DATATYPES:
            raise bad(f"its {what} {name} has datatype {dt}, which gencc does not know")
        return name, dt, shape

    in_name, in_dt, in_shape = tensor(ins[0], "input")
    out_name, out_dt, out_shape = tensor(outs[0], "output")
    batched = bool(in_shape) and in_shape[0] == -1
    if batched:
        in_shape, out_shape = in_shape[1:], out_shape[1:] if out_shape[:1] == [-1] else out_shape
    if not in_shape or any(d < 1 for d in in_shape):
        raise bad(f"its input {in_name} has shape {ins[0]['shape']}; gencc needs a fixed input shape (a batch "
                  "axis -1 first, then positive sizes)")
    max_batch = DEFAULT_MAX_BATCH if batched else 1
    if isinstance(config, dict) and batched:
        mb = config.get("max_batch_size")
        if isinstance(mb, int) and not isinstance(mb, bool) and mb > 0:
            max_batch = mb
    out = tuple(out_shape) if out_shape and all(d >= 1 for d in out_shape) else ()  # () : found by a call
    return Signature(Tensor(in_name, in_dt, tuple(in_shape)), Tensor(out_name, out_dt, out), batched, max_batch)


# ----- one replica's client ----------------------------------------------------------------------------------
def _client(up: Upstream, connect_s: float, read_s: float, max_in_flight: int) -> Any:
    import httpx

    return httpx.Client(base_url=up.base, trust_env=False,  # replicas are reached directly, never via a proxy
                        timeout=httpx.Timeout(read_s, connect=connect_s),
                        limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight))


def _get_json(client: Any, path: str) -> tuple[int, Any]:
    r = client.get(path)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, None


def _whole(sig: Signature, a: np.ndarray) -> np.ndarray:
    """`a` cast to an integer or boolean input's datatype; a ValueError when a value does not survive the cast."""
    cast = a.astype(DATATYPES[sig.input.datatype][0])
    if not np.array_equal(cast.astype(np.float64), a.astype(np.float64)):
        raise ValueError(f"input {sig.input.name} is {sig.input.datatype}: its values must be whole numbers "
                         "in its range")
    return cast


def encode_request(sig: Signature, x: np.ndarray) -> bytes:
    """The infer request of inputs `x` (B, *input shape) for a batched model, or one input for one that is not:
    JSON tensors; the values cast to the input's datatype (a ValueError when an integer input gets a number it
    cannot hold exactly)."""
    dtype, _ = DATATYPES[sig.input.datatype]
    a = np.asarray(x)
    if np.issubdtype(dtype, np.integer) or dtype is np.bool_:
        data = _whole(sig, a).ravel().tolist()
    else:
        data = a.astype(np.float64).ravel().tolist()
    body = {"inputs": [{"name": sig.input.name, "shape": list(a.shape), "datatype": sig.input.datatype,
                        "data": data}],
            "outputs": [{"name": sig.output.name}]}
    return json.dumps(body, allow_nan=False).encode()


def encode_binary_request(sig: Signature, x: np.ndarray) -> tuple[bytes, int]:
    """The infer request of `x` with Triton's binary tensor extension: (the body, the length of its JSON header,
    for the Inference-Header-Content-Length header). The input's bytes follow the header, little-endian in the
    input's datatype, and the output is asked for as binary too (a ValueError as in `encode_request`)."""
    dtype, _ = DATATYPES[sig.input.datatype]
    a = np.asarray(x)
    cast = _whole(sig, a) if np.issubdtype(dtype, np.integer) or dtype is np.bool_ else a.astype(dtype)
    raw = np.ascontiguousarray(cast, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    head = json.dumps({"inputs": [{"name": sig.input.name, "shape": list(a.shape), "datatype": sig.input.datatype,
                                   "parameters": {"binary_data_size": len(raw)}}],
                       "outputs": [{"name": sig.output.name, "parameters": {"binary_data": True}}]}).encode()
    return head + raw, len(head)


def _binary_size(o: Any) -> Any:
    params = o.get("parameters") if isinstance(o, dict) else None
    return params.get("binary_data_size") if isinstance(params, dict) else None


def _binary_output(sig: Signature, outs: list, o: dict, blob: bytes) -> np.ndarray:
    """Output `o`'s values from the bytes after the JSON header (the outputs' binary parts in their order)."""
    start = 0
    for other in outs:
        if other is o:
            break
        size = _binary_size(other)
        start += size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0
    size, dt = _binary_size(o), str(o.get("datatype", "")).upper()
    if dt not in _BINARY:
        raise RemoteError(f"output {sig.output.name} came as binary {dt or 'data'}, which gencc cannot read")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0 or start + size > len(blob):
        raise RemoteError(f"output {sig.output.name}: binary_data_size {size!r} does not lie within the answer's "
                          f"{len(blob)} bytes of binary data")
    item = np.dtype(DATATYPES[dt][0]).newbyteorder("<")
    if size % item.itemsize:
        raise RemoteError(f"output {sig.output.name}: {size} bytes are not whole {dt} values")
    return np.frombuffer(blob[start:start + size], dtype=item).astype(np.float64)


def decode_response(sig: Signature, body: Any, rows: int | None, blob: bytes | None = None) -> np.ndarray:
    """The output tensor of an infer response as float64, (rows, *output shape) (rows None: one output of a model
    without a batch axis), from JSON data or, `blob` given (the bytes after the header of a binary answer), binary
    data; a RemoteError when it is not the protocol or not the declared tensor."""
    outs = body.get("outputs") if isinstance(body, dict) else None
    if not isinstance(outs, list) or not outs:
        raise RemoteError("the answer has no outputs")
    mine = [o for o in outs if isinstance(o, dict) and o.get("name") == sig.output.name]
    if not mine:
        raise RemoteError(f"the answer has no output {sig.output.name}")
    o = mine[0]
    try:
        shape = tuple(int(d) for d in o["shape"])
        if _binary_size(o) is not None and blob is not None:
            y = _binary_output(sig, outs, o, blob)
        elif "data" not in o or _binary_size(o) is not None:
            raise RemoteError(f"output {sig.output.name} came without JSON data")
        else:
            y = np.asarray(o["data"], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        raise RemoteError(f"output {sig.output.name} is not a tensor of numbers") from None
    want = ((rows,) if rows is not None else ()) + sig.output.shape if sig.output.shape else None
    if want is not None and shape != want:
        raise RemoteError(f"output {sig.output.name} has shape {list(shape)}, expected {list(want)}")
    if y.size != math.prod(shape):
        raise RemoteError(f"output {sig.output.name} has {y.size} values for shape {list(shape)}")
    if rows is not None and (not shape or shape[0] != rows):
        raise RemoteError(f"output {sig.output.name} has shape {list(shape)} for {rows} inputs")
    return y.reshape(shape)


class Replica:
    """One replica's client: a keep-alive connection pool, at most `max_in_flight` requests out at once; `binary`
    None asks the replica's server metadata, on the first request, whether it takes binary tensors (False: JSON
    always)."""

    def __init__(self, up: Upstream, connect_s: float = CONNECT_TIMEOUT_S, read_s: float = READ_TIMEOUT_S,
                 max_in_flight: int = MAX_IN_FLIGHT, binary: bool | None = None):
        self.upstream, self.read_s = up, float(read_s)
        self.client = _client(up, connect_s, read_s, max_in_flight)
        self.pool = connections(up.base, connect_s, read_s, max_in_flight)  # the infer requests' keep-alive
        self._infer_path = quote(urlsplit(up.base).path.rstrip("/") + up.path + "/infer", safe=_PATH_SAFE)
        self.max_in_flight = int(max_in_flight)
        self.slots = threading.BoundedSemaphore(max_in_flight)
        self.binary = binary

    def takes_binary(self, sig: Signature) -> bool:
        """Whether requests to this replica carry binary tensors: its server lists `binary_tensor_data` among its
        extensions (`GET /v2`, asked once; a failed ask is asked again next time, JSON meanwhile) and both tensors'
        datatypes have a binary form."""
        if sig.input.datatype not in _BINARY or sig.output.datatype not in _BINARY:
            return False
        if self.binary is None:
            try:
                status, meta = _get_json(self.client, "/v2")
            except Exception:  # noqa: BLE001 - httpx's errors: the replica is down, JSON until it answers
                return False
            exts = meta.get("extensions") if status == 200 and isinstance(meta, dict) else None
            self.binary = isinstance(exts, list) and "binary_tensor_data" in exts
        return self.binary

    def metadata(self) -> tuple[Any, Any, bool]:
        """(the model's metadata, its configuration or None, whether it says it is ready); httpx's errors and
        RemoteError (a status that is not 200) pass through."""
        path = self.upstream.path
        status, meta = _get_json(self.client, path)
        if status != 200:
            raise RemoteError(f"GET {path} answered {status}")
        config = None
        try:
            cs, cfg = _get_json(self.client, path + "/config")
            config = cfg if cs == 200 else None
        except Exception:  # noqa: BLE001 - the configuration is Triton's extension: optional
            config = None
        ready = self.client.get(path + "/ready").status_code == 200
        return meta, config, ready

    def infer(self, sig: Signature, x: np.ndarray, batch: bool) -> np.ndarray:
        """f on `x`: the inputs (B, *in_shape) when `batch`, else one input; ConnectionError when the replica is
        lost, RemoteError for an answer that cannot be used."""
        rows = len(x) if batch else None
        send = x if batch or not sig.batched else x[None]
        if self.takes_binary(sig):
            body, head = encode_binary_request(sig, send)
            headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(head)}
        else:
            body, headers = encode_request(sig, send), {"Content-Type": "application/json"}
        if not self.slots.acquire(timeout=self.read_s):
            raise RemoteError(f"{self.upstream.url} has {self.max_in_flight} requests out already")
        try:
            status, answer_headers, content = self.pool.post(self._infer_path, body, headers)
        except TimeoutError as e:  # no connection or no answer in time
            raise RemoteError(f"{self.upstream.url} timed out ({type(e).__name__})") from None
        except OSError as e:  # refused, reset, closed, not HTTP: the connection is lost
            raise ConnectionError(f"{self.upstream.url} is unreachable ({type(e).__name__}: {e})") from None
        except RemoteError as e:
            raise RemoteError(f"{self.upstream.url}: {e}") from None
        finally:
            self.slots.release()
        if status != 200:
            raise RemoteError(f"{self.upstream.url} answered {status}: "
                              f"{content[:200].decode('utf-8', 'replace')}")
        head, blob = len(content), None
        length = answer_headers.get("inference-header-content-length")
        if length is not None:  # a binary answer: a JSON header, then the outputs' bytes
            if not length.isdigit() or not 0 < int(length) <= len(content):
                raise RemoteError(f"{self.upstream.url} answered Inference-Header-Content-Length {length[:20]!r} "
                                  f"for a body of {len(content)} bytes")
            head, blob = int(length), content[int(length):]
        try:
            answer = json.loads(content[:head])
        except (ValueError, UnicodeDecodeError):
            raise RemoteError(f"{self.upstream.url} answered with a body that is not JSON") from None
        y = decode_response(sig, answer, rows if rows is not None else (1 if sig.batched else None), blob)
        return y if batch or not sig.batched else y[0]

    def infer_rows(self, sig: Signature, X: Any) -> np.ndarray:
        """f on the inputs X (B, *in_shape), in requests of at most the replica's largest batch (one input a
        request where the model takes no batch axis)."""
        X = np.asarray(X)
        if sig.batched:
            parts = [self.infer(sig, X[i:i + sig.max_batch], True) for i in range(0, len(X), sig.max_batch)]
        else:
            parts = [self.infer(sig, X[i], False)[None] for i in range(len(X))]
        if not parts:
            return np.zeros((0, *sig.output.shape))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        self.client.close()
        self.pool.close()


# ----- the fleet -------------------------------------------------------------------------------------------------
@dataclass
class Fleet:
    """Replicas checked together: their URLs, their common `Signature`, which answered at start-up (`up`)."""

    upstreams: tuple[Upstream, ...]
    signature: Signature
    up: list[bool] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [u.url for u in self.upstreams]

    @property
    def codable(self) -> bool:
        return self.signature.codable

    @property
    def in_shape(self) -> tuple[int, ...]:
        return self.signature.input.shape

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.signature.output.shape

    def model(self) -> Model:
        """The fleet as a `gencc.model.Model` (batched; each call to the first replica that answered at start-up):
        its `in_shape` and `out_shape` are the replicas', its identity the model's name and the sha256 of the
        fleet's URLs and signature."""
        call = FleetCall(self.urls, self.signature, self.up.index(True) if True in self.up else 0)
        digest = hashlib.sha256(json.dumps([self.urls, self.signature.describe()]).encode()).hexdigest()
        return Model(call, name=self.upstreams[0].name, sha256=digest, factory=call.model,
                     in_shape=self.in_shape, out_shape=self.out_shape or None)


class FleetCall:
    """A batched f that calls one replica of a fleet (picklable: its URLs and signature travel)."""

    batched = True

    def __init__(self, urls: Sequence[str], sig: Signature, index: int = 0):
        self.urls, self.sig, self.index = list(urls), sig, int(index)
        self._replica: Replica | None = None

    def __getstate__(self) -> dict:
        return {"urls": self.urls, "sig": self.sig, "index": self.index, "_replica": None}

    def model(self) -> Model:
        return Fleet(check_upstreams(self.urls), self.sig, [i == self.index for i in range(len(self.urls))]).model()

    def __call__(self, X: Any) -> np.ndarray:
        if self._replica is None:
            self._replica = Replica(parse_upstream(self.urls[self.index]))
        return self._replica.infer_rows(self.sig, X)


def check_fleet(urls: Iterable[str], *, allow_degraded: bool = False, connect_s: float = CONNECT_TIMEOUT_S,
                read_s: float = 10.0) -> Fleet:
    """Read every replica's metadata and ready route, then the `Fleet` they make; a `ConfigError` naming
    "upstreams" and the replica for a malformed URL, an unreachable or unready replica (with `allow_degraded`,
    such replicas are listed as down and the fleet starts when at least one answers), a model gencc cannot serve
    (`signature`), or replicas whose signatures differ. An output shape the metadata leaves open is read from one
    call on a zero input."""
    ups = check_upstreams(urls)
    sigs: list[Signature | None] = []
    down: list[str] = []
    for up in ups:
        rep = Replica(up, connect_s, read_s, 1)
        try:
            meta, config, ready = rep.metadata()
        except (RemoteError, ValueError, OSError) as e:
            down.append(f"{up.url} ({e})")
            sigs.append(None)
            continue
        except Exception as e:  # noqa: BLE001 - httpx's errors: refused, reset, timed out
            down.append(f"{up.url} ({type(e).__name__}: {e})")
            sigs.append(None)
            continue
        finally:
            rep.close()
        if not ready:
            down.append(f"{up.url} (not ready: its ready route did not answer 200)")
            sigs.append(None)
            continue
        sigs.append(signature(meta, config, f"upstream {up.url}"))
    if down and not allow_degraded:
        raise ConfigError(f"upstream {down[0]} is unreachable or not ready" + (
            f" ({len(down) - 1} more down)" if len(down) > 1 else "") + "; start it or drop it from the list (a "
            "service can also start degraded: start_degraded, gencc serve --start-degraded)", _FIELD)
    found = [(up, s) for up, s in zip(ups, sigs, strict=True) if s is not None]
    if not found:
        raise ConfigError(f"no upstream answered: {'; '.join(down)}", _FIELD)
    first_up, first = found[0]
    for up, s in found[1:]:
        if not s.same_as(first):
            raise ConfigError(f"upstreams serve different models: {first_up.url} has {first.describe()}, {up.url} has "
                              f"{s.describe()}", _FIELD)
    sig = first
    sig = Signature(sig.input, sig.output, sig.batched, min(s.max_batch for _, s in found))
    fleet = Fleet(ups, sig, [s is not None for s in sigs])
    if not sig.output.shape:
        fleet = _probe_output(fleet, first_up, connect_s, read_s)
    return fleet


def _probe_output(fleet: Fleet, up: Upstream, connect_s: float, read_s: float) -> Fleet:
    """The fleet with its output shape read from one call on a zero input (metadata that leaves it open)."""
    sig = fleet.signature
    probe = Signature(sig.input, Tensor(sig.output.name, sig.output.datatype, ()), sig.batched, sig.max_batch)
    rep = Replica(up, connect_s, read_s, 1)
    try:
        x = np.zeros(sig.input.shape)
        y = rep.infer(probe, x[None] if sig.batched else x, sig.batched)
    except Exception as e:  # noqa: BLE001 - the replica failed the probe: the fleet cannot start
        raise ConfigError(f"upstream {up.url}: its metadata leaves the output shape open and a call on a zero input "
                          f"failed ({e})", _FIELD) from None
    finally:
        rep.close()
    shape = tuple(y.shape[1:]) if sig.batched else tuple(y.shape)
    if not shape:
        shape = (1,)
    out = Tensor(sig.output.name, sig.output.datatype, shape)
    return Fleet(fleet.upstreams, Signature(sig.input, out, sig.batched, sig.max_batch), fleet.up)
