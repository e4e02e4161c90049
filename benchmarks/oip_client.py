"""A lean HTTP/1.1 client for load: the benchmark's requests over raw asyncio streams, keep-alive, nothing else.

A load client must not be the bottleneck it measures. httpx's asyncio client spends about a millisecond of CPU
per request; on a 2-core machine shared with the fleet and the front end, at 100+ requests per second it fell
behind its own schedule by seconds while the server it measured answered within its usual time, and the delay
read as the server's latency. This client writes pre-encoded requests on kept-alive connections and reads the
answer's status line, headers and Content-Length body (or a chunked one): a few tens of microseconds per request.
It shares no code with gencc.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

#: the most header bytes an answer may carry
MAX_HEAD = 64 * 1024


class Failed(Exception):
    """The exchange failed: the connection was refused, reset or closed, or the answer was not HTTP/1.1."""


def request(url: str, body: bytes, content_type: str = "application/json") -> tuple[tuple[str, int], bytes]:
    """((host, port), the bytes of a POST of `body` to `url`), encoded once and sent as often as wanted."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = (f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    return (host, port), head + body


class Pool:
    """Kept-alive connections per (host, port): `exchange` takes an idle one or opens one, and keeps it after a
    whole answer that does not close it."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def exchange(self, where: tuple[str, int], data: bytes) -> tuple[int, bytes]:
        """Send `data` (a whole request) to `where`; (status, body) of the answer. Raises Failed."""
        idle = self._idle.setdefault(where, [])
        fresh = not idle
        if fresh:
            try:
                reader, writer = await asyncio.open_connection(*where)
            except OSError as e:
                raise Failed(f"connect: {e}") from None
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            reader, writer = idle.pop()
        try:
            writer.write(data)
            status, body, keep = await _answer(reader)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as e:
            writer.close()
            if not fresh:  # the server closed an idle connection meanwhile: once more on a new one
                return await self.exchange(where, data)
            raise Failed(f"{type(e).__name__}: {e}") from None
        except BaseException:  # cancelled (a timeout): the half-used connection is closed, never reused
            writer.close()
            raise
        if keep:
            idle.append((reader, writer))
        else:
            writer.close()
        return status, body

    def close(self) -> None:
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
        self._idle.clear()


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEAD:
        raise ValueError("answer head too large")
    lines = head.decode("latin-1").split("\r\n")
    version, code = lines[0].split(" ", 2)[:2]
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x answer: {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            parts.append(chunk[:-2])
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    return int(code), body, keep
