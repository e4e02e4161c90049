"""Hostile input at the HTTP door, over real loopback sockets, on a model gencc does not ship: each kind gets a
4xx in under a second, /healthz stays healthy, and a poison value fails only its own request."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from gencc.engine import ThreadBackend, Workers  # noqa: E402
from gencc.loadgen.client import HttpClient  # noqa: E402
from gencc.serving import Limits, Service, create_app, make_dispatcher  # noqa: E402

from .serving_helpers import start_server  # noqa: E402

SHAPE = (2, 5)
W = np.linspace(-1, 1, 30).reshape(10, 3)


def tiny_model(x):
    """A model gencc never saw: a batched float32 numpy map (B, 2, 5) -> (B, 3)."""
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    with np.errstate(over="ignore"):  # inputs near the float32 limit are valid; tanh saturates
        return np.tanh(x @ W.astype(np.float32)).astype(np.float64)


tiny_model.batched = True


def tiny_service(f=tiny_model, **kw):
    pool = Workers(6, ThreadBackend({"f": f}, dtype=np.float32))
    return Service(pool, lambda env: make_dispatcher("gcc", env, K=3, max_wait=0.02, **kw))


@pytest.fixture(scope="module")
def door():
    svc = tiny_service()
    limits = Limits(read_timeout_s=0.5, max_batch=8)
    app = create_app(svc, limits=limits, in_shape=SHAPE)
    server, th, port = start_server(app)
    yield port, app
    server.should_exit = True
    th.join(20)


def x_json(value: str = "0.25") -> str:
    rows = [[value] + ["0.5"] * 4, ["0.1"] * 5]
    return "[" + ",".join("[" + ",".join(r) + "]" for r in rows) + "]"


def exchange(port: int, head: str, body: bytes = b"", read_s: float = 5.0) -> tuple[int, bytes, float]:
    """Send raw bytes (head: request line and headers), return (status, answer body, seconds to the answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as s:
        t = time.perf_counter()
        s.sendall(head.encode() + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data and (chunk := s.recv(65536)):
            data += chunk
        elapsed = time.perf_counter() - t
        head, _, rest = data.partition(b"\r\n\r\n")
        n = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")),
                 0)
        while len(rest) < n and (chunk := s.recv(65536)):
            rest += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1") else 0
    return status, rest, elapsed


def post(port: int, body: bytes | str, ctype: str = "application/json", path: str = "/predict",
         extra: str = "") -> tuple[int, bytes, float]:
    b = body.encode() if isinstance(body, str) else body
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\nContent-Length: {len(b)}"
            f"{extra}")
    return exchange(port, head, b)


def healthy(port: int) -> bool:
    status, body, elapsed = exchange(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close")
    return status == 200 and json.loads(body)["status"] == "ok" and elapsed < 1.0


BAD = [
    ("depth 10,000", '{"input": ' + "[" * 10_000 + "]" * 10_000 + "}", "application/json", 422, "nests too deep"),
    ("10**400", '{"input": ' + x_json("1" + "0" * 400) + "}", "application/json", 422, "beyond float range"),
    ("1e39 (inf in float32)", '{"input": ' + x_json("1e39") + "}", "application/json", 422, "float32"),
    ("-1e39", '{"input": ' + x_json("-1e39") + "}", "application/json", 422, "float32"),
    ("NaN literal", '{"input": ' + x_json("NaN") + "}", "application/json", 422, "NaN"),
    ("Infinity literal", '{"input": ' + x_json("Infinity") + "}", "application/json", 422, "NaN, infinite"),
    ("boolean", '{"input": ' + x_json("true") + "}", "application/json", 422, "non-numeric value true"),
    ("numeric string", '{"input": ' + x_json('"0.5"') + "}", "application/json", 422, 'non-numeric value "0.5"'),
    ("null", '{"input": ' + x_json("null") + "}", "application/json", 422, "non-numeric"),
    ("UTF-16 body", ('{"input": ' + x_json() + "}").encode("utf-16"), "application/json", 422, "UTF-8 JSON"),
    ("UTF-16 charset", ('{"input": ' + x_json() + "}").encode("utf-16"), "application/json; charset=utf-16", 415,
     "Content-Type"),
    ("text/plain", '{"input": ' + x_json() + "}", "text/plain", 415, "application/json"),
    ("no input", '{"inputs": []}', "application/json", 422, "missing 'input'"),
    ("extra key", '{"input": ' + x_json() + ', "debug": 1}', "application/json", 422, "unknown key 'debug'"),
    ("deeper than the rank", '{"input": [[[1.0]]]}', "application/json", 422, "shape [2, 5]"),
    ("wrong shape", '{"input": [[1.0, 2.0]]}', "application/json", 422, "shape [2, 5]"),
    ("not an object", "[1, 2]", "application/json", 422, "JSON object"),
]


@pytest.mark.parametrize("name, body, ctype, status, word", BAD, ids=[b[0] for b in BAD])
def test_each_bad_body_is_a_fast_4xx_naming_the_problem(door, name, body, ctype, status, word):
    port, _ = door
    got, answer, elapsed = post(port, body, ctype)
    assert got == status and word in json.loads(answer)["detail"], (got, answer)
    assert elapsed < 1.0 and b"Traceback" not in answer
    assert healthy(port)


def test_batch_limits_are_refused_before_parsing(door):
    port, app = door
    counted = app.state.metrics.requests
    n413, n422 = counted.labels("413")._value.get(), counted.labels("422")._value.get()
    one = json.loads(x_json())
    got, answer, _ = post(port, json.dumps({"inputs": [one] * 9}), path="/predict/batch")
    assert got == 422 and "1 to 8 inputs, got 9" in json.loads(answer)["detail"]
    huge = json.dumps({"inputs": [one] * 100_000}).encode()  # ~6 MB: over the limit by its Content-Length
    t = time.perf_counter()
    got, answer, _ = post(port, huge, path="/predict/batch")
    assert got == 413 and time.perf_counter() - t < 1.0, answer
    got, answer, _ = post(port, json.dumps({"inputs": [one] * 3}), path="/predict/batch")
    assert got == 200 and [r["status"] for r in json.loads(answer)["results"]] == [200] * 3
    assert healthy(port)
    # refusals at the door are counted in /metrics' requests by status
    assert (counted.labels("413")._value.get(), counted.labels("422")._value.get()) == (n413 + 1, n422 + 1)


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS")) / 1024


def test_a_50_mb_body_is_refused_declared_or_chunked_without_memory_growth(door):
    port, app = door
    r0 = rss_mb()
    got, answer, elapsed = exchange(port, "POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                          f"Content-Length: {50 * 2 ** 20}")  # declared: nothing read
    assert got == 413 and elapsed < 1.0 and b"limit" in answer
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # waiting for 100 Continue: no 100
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (50 * 2 ** 20))
        assert s.recv(65536).startswith(b"HTTP/1.1 413")
    chunk = b"%x\r\n%s\r\n" % (2 ** 20, b"[" * 2 ** 20)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        t = time.perf_counter()
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(50):  # 50 MB, cut off once over the limit
                s.sendall(chunk)
        except OSError:  # the server answered and closed
            pass
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413") and time.perf_counter() - t < 1.0, answer[:200]
    assert rss_mb() - r0 < 50 and app.state.max_body_bytes == 64 * 1024
    assert healthy(port)


def test_half_sent_bodies_and_headers_are_cut_at_the_read_timeout(door):
    port, _ = door
    socks = []
    for i in range(100):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"input\": [[")  # half a body
        else:
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Le")  # half the headers
        socks.append(s)
    assert healthy(port)  # the door stays open meanwhile
    time.sleep(0.5 + 0.6)
    try:
        for i, s in enumerate(socks):
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            if i % 2:
                assert data.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in data, data[:200]
            else:
                assert data == b""  # closed without an answer: the request never started
    finally:
        for s in socks:
            s.close()
    assert healthy(port)


def test_after_answers_a_keep_alive_connection_still_meets_the_header_deadline(door):
    """One header-deadline timer per connection, moved by each answer: a connection that has been answered
    several times and then sends half a request's headers is closed a read timeout after its last answer."""
    port, _ = door
    body = json.dumps({"input": np.zeros(SHAPE).tolist()}).encode()
    req = (b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
           + str(len(body)).encode() + b"\r\n\r\n" + body)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(3):
            s.sendall(req)
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                data += s.recv(65536)
            assert data.startswith(b"HTTP/1.1 200"), data[:200]
            time.sleep(0.3)  # within the deadline each time: the connection stays open
        t = time.monotonic()
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Le")
        assert s.recv(65536) == b""  # closed, without an answer
        assert 0.1 < time.monotonic() - t < 1.5


@pytest.mark.parametrize("pieces", [1, 40], ids=["at once", "in 40 pieces"])
def test_headers_over_the_cap_get_431_and_the_connection_closes(door, pieces):
    """Request headers over 16 KB (in one send, or trickled in pieces): 431 and the connection closed, the
    server's memory unmoved and its health unhurt; a keep-alive connection's next request is capped the same."""
    from gencc.serving._http.limits import MAX_HEAD_BYTES

    port, _ = door
    big = b"POST /predict HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (MAX_HEAD_BYTES + 1024) + b"\r\n\r\n"
    r0 = rss_mb()
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            step = -(-len(big) // pieces)
            try:
                for i in range(0, len(big), step):
                    s.sendall(big[i:i + step])
            except OSError:  # closed before the rest was sent
                pass
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            assert data.startswith(b"HTTP/1.1 431") and b"connection: close" in data.lower(), data[:200]
    assert rss_mb() - r0 < 20
    body = json.dumps({"input": np.zeros(SHAPE).tolist()}).encode()
    req = (b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
           + str(len(body)).encode() + b"\r\n\r\n" + body)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(req)
        data = b""
        while not data.endswith(b"}"):
            data += s.recv(65536)
        assert data.startswith(b"HTTP/1.1 200"), data[:200]
        s.sendall(big)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        assert data.startswith(b"HTTP/1.1 431"), data[:200]
    assert healthy(port)


def test_poison_value_fails_only_its_own_request(door):
    """Two valid requests and one 1e39 request per group of K = 3, 30 rounds: the poison gets 422 at the door,
    every valid request 200 within 2 s, with the model's answer when its own worker gave it."""
    port, _ = door
    rng = np.random.default_rng(0)

    async def rounds():
        pool = HttpClient("127.0.0.1", port, max_connections=8, timeout=10)
        hdr = {"Content-Type": "application/json"}
        out = []
        for _ in range(30):
            xs = rng.uniform(-1, 1, size=(2, *SHAPE))
            raws = [pool.encode("POST", "/predict", json.dumps({"input": x.tolist()}).encode(), hdr) for x in xs]
            poison = pool.encode("POST", "/predict", ('{"input": ' + x_json("1e39") + "}").encode(), hdr)

            async def timed(raw):
                t = time.perf_counter()
                status, body = await pool.request(raw)
                return status, json.loads(body), time.perf_counter() - t

            res = await asyncio.gather(timed(raws[0]), timed(poison), timed(raws[1]))
            out.append((xs, res))
        pool.close()
        return out

    for xs, ((s0, b0, t0), (sp, bp, _), (s1, b1, t1)) in asyncio.run(rounds()):
        assert sp == 422 and "float32" in bp["detail"]
        assert (s0, s1) == (200, 200) and max(t0, t1) < 2.0, (b0, b1)
        for b, want in zip((b0, b1), tiny_model(xs), strict=True):
            if b["degraded"]:  # decoded from coded results (its accuracy is the gate's business, not the door's)
                assert np.isfinite(b["output"]).all() and len(b["output"]) == 3
            else:
                assert np.allclose(b["output"], want, atol=1e-5), (b, want)
    assert healthy(port)


def test_a_large_body_is_parsed_off_the_event_loop():
    """A body above parse_inline_bytes is parsed in a thread: /healthz answers while it is parsed."""
    def wide(x):
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1).mean(axis=1, keepdims=True)

    wide.batched = True
    svc = tiny_service(wide)
    app = create_app(svc, limits=Limits(max_batch=64, parse_inline_bytes=1024), in_shape=(8, 400))
    server, th, port = start_server(app)
    try:
        body = json.dumps({"inputs": np.full((64, 8, 400), 0.123456789).tolist()}).encode()  # ~4 MB
        assert len(body) < app.state.max_body_bytes
        import threading

        done = {}

        def send():
            done["r"] = post(port, body, path="/predict/batch")

        t = threading.Thread(target=send)
        t.start()
        time.sleep(0.05)
        assert healthy(port)
        t.join(30)
        assert done["r"][0] == 200
    finally:
        server.should_exit = True
        th.join(20)


def test_a_request_is_checked_once_by_the_door_schema(monkeypatch):
    """The request schema is the one check an HTTP request gets: the service takes the parsed array unchecked
    (its own check_input is for in-process callers), and the schema's refusals keep their messages."""
    from fastapi.testclient import TestClient

    svc = tiny_service()
    calls = []
    check = svc.check_input
    monkeypatch.setattr(svc, "check_input", lambda x: calls.append(x) or check(x))
    x = [[0.25, 0.5, 0.5, 0.5, 0.5], [0.1] * 5]
    with TestClient(create_app(svc, in_shape=SHAPE)) as c:
        ok = c.post("/predict", json={"input": x})
        bad = c.post("/predict", json={"input": [[1e39] + [0.5] * 4, [0.1] * 5]})
        short = c.post("/predict", json={"input": [[0.5] * 4, [0.1] * 5]})
    assert ok.status_code == 200 and np.allclose(ok.json()["output"], tiny_model(np.array([x]))[0], atol=1e-6)
    assert calls == []
    assert bad.status_code == 422 and "float32" in bad.json()["detail"], bad.json()
    assert short.status_code == 422 and "shape [2, 5]" in short.json()["detail"], short.json()
    assert svc.submit([[np.nan] * 5] * 2).result(5).status == 422 and len(calls) == 1  # in process: checked


def test_create_app_refuses_an_in_shape_the_service_does_not_take():
    svc = tiny_service()
    svc.in_shape = SHAPE
    with pytest.raises(ValueError, match=r"differs from the service's input shape \[2, 5\]"):
        create_app(svc, in_shape=(10,))
    svc.close()


def test_an_answers_writes_leave_together_and_a_close_sends_them_first():
    """`Coalesced` (the door's connections): writes wait for the answer's end (`flush`, one write to the
    socket's transport), or for the end of the event loop's step; closing sends what waits, aborting drops it."""
    from gencc.serving._http.limits import Coalesced

    class Transport:
        def __init__(self):
            self.log = []

        def write(self, data):
            self.log.append(data)

        def close(self):
            self.log.append("close")

        def abort(self):
            self.log.append("abort")

        def get_write_buffer_size(self):
            return 0

        def is_closing(self):
            return False

    async def run():
        loop = asyncio.get_running_loop()
        t = Transport()
        c = Coalesced(t, loop)
        c.write(b"HTTP/1.1 200 OK\r\n\r\n")
        c.write(b"")
        c.write(b"{}")
        assert t.log == [] and c.get_write_buffer_size() == 21 and not c.is_closing()
        c.flush()
        assert t.log == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
        c.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # no flush: it leaves at the end of this step
        await asyncio.sleep(0)
        assert t.log[1:] == [b"HTTP/1.1 100 Continue\r\n\r\n"]
        c.write(b"last")
        c.close()
        c.write(b"dropped")
        c.abort()
        await asyncio.sleep(0)
        assert t.log[2:] == [b"last", "close", "abort"]

    asyncio.run(run())
