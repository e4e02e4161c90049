"""A small HTTP/1.1 keep-alive client on asyncio protocols, for the load generator (`gencc.loadgen.load`).

Why not httpx: at 84 req/s its per-request cost on a shared core made the client, not the server, the
bottleneck (p50 of seconds where the server's own histogram had every answer under 1 s). Here a request is one
pre-encoded bytes write on an idle connection, done synchronously by whoever sends it, and its answer is parsed
in the connection's `data_received` callback: no task, no stream reader, two event-loop wake-ups per request.
Connections are reused (an idle one is dropped before the server's keep-alive timeout would close it under a
request); a request that found its reused connection closed before any answer byte is retried once on a fresh
one. Answers need a Content-Length (uvicorn's always have one; chunked answers are refused as a protocol error).

`FixedServer` is the trivial server (one canned answer) the client's own cost is measured against.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import ClientError


class Pending:
    """One request in the client: its bytes, when it was sent (loop time) and what to call with the outcome,
    `done(status, body, error)` (status 0 and a ClientError when no answer came)."""

    __slots__ = ("raw", "done", "sent", "retried", "conn")

    def __init__(self, raw: bytes, done: Callable[[int, bytes, ClientError | None], None]):
        self.raw, self.done, self.sent, self.retried, self.conn = raw, done, 0.0, False, None


class _Conn(asyncio.Protocol):
    def __init__(self, client: HttpClient):
        self.client = client
        self.transport: Any = None
        self.buf = bytearray()
        self.current: Pending | None = None
        self.used = 0
        self.idle_since = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(self, p: Pending) -> None:
        self.current, p.conn = p, self
        p.sent = self.client.loop.time()
        self.used += 1
        self.transport.write(p.raw)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        p = self.current
        if p is None:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > 65536:
                self._fail(ClientError("RemoteProtocolError", "answer headers over 64 KiB"))
            return
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        length, close = 0, parts[0] != "HTTP/1.1"
        try:
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ValueError(f"bad status line {lines[0][:60]!r}")
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                k = k.strip().lower()
                if k == "content-length":
                    length = int(v)
                elif k == "connection":
                    close = close or v.strip().lower() == "close"
                elif k == "transfer-encoding":
                    raise ValueError("chunked answers are not supported")
        except ValueError as e:
            self._fail(ClientError("RemoteProtocolError", str(e)))
            return
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4:end + 4 + length])
        del self.buf[:end + 4 + length]
        self.current = None
        if close:
            self.transport.close()
        else:
            self.client._release(self)
        p.done(int(parts[1]), body, None)

    def _fail(self, err: ClientError) -> None:
        p, self.current = self.current, None
        self.transport.abort()
        if p is not None:
            p.done(0, b"", err)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(self)
        p, self.current = self.current, None
        if p is None:
            return
        if not self.buf and self.used > 1 and not p.retried:
            p.retried = True  # the server closed an idle connection as it was reused: once more, afresh
            self.client.send(p)
            return
        where = "inside the answer" if self.buf else "before answering"
        p.done(0, b"", ClientError("ReadError", f"server closed the connection {where}"))


class HttpClient:
    """Up to `max_connections` keep-alive connections to host:port on the running loop. `send(Pending)` sends
    at once on an idle connection (or a new one; past the maximum it waits for one to free up);
    `request(raw, timeout)` awaits (status, body). A request unanswered `timeout` s after it was sent fails
    with ReadTimeout and its connection is closed."""

    def __init__(self, host: str, port: int, max_connections: int = 512, timeout: float = 30.0,
                 idle_s: float = 2.0):
        self.host, self.port, self.timeout, self.idle_s = host, int(port), float(timeout), float(idle_s)
        self.max_connections = int(max_connections)
        self.loop = asyncio.get_running_loop()
        self._idle: list[_Conn] = []
        self._open: set[_Conn] = set()
        self._connecting = 0
        self._waiting: deque[Pending] = deque()
        self.opened = 0
        self._sweeper = self.loop.call_later(min(0.1, self.timeout), self._sweep)

    def encode(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
        """The bytes of one request (sent as is, so encode once, send many times)."""
        h = {"Host": f"{self.host}:{self.port}", "Content-Length": str(len(body)), **(headers or {})}
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        return head.encode("latin-1") + body

    def send(self, p: Pending) -> None:
        now = self.loop.time()
        while self._idle and not p.retried:  # a retry goes on a fresh connection
            c = self._idle.pop()
            if now - c.idle_since < self.idle_s and not c.transport.is_closing():
                c.write(p)
                return
            c.transport.close()
        if len(self._open) + self._connecting < self.max_connections:
            self._connecting += 1
            self.loop.create_task(self._connect(p))
        else:
            self._waiting.append(p)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        """Send `raw`; (status, body) of the answer, or ClientError."""
        fut = self.loop.create_future()

        def done(status: int, body: bytes, err: ClientError | None) -> None:
            if fut.done():
                return
            if err is not None:
                fut.set_exception(err)
            else:
                fut.set_result((status, body))

        self.send(Pending(raw, done))
        return await fut

    async def _connect(self, p: Pending) -> None:
        try:
            _, c = await self.loop.create_connection(lambda: _Conn(self), self.host, self.port)
        except OSError as e:
            self._connecting -= 1
            p.done(0, b"", ClientError("ConnectError", str(e) or type(e).__name__))
            self._next()
            return
        self._connecting -= 1
        self.opened += 1
        self._open.add(c)
        c.write(p)

    def _release(self, c: _Conn) -> None:
        if self._waiting:
            c.write(self._waiting.popleft())
        else:
            c.idle_since = self.loop.time()
            self._idle.append(c)

    def _lost(self, c: _Conn) -> None:
        self._open.discard(c)
        self._next()

    def _next(self) -> None:
        if self._waiting and len(self._open) + self._connecting < self.max_connections:
            self._connecting += 1
            self.loop.create_task(self._connect(self._waiting.popleft()))

    def _sweep(self) -> None:
        now = self.loop.time()
        for c in list(self._open):
            if c.current is not None and now - c.current.sent > self.timeout:
                c._fail(ClientError("ReadTimeout", f"no answer within {self.timeout:g} s"))
        self._sweeper = self.loop.call_later(min(0.1, self.timeout), self._sweep)

    def close(self) -> None:
        self._sweeper.cancel()
        for c in list(self._open):
            c.transport.close()
        self._idle.clear()


class FixedServer:
    """A trivial HTTP/1.1 keep-alive server on 127.0.0.1 (a free port) in a daemon thread, answering every
    request with `body` at once (after `delay_s`; with `per_connection`, a connection that already gave that
    many answers is closed on its next request, unanswered, as when a server's keep-alive timeout races a
    reuse): what the client's own cost is measured against. A context manager."""

    def __init__(self, body: bytes = b'{"output": [0.0], "scheme": "fixed", "degraded": false}',
                 delay_s: float = 0.0, per_connection: int | None = None):
        self.answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                       + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.delay_s, self.per_connection = delay_s, per_connection
        self.port = 0
        self.requests = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="gencc-fixed-server")

    def __enter__(self) -> FixedServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fixed server did not start within 10 s")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
        self._thread.join(5)

    async def _stop(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.get_running_loop().stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for ln in head.split(b"\r\n"):
                    if ln[:15].lower() == b"content-length:":
                        n = int(ln[15:])
                await reader.readexactly(n)
                if self.per_connection is not None and answered >= self.per_connection:
                    break  # closed under a request it will not answer, as a keep-alive timeout can
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                self.requests += 1
                answered += 1
                writer.write(self.answer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()
