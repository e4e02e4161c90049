"""Limits at the HTTP door, before any parsing: API key, Content-Type, body size and a read deadline.

`DoorGuard` is an ASGI middleware. On every request it checks the API key when one is set (header
`Authorization: Bearer KEY` or `X-API-Key: KEY`, compared in constant time; 401 otherwise). On POST to the
prediction routes it refuses a Content-Type other than UTF-8 JSON (415), a declared Content-Length over the
limit (413, nothing read), and reads the body itself: counted as it arrives, so a chunked body is cut off at the
limit (413), within `read_timeout_s` of the headers (408 for a slow or half-sent body). A refusal carries
`Connection: close`, so the server drops the connection instead of keeping a half-read one open; before it
closes, what the client is still sending is read and dropped for up to a second (bounded), so the client reads
the refusal instead of a connection reset.

`uvicorn_options` adds what an ASGI middleware cannot see: a deadline for request headers (`HeaderDeadline`,
a connection whose headers have not arrived within `read_timeout_s` is closed), a cap on their size (431) and the
keep-alive timeout.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import BodyTooLarge, ClientDisconnected

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """What the door accepts. `max_body_bytes` None: derived from the model's input shape and `max_batch`
    (`gencc.serving._http.schemas.body_bytes_bound`); `api_key` None: no authentication (loopback only)."""

    max_batch: int = 64
    max_body_bytes: int | None = None
    read_timeout_s: float = 10.0
    api_key: str | None = field(default=None, repr=False)
    #: bodies larger than this are parsed in a thread, off the event loop
    parse_inline_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch}")
        if self.max_body_bytes is not None and self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if not self.read_timeout_s > 0:
            raise ValueError(f"read_timeout_s must be positive, got {self.read_timeout_s}")
        if self.api_key is not None and len(self.api_key) < 8:
            raise ValueError("an API key must have at least 8 characters")


async def reply(send: Send, status: int, detail: str, close: bool = True,
                extra: tuple[tuple[bytes, bytes], ...] = (), drain: Receive | None = None,
                drain_s: float = 1.0, drain_bytes: int = 64 * 2 ** 20, key: str = "detail") -> None:
    """Send a JSON {key: detail} answer straight from the middleware. With `drain` (the request's receive),
    the answer goes out first, then up to `drain_bytes` of the unread body are read and dropped for up to
    `drain_s` before the answer ends and the connection closes: a client still sending sees the answer, not a
    reset (closing a socket with unread input resets it)."""
    body = json.dumps({key: detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if drain is None:
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.body", "body": body, "more_body": True})

    async def discard() -> None:
        n = 0
        while n < drain_bytes:
            msg = await drain()
            n += len(msg.get("body", b""))
            if msg["type"] != "http.request" or not msg.get("more_body", False):
                return

    try:
        await asyncio.wait_for(discard(), drain_s)
    except asyncio.TimeoutError:
        pass
    await send({"type": "http.response.body", "body": b""})


def authorized(headers: dict[bytes, bytes], key: bytes) -> bool:
    """Whether the request carries `key` (Bearer token or X-API-Key), compared in constant time."""
    given = headers.get(b"x-api-key", b"")
    auth = headers.get(b"authorization", b"")
    if auth[:7].lower() == b"bearer ":
        given = auth[7:].strip()
    return hmac.compare_digest(given, key)


def _json_content_type(value: bytes) -> bool:
    kind, *params = value.decode("latin-1").split(";")
    if kind.strip().lower() != "application/json":
        return False
    for p in params:
        name, _, v = p.partition("=")
        if name.strip().lower() == "charset" and v.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


def _protocol_content_type(value: bytes) -> bool:
    """The Open Inference Protocol's infer bodies: JSON, binary tensors after a JSON header, or no Content-Type
    (tritonclient sends none)."""
    return not value.strip() or value.split(b";")[0].strip().lower() == b"application/octet-stream" or \
        _json_content_type(value)


class DoorGuard:
    """ASGI middleware applying `Limits` (see the module docstring) to `body_paths` (POST) and, for the key, to
    every path. POST under `protocol_prefix` (the Open Inference Protocol's routes, `gencc.serving.v2`) is
    guarded too, its body may also be binary (application/octet-stream, or no Content-Type), and every refusal
    under it reads {"error": ...}, that protocol's form."""

    def __init__(self, app: Callable, limits: Limits, max_body_bytes: int,
                 body_paths: tuple[str, ...] = ("/predict", "/predict/batch"),
                 on_refuse: Callable[[int], None] | None = None, protocol_prefix: str | None = None):
        self.app, self.limits, self.max_body = app, limits, int(max_body_bytes)
        self.on_refuse, self.prefix = on_refuse, protocol_prefix
        self.key = limits.api_key.encode() if limits.api_key else None
        self.body_paths = frozenset(body_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        path = scope["path"]
        protocol = self.prefix is not None and (path + "/").startswith(self.prefix)

        async def refuse(status: int, detail: str, **kw: Any) -> None:
            if self.on_refuse is not None:
                self.on_refuse(status)
            await reply(send, status, detail, key="error" if protocol else "detail", **kw)

        await self._guard(scope, receive, send, refuse, protocol)

    async def _guard(self, scope: Scope, receive: Receive, send: Send, refuse: Callable[..., Awaitable[None]],
                     protocol: bool = False) -> None:
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        # a client waiting for "100 Continue" has not sent its body: nothing to drain (and no 100 after a refusal)
        drain = None if headers.get(b"expect", b"").lower() == b"100-continue" else receive
        if self.key is not None and not authorized(headers, self.key):
            await refuse(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                         extra=((b"www-authenticate", b"Bearer"),), drain=drain)
            return
        if scope["method"] != "POST" or not (protocol or scope["path"] in self.body_paths):
            await self.app(scope, receive, send)
            return
        if protocol and not _protocol_content_type(headers.get(b"content-type", b"")):
            await refuse(415, "Content-Type must be application/json (UTF-8) or application/octet-stream (binary "
                              "tensors)", drain=drain)
            return
        if not protocol and not _json_content_type(headers.get(b"content-type", b"")):
            await refuse(415, "Content-Type must be application/json (UTF-8)", drain=drain)
            return
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await refuse(400, "Content-Length must be a whole number of bytes")
                return
            if int(declared) > self.max_body:
                await refuse(413, f"body of {int(declared)} bytes is over this server's limit of "
                                  f"{self.max_body} bytes", drain=drain)
                return
        try:
            body = await self._read_within(receive, self.limits.read_timeout_s)
        except asyncio.TimeoutError:
            await refuse(408, f"the body did not arrive within {self.limits.read_timeout_s:g} s")
            return
        except BodyTooLarge:
            await refuse(413, f"body is over this server's limit of {self.max_body} bytes", drain=receive)
            return
        except ClientDisconnected:
            return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_within(self, receive: Receive, timeout: float) -> bytes:
        """`_read` within `timeout` seconds (asyncio.TimeoutError after), on the request's own task: a timer
        that cancels it, as `asyncio.timeout` does (3.11+), not `asyncio.wait_for`'s task per request and the
        event-loop turn it waits to start."""
        task = asyncio.current_task()
        if task is None:  # not in a task (a test driving the middleware by hand): the general form
            return await asyncio.wait_for(self._read(receive), timeout)
        fired = []

        def expire() -> None:
            fired.append(True)
            task.cancel()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            return await self._read(receive)
        except asyncio.CancelledError:
            if not fired:
                raise
            uncancel = getattr(task, "uncancel", None)  # 3.11+: this cancellation was ours, not the caller's
            if uncancel is not None:
                uncancel()
            raise asyncio.TimeoutError from None
        finally:
            timer.cancel()

    async def _read(self, receive: Receive) -> bytes:
        parts, n = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise ClientDisconnected
            chunk = msg.get("body", b"")
            n += len(chunk)
            if n > self.max_body:
                raise BodyTooLarge
            parts.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(parts)


class Coalesced:
    """A connection's transport whose writes go out together: an answer's head and body (two writes by uvicorn's
    HTTP protocols: two sends, two TCP segments, two wake-ups of the client) leave in one send when the answer is
    complete (`flush`), and any other write (a 100 Continue, an error) at the end of the event loop's step. The
    rest is the transport's own."""

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop):
        self.transport, self.loop, self.out = transport, loop, []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self.out:
            self.loop.call_soon(self.flush)
        self.out.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what was written since the last flush."""
        if self.out:
            data = self.out[0] if len(self.out) == 1 else b"".join(self.out)
            self.out.clear()
            self.transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(map(len, self.out))

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self.out.clear()
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


#: bytes of a request's line and headers, at most (more: 431 and the connection closed)
MAX_HEAD_BYTES = 16 * 1024


def header_deadline_protocol(read_timeout_s: float, max_head_bytes: int = MAX_HEAD_BYTES) -> type:
    """uvicorn's httptools protocol (llhttp, C) with a deadline for request headers: a connection whose next
    request's headers have not all arrived `read_timeout_s` after it opened (or after its last answer) is
    closed; and a cap on their size: a request line and headers over `max_head_bytes` get 431 and the connection
    is closed (what is buffered is bounded by the cap and one read). Its writes go through `Coalesced` (an
    answer in one send)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderDeadline(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.transport = Coalesced(transport, self.loop)  # what the requests' cycles write to
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                # asyncio sets it only when the listening socket's proto says TCP (one made with proto 0, as
                # an inherited or pre-bound socket may be, would run Nagle's algorithm: ~40 ms per keep-alive
                # answer against a client's delayed ACKs)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._timer: Any = None
            self._heading, self._head_bytes = True, 0  # reading a request's head, and its bytes so far
            self._head_size, self._too_big, self._refused = 0, False, False
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused:  # after a 431: read and dropped until the connection closes
                return
            if self._heading:
                self._head_bytes += len(data)
            super().data_received(data)
            if self._heading and self._head_bytes > max_head_bytes and not self._refused:
                self._refuse_head()  # a head still incomplete past the cap: what is buffered stays bounded

        def _refuse_head(self) -> None:
            msg = b"request line and headers over %d bytes" % max_head_bytes
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
                                 b"charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                                 % (len(msg), msg))
            # the answer and a half-close now; what the client is still sending is read and dropped for up to a
            # second before the connection closes, so it reads the answer instead of a reset
            self._refused = True
            self.transport.write_eof()
            self.loop.call_later(1.0, self.transport.close)

        def send_400_response(self, msg: str) -> None:
            if self._too_big:  # the parser stopped at the cap (`_count`)
                if not self._refused:
                    self._refuse_head()
            else:
                super().send_400_response(msg)

        def on_message_begin(self) -> None:
            self._head_size = 0
            super().on_message_begin()

        def _count(self, n: int) -> None:
            # a whole head that arrived in one read: its line and headers counted exactly as they are parsed
            self._head_size += n
            if self._head_size > max_head_bytes:
                self._too_big = True
                raise ValueError("request head too large")  # stops the parser: send_400_response answers 431

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._heading = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._heading, self._head_bytes = True, 0  # the next request's head: counted from its next read

        def on_response_complete(self) -> None:
            self.transport.flush()  # the whole answer, in one send
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            # one timer per connection: an answer moves the deadline, and the timer, when it fires, re-arms
            # for the deadline of the latest answer (not a new timer per answer: at hundreds of answers a
            # second those filled the event loop's timer heap)
            self._due = self.loop.time() + read_timeout_s
            if self._timer is None:
                self._timer = self.loop.call_at(self._due, self._deadline)

        def _deadline(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request in progress: its answer arms the next deadline
            if self.loop.time() < self._due:  # answered since the timer was set: wait for the latest deadline
                self._timer = self.loop.call_at(self._due, self._deadline)
                return
            self.transport.close()

    return HeaderDeadline


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """uvicorn.Config / uvicorn.run keywords applying `limits` below the ASGI app."""
    return {"http": header_deadline_protocol(limits.read_timeout_s), "timeout_keep_alive": 5}
