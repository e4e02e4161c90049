"""The connections that carry a replica's infer requests (`gencc.engine.remote.Replica`).

For a plain-http replica, `KeepAlive`: plain sockets kept open between requests (HTTP/1.1 keep-alive), at most
`maxsize` of them idle, each request written in one send and its answer read by httptools' parser (llhttp, the
parser uvicorn and Node use). No pool manager, redirects, retries, proxies or content decoding: an infer request
needs none, and on every request of a proxy in front of a fleet those layers cost CPU (urllib3 about twice
`http.client`'s, and `http.client` parses headers with the email package). An https replica goes through
a urllib3 pool instead (`Urllib3Pool`: its TLS). Both answer `post(path, body, headers)` with (status, headers
with lower-case names, body) and raise the same errors: TimeoutError when the replica does not connect or answer
in time, ConnectionError when it refuses, resets or closes the connection, or sends what is not an HTTP answer,
RemoteError for another failure of the request.
"""

from __future__ import annotations

import base64
import select
import socket
from collections import deque
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import RemoteError


def _auth(base: str) -> dict[str, str]:
    """The Authorization header of credentials in `base` (user:password@host), as urllib3 sends them."""
    parts = urlsplit(base)
    if parts.username is None:
        return {}
    token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def connections(base: str, connect_s: float, read_s: float, maxsize: int) -> KeepAlive | Urllib3Pool:
    """The connections for the replica at `base` (http(s)://HOST:PORT[/prefix]), at most `maxsize` kept open."""
    parts = urlsplit(base)
    if parts.scheme == "https":
        return Urllib3Pool(base, connect_s, read_s, maxsize)
    return KeepAlive(parts.hostname or "", parts.port or 80, connect_s, read_s, maxsize, _auth(base))


#: bytes of an answer's status line and headers, at most
MAX_HEAD_BYTES = 65536


class _Answer:
    """An HTTP answer as httptools' parser reads it: its status, headers (lower-case names) and body; 1xx
    answers before it are skipped."""

    __slots__ = ("parser", "status", "headers", "body", "done", "heads", "keep")

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.status, self.headers, self.body, self.done, self.heads, self.keep = 0, {}, [], False, 0, False

    def on_message_begin(self) -> None:
        self.headers, self.body = {}, []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1").rstrip(" \t")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.heads += 1

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if not 100 <= self.status < 200:
            self.done, self.keep = True, self.parser.should_keep_alive()  # (reset once the callback returns)


class KeepAlive:
    """Keep-alive connections to one http server (see the module docstring): `post` takes an idle connection
    (one the server has closed meanwhile is dropped first) or opens one, writes the request in one send, reads
    the answer with httptools' parser (llhttp), and gives the connection back for the next request when the
    answer leaves it reusable; at most `maxsize` stay idle. Safe to share between threads."""

    def __init__(self, host: str, port: int, connect_s: float, read_s: float, maxsize: int,
                 headers: Mapping[str, str] = ()):
        self.host, self.port = host, int(port)
        self.connect_s, self.read_s, self.maxsize = float(connect_s), float(read_s), int(maxsize)
        self.headers = dict(headers)
        host_header = f"{host}:{self.port}" if ":" not in host else f"[{host}]:{self.port}"
        self._host = f"Host: {host_header}\r\n".encode("latin-1") + b"".join(
            f"{k}: {v}\r\n".encode("latin-1") for k, v in self.headers.items())
        self._idle: deque[socket.socket] = deque()
        self._closed = False

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """POST `body` to `path` with `headers`: (status, headers, body) of the answer (see the module
        docstring for the errors)."""
        import httptools

        head = b"".join((b"POST ", path.encode("latin-1"), b" HTTP/1.1\r\n", self._host,
                         b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers.items()),
                         b"Content-Length: %d\r\n\r\n" % len(body)))
        sock = self._take()
        keep = False
        try:
            sock.sendall(head + body if len(body) < 65536 else head)
            if len(body) >= 65536:
                sock.sendall(body)
            answer, head_bytes = _Answer(), 0
            while not answer.done:
                data = sock.recv(262144)
                if not answer.heads or 100 <= answer.status < 200:
                    head_bytes += len(data)
                    if head_bytes > MAX_HEAD_BYTES:
                        raise ConnectionError(f"not an HTTP answer (no end of its headers within {MAX_HEAD_BYTES} "
                                              "bytes)")
                if not data:
                    if answer.heads and "content-length" not in answer.headers \
                            and "transfer-encoding" not in answer.headers:
                        break  # a body that ends with the connection
                    raise ConnectionError("the connection closed before the whole answer")
                try:
                    answer.parser.feed_data(data)
                except httptools.HttpParserError as e:
                    if answer.done:  # bytes after the answer: the connection cannot be reused
                        break
                    why = str(e).removeprefix("HttpParserError: ")[:80]
                    raise ConnectionError(f"not an HTTP answer ({why})") from None
            else:
                keep = answer.keep
            return answer.status, answer.headers, b"".join(answer.body)
        except (TimeoutError, ConnectionError):  # refused, reset, closed, or no answer in time
            raise
        except OSError as e:
            raise RemoteError(f"{type(e).__name__}: {e}") from None
        finally:
            if keep and not self._closed and len(self._idle) < self.maxsize:
                self._idle.append(sock)
            else:
                sock.close()

    def _take(self) -> socket.socket:
        while True:
            try:
                sock = self._idle.pop()
            except IndexError:
                break
            if not _dropped(sock):
                return sock
            sock.close()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_s)
        except socket.gaierror as e:
            raise ConnectionError(f"cannot resolve {self.host!r}: {e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.read_s)
        return sock

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: the server closed it (or sent what no request asked)."""
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(0))


class Urllib3Pool:
    """`KeepAlive`'s interface over a urllib3 pool (an https replica): never retried, never through a proxy,
    credentials in the URL sent."""

    def __init__(self, base: str, connect_s: float, read_s: float, maxsize: int):
        import urllib3

        self.pool = urllib3.connection_from_url(base, maxsize=maxsize, headers=_auth(base), retries=False,
                                                timeout=urllib3.Timeout(connect=connect_s, read=read_s))

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        import urllib3.exceptions as u3

        try:
            r: Any = self.pool.urlopen("POST", path, body=body, headers=dict(headers))
            content = r.data
        except (u3.NewConnectionError, u3.ProtocolError) as e:  # refused, reset, closed: before any timeout
            raise ConnectionError(f"{type(e).__name__}: {e}") from None
        except u3.TimeoutError as e:
            raise TimeoutError(type(e).__name__) from None
        except u3.HTTPError as e:
            raise RemoteError(f"{type(e).__name__}: {e}") from None
        return r.status, {k.lower(): v for k, v in r.headers.items()}, content

    def close(self) -> None:
        self.pool.close()
