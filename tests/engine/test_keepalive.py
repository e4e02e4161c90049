"""The replicas' keep-alive connections (`gencc.engine.keepalive`) against the standard library's HTTP server and
against a loopback server that answers with bytes the test writes (chunked bodies, bodies to the close,
informational answers, garbage, silence), each checked against what the bytes say."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gencc.engine.keepalive import KeepAlive, connections


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        out = json.dumps({"path": self.path, "body": body.decode(), "auth": self.headers.get("Authorization"),
                          "type": self.headers.get("Content-Type"), "port": self.client_address[1]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Answer", "Yes")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def echo():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def scripted(answers: list[bytes | None], close_after: bool = False) -> tuple[int, list[bytes]]:
    """A server answering the n-th request it reads with answers[n] (None: silence until the test ends);
    `close_after`: each connection closes after its answer. Returns its port and the requests it read."""
    lsock = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        while answers:
            conn, _ = lsock.accept()
            with conn:
                while answers:
                    buf = b""
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        buf += chunk
                    if not buf:
                        break
                    head, _, body = buf.partition(b"\r\n\r\n")
                    n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    while len(body) < n:
                        body += conn.recv(65536)
                    seen.append(head + b"\r\n\r\n" + body)
                    a = answers.pop(0)
                    if a is None:
                        time.sleep(1.0)
                        return
                    conn.sendall(a)
                    if close_after:
                        break
        lsock.close()

    threading.Thread(target=serve, daemon=True).start()
    return lsock.getsockname()[1], seen


def pool(port: int, read_s: float = 2.0) -> KeepAlive:
    return KeepAlive("127.0.0.1", port, 1.0, read_s, 4)


def test_requests_share_one_connection_and_carry_their_headers(echo) -> None:
    p = connections(f"http://u:pw@127.0.0.1:{echo}/pre", 1.0, 2.0, 4)
    try:
        answers = [p.post(f"/pre/v2/{i}", b"x" * i, {"Content-Type": "application/json"}) for i in range(5)]
    finally:
        p.close()
    bodies = [json.loads(body) for _, _, body in answers]
    assert [s for s, _, _ in answers] == [200] * 5 and all(h["x-answer"] == "Yes" for _, h, _ in answers)
    assert [b["path"] for b in bodies] == [f"/pre/v2/{i}" for i in range(5)]
    assert [b["body"] for b in bodies] == ["x" * i for i in range(5)]
    assert {b["auth"] for b in bodies} == {"Basic dTpwdw=="} and {b["type"] for b in bodies} == {"application/json"}
    assert len({b["port"] for b in bodies}) == 1  # one connection, kept alive


def test_chunked_informational_and_to_the_close_answers_are_read_whole() -> None:
    chunked = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n")
    sized = b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nInference-Header-Content-Length: 2\r\n\r\nbusy"
    port, seen = scripted([chunked, sized, b"HTTP/1.0 200 OK\r\n\r\nuntil the close"])
    p = pool(port)
    try:
        assert p.post("/a", b"{}", {})[::2] == (200, b"hello, world")
        status, headers, body = p.post("/b", b"[1]", {"Content-Type": "application/octet-stream"})
        assert (status, body, headers["inference-header-content-length"]) == (503, b"busy", "2")
        assert p.post("/c", b"", {}) == (200, {}, b"until the close")
    finally:
        p.close()
    assert seen[0].startswith(b"POST /a HTTP/1.1\r\nHost: 127.0.0.1:") and seen[0].endswith(
        b"Content-Length: 2\r\n\r\n{}")
    assert b"Content-Type: application/octet-stream\r\n" in seen[1] and seen[1].endswith(b"\r\n\r\n[1]")


def test_a_connection_the_server_closed_is_not_reused() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    port, seen = scripted([ok, ok, ok], close_after=True)  # closes without saying so
    p = pool(port)
    try:
        for _ in range(3):
            assert p.post("/", b"", {})[::2] == (200, b"ok")
            time.sleep(0.05)  # its close reaches this side
    finally:
        p.close()
    assert len(seen) == 3


NOT_HTTP = "not an HTTP answer "


@pytest.mark.parametrize(("answer", "error", "match"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", ConnectionError, NOT_HTTP + ".Expected HTTP/"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ConnectionError, NOT_HTTP + ".Invalid character"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", ConnectionError, "closed before the whole answer"),
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"0" * 70000 + b"\r\n\r\n", ConnectionError, "no end of its headers within"),
    (b"", ConnectionError, "closed"),
    (None, TimeoutError, "timed out"),
])
def test_what_is_not_an_answer_in_time_is_an_error(answer, error, match) -> None:
    port, _ = scripted([answer], close_after=True)
    p = pool(port, read_s=0.3)
    try:
        with pytest.raises(error, match=match):
            p.post("/", b"x", {})
    finally:
        p.close()


def test_a_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ConnectionError):
            pool(port).post("/", b"", {})
