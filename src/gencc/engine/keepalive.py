"""The connections that carry a replica's infer requests (`gencc.engine.remote.Replica`).

For a plain-http replica, `KeepAlive`: the standard library's `http.client` connections, kept open between
requests (HTTP/1.1 keep-alive), at most `maxsize` of them idle. No pool manager, redirects, retries, proxies or
content decoding: an infer request needs none, and on loopback those layers of urllib3 cost about twice
`http.client`'s CPU per request, on every request of a proxy in front of a fleet. An https replica goes through
a urllib3 pool instead (`Urllib3Pool`: its TLS). Both answer `post(path, body, headers)` with (status, headers
with lower-case names, body) and raise the same errors: TimeoutError when the replica does not connect or answer
in time, ConnectionError when it refuses, resets or closes the connection, or sends what is not an HTTP answer,
RemoteError for another failure of the request.
"""

from __future__ import annotations

import base64
import http.client
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


class KeepAlive:
    """Keep-alive `http.client` connections to one http server (see the module docstring): `post` takes an idle
    connection (one the server has closed meanwhile is dropped first) or opens one, and gives it back for the next
    request when its answer leaves it reusable; at most `maxsize` stay idle. Safe to share between threads."""

    def __init__(self, host: str, port: int, connect_s: float, read_s: float, maxsize: int,
                 headers: Mapping[str, str] = ()):
        self.host, self.port = host, int(port)
        self.connect_s, self.read_s, self.maxsize = float(connect_s), float(read_s), int(maxsize)
        self.headers = dict(headers)
        self._idle: deque[http.client.HTTPConnection] = deque()
        self._closed = False

    def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """POST `body` to `path` with `headers`: (status, headers, body) of the answer (see the module
        docstring for the errors)."""
        conn = self._take()
        keep = False
        try:
            conn.request("POST", path, body=body, headers={**self.headers, **headers})
            r = conn.getresponse()
            content = r.read()
            keep = not r.will_close
            return r.status, {k.lower(): v for k, v in r.getheaders()}, content
        except (TimeoutError, ConnectionError):  # refused, reset, closed, or no answer in time
            raise
        except http.client.HTTPException as e:  # not an HTTP answer, or not a whole one: the connection is closed
            raise ConnectionError(f"not an HTTP answer ({type(e).__name__}: {str(e)[:80]})") from None
        except OSError as e:
            raise RemoteError(f"{type(e).__name__}: {e}") from None
        finally:
            if keep and not self._closed and len(self._idle) < self.maxsize:
                self._idle.append(conn)
            else:
                conn.close()

    def _take(self) -> http.client.HTTPConnection:
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                break
            if conn.sock is not None and not _dropped(conn.sock):
                conn.sock.settimeout(self.read_s)
                return conn
            conn.close()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_s)
        try:
            conn.connect()
        except socket.gaierror as e:
            raise ConnectionError(f"cannot resolve {self.host!r}: {e}") from None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sock.settimeout(self.read_s)
        return conn

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
