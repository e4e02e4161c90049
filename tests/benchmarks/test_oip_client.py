"""The benchmarks' lean load client (benchmarks/oip_client.py) against servers it did not write: uvicorn serving a
small ASGI app (keep-alive, a chunked answer, Connection: close), and a port where nothing listens."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import numpy as np
import pytest

uvicorn = pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def oc(load_benchmark):
    return load_benchmark("oip_client")


async def app(scope, receive, send):
    """Echoes the JSON body's "x" doubled; path /chunked answers in two chunks, /close closes the connection."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    out = json.dumps({"y": 2 * json.loads(body)["x"]}).encode()
    path = scope["path"]
    headers = [(b"content-type", b"application/json")]
    if path == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out[:3], "more_body": True})
        await send({"type": "http.response.body", "body": out[3:]})
        return
    headers.append((b"content-length", str(len(out)).encode()))
    if path == "/close":
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 404 if path == "/missing" else 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", http="h11", lifespan="off"))
    t = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    t.join(10)


def test_answers_keep_alive_chunked_and_close(oc, server) -> None:
    async def run():
        pool = oc.Pool()
        try:
            out = []
            for path, x in (("/a", 1), ("/a", 2), ("/chunked", 3), ("/close", 4), ("/a", 5), ("/missing", 6)):
                where, data = oc.request(server + path, json.dumps({"x": x}).encode())
                status, body = await pool.exchange(where, data)
                out.append((status, json.loads(body)["y"]))
            return out, sum(len(c) for c in pool._idle.values())
        finally:
            pool.close()

    out, idle = asyncio.run(run())
    assert out == [(200, 2), (200, 4), (200, 6), (200, 8), (200, 10), (404, 12)]
    assert idle == 1  # one connection carried them all, but for the one the server closed


def test_many_at_once_each_get_their_own_answer(oc, server) -> None:
    async def run():
        pool = oc.Pool()
        try:
            reqs = [oc.request(server + "/a", json.dumps({"x": i}).encode()) for i in range(200)]
            return await asyncio.gather(*(pool.exchange(w, d) for w, d in reqs))
        finally:
            pool.close()

    got = asyncio.run(run())
    assert [json.loads(b)["y"] for _, b in got] == list(np.arange(200) * 2)


def test_a_refused_connection_is_a_failure_not_a_hang(oc) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    where, data = oc.request(f"http://127.0.0.1:{port}/a", b"{}")
    with pytest.raises(oc.Failed, match="connect"):
        asyncio.run(oc.Pool().exchange(where, data))


def test_the_page_says_how_late_the_client_wrote_its_requests(load_benchmark) -> None:
    ups = load_benchmark("upstreams")
    raw = [{"late": list(np.linspace(0, 2.0, 1001))}, {"late": [0.5] * 999 + [40.0]}]
    text = ups.kept_to_schedule(raw)
    worst = max(np.percentile(np.linspace(0, 2.0, 1001), 99.9), np.percentile([0.5] * 999 + [40.0], 99.9))
    assert f"within {worst:.1f} ms" in text and "the latest 40 ms" in text
    assert ups.kept_to_schedule([{"lat": [1.0]}]) == ""
