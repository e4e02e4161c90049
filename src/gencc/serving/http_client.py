"""A small HTTP/1.1 keep-alive client on raw asyncio streams, for the load generator (`gencc.serving.load`).

Why not httpx: at 84 req/s its per-request cost on a shared core made the client, not the server, the
bottleneck (p50 of seconds where the server's own histogram had every answer under 1 s). Here a request is
one pre-encoded bytes write and a header block read; connections are reused (an idle one is dropped before
the server's keep-alive timeout would close it under a request), and a request that found its reused
connection closed before any answer byte is retried once on a fresh one.

`FixedServer` is the trivial server (one canned answer) the client's own cost is measured against.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any


class ClientError(Exception):
    """A request that got no HTTP answer; `kind` names how (ConnectError, ReadError, WriteError,
    RemoteProtocolError, ReadTimeout), as the CSV's error column shows it."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class _Conn:
    __slots__ = ("reader", "writer", "idle_since", "uses")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.idle_since, self.uses = reader, writer, 0.0, 0


class ConnectionPool:
    """Up to `max_connections` keep-alive connections to host:port; `request` sends one pre-encoded request
    (bytes from `encode`) and returns (status, body)."""

    def __init__(self, host: str, port: int, max_connections: int = 512, idle_s: float = 2.0):
        self.host, self.port, self.idle_s = host, int(port), float(idle_s)
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(max_connections)
        self.opened = 0

    def encode(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
        """The bytes of one request (sent as is, so encode once, send many times)."""
        h = {"Host": f"{self.host}:{self.port}", "Content-Length": str(len(body)), **(headers or {})}
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        return head.encode("latin-1") + body

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as e:
            raise ClientError("ConnectError", str(e) or type(e).__name__) from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opened += 1
        return _Conn(reader, writer)

    def _take(self, now: float) -> _Conn | None:
        while self._idle:
            c = self._idle.pop()
            if now - c.idle_since < self.idle_s and not c.writer.is_closing():
                return c
            c.writer.close()
        return None

    async def request(self, raw: bytes, timeout: float) -> tuple[int, bytes]:
        """Send `raw`; (status, body) of the answer, or ClientError (no answer within `timeout` s included)."""
        async with self._slots:
            try:
                return await asyncio.wait_for(self._request(raw), timeout)
            except asyncio.TimeoutError:
                raise ClientError("ReadTimeout", f"no answer within {timeout:g} s") from None

    async def _request(self, raw: bytes) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        c = self._take(loop.time())
        for attempt in (0, 1):
            reused = c is not None
            if c is None:
                c = await self._connect()
            try:
                status, body, keep = await self._exchange(c, raw)
            except _Stale:
                c.writer.close()
                c = None
                if reused and attempt == 0:
                    continue  # the server closed an idle connection just as it was reused: once more, afresh
                raise ClientError("ReadError", "server closed the connection before answering") from None
            except BaseException:
                c.writer.close()
                raise
            if keep:
                c.idle_since = loop.time()
                self._idle.append(c)
            else:
                c.writer.close()
            return status, body
        raise AssertionError("unreachable")

    async def _exchange(self, c: _Conn, raw: bytes) -> tuple[int, bytes, bool]:
        try:
            c.writer.write(raw)
            head = await c.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise _Stale from None
            raise ClientError("ReadError", "connection closed inside the answer's headers") from None
        except (ConnectionResetError, BrokenPipeError):
            raise _Stale from None
        except asyncio.LimitOverrunError:
            raise ClientError("RemoteProtocolError", "answer headers over 64 KiB") from None
        except OSError as e:
            raise ClientError("ReadError", str(e) or type(e).__name__) from None
        c.uses += 1
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ClientError("RemoteProtocolError", f"bad status line {lines[0][:60]!r}")
        headers = {}
        for ln in lines[1:]:
            k, sep, v = ln.partition(":")
            if sep:
                headers[k.strip().lower()] = v.strip()
        try:
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = await self._chunked(c.reader)
            else:
                body = await c.reader.readexactly(int(headers.get("content-length", "0")))
        except (asyncio.IncompleteReadError, OSError) as e:
            raise ClientError("ReadError", f"connection lost inside the answer's body ({type(e).__name__})") from None
        except ValueError:
            raise ClientError("RemoteProtocolError", "bad Content-Length or chunk size") from None
        keep = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
        return int(parts[1]), body, keep

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> bytes:
        out = []
        while True:
            n = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if n == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(out)
            out.append(await reader.readexactly(n))
            await reader.readexactly(2)

    async def close(self) -> None:
        for c in self._idle:
            c.writer.close()
        self._idle.clear()


class _Stale(Exception):
    pass


class FixedServer:
    """A trivial HTTP/1.1 keep-alive server on 127.0.0.1 (a free port) in a daemon thread, answering every
    request with `body` at once: what the client's own cost is measured against. Use as a context manager."""

    def __init__(self, body: bytes = b'{"output": [0.0], "scheme": "fixed", "degraded": false}'):
        self.answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                       + str(len(body)).encode() + b"\r\n\r\n" + body)
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
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for ln in head.split(b"\r\n"):
                    if ln[:15].lower() == b"content-length:":
                        n = int(ln[15:])
                await reader.readexactly(n)
                self.requests += 1
                writer.write(self.answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            time.sleep(0)
            loop.close()
