"""A small Open Inference Protocol server for the tests: a real HTTP server on a free 127.0.0.1 port, in a thread,
serving a model the test gives (a numpy batch callable), whose faults the test switches on: `mode` "ok", "nan"
(answers NaN), "shape" (answers a wrong shape), "500" (answers 500), "garbage" (a body that is not JSON), "reset"
(closes the connection without answering), "unready" (503 to inference and to its ready route). `kill()` stops
it as a killed process stops: its open connections are closed (a request in flight gets no answer) and its port
then refuses connections."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def linear(X: np.ndarray) -> np.ndarray:
    """The tests' model: (B, 4) -> (B, 3), linear, so a linear code's decode is exact."""
    X = np.asarray(X, dtype=np.float64)
    return np.stack([X.sum(axis=1), 2 * X[:, 0] - X[:, -1], X[:, 1] - 0.5 * X[:, 2]], axis=1)


class Replica:
    """One replica of `model` named `name`, input `input_name` of `datatype` [-1, *in_shape], output `output_name`
    FP32 [-1, *out_shape]."""

    def __init__(self, model: Callable = linear, name: str = "lin", in_shape: tuple = (4,), out_shape: tuple = (3,),
                 datatype: str = "FP32", max_batch: int | None = 8, input_name: str = "x",
                 output_name: str = "y"):
        self.model, self.name, self.mode = model, name, "ok"
        self.in_shape, self.out_shape, self.datatype, self.max_batch = in_shape, out_shape, datatype, max_batch
        self.input_name, self.output_name = input_name, output_name
        self.calls = 0
        self.posts = 0  # infer requests received, answered or not
        self.batches: list[int] = []
        self.conns: set[socket.socket] = set()  # the open connections (kill closes them)
        self.lock = threading.Lock()
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms wait for an ACK

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with replica.lock:
                    replica.conns.add(self.connection)

            def finish(self) -> None:
                with replica.lock:
                    replica.conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:  # the connection was closed under it (kill)
                    pass

            def _send(self, status: int, body: Any, raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                base = f"/v2/models/{replica.name}"
                if self.path == base:
                    self._send(200, replica.metadata())
                elif self.path == base + "/ready":
                    self._send(503 if replica.mode == "unready" else 200, {})
                elif self.path == base + "/config" and replica.max_batch is not None:
                    self._send(200, {"name": replica.name, "max_batch_size": replica.max_batch})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                if self.path != f"/v2/models/{replica.name}/infer":
                    self._send(404, {"error": "not found"})
                    return
                replica.posts += 1
                mode = replica.mode
                if mode == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode in ("500", "unready"):
                    self._send(500 if mode == "500" else 503, {"error": "model failed"})
                    return
                if mode == "garbage":
                    self._send(200, None, raw=b"\x00not json")
                    return
                t = body["inputs"][0]
                x = np.asarray(t["data"], dtype=np.float64).reshape(t["shape"])
                replica.calls += 1
                replica.batches.append(len(x))
                y = np.asarray(replica.model(x), dtype=np.float32)
                if mode == "nan":
                    y = y * np.nan
                if mode == "shape":
                    y = y[:, :-1]
                data = [None if not np.isfinite(v) else float(v) for v in y.ravel()]
                self._send(200, {"model_name": replica.name, "outputs": [
                    {"name": replica.output_name, "datatype": "FP32", "shape": list(y.shape), "data": data}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *a: None  # type: ignore[method-assign]  # a connection closed by kill
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v2/models/{name}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def metadata(self) -> dict:
        return {"name": self.name, "versions": ["1"], "platform": "test",
                "inputs": [{"name": self.input_name, "datatype": self.datatype, "shape": [-1, *self.in_shape]}],
                "outputs": [{"name": self.output_name, "datatype": "FP32", "shape": [-1, *self.out_shape]}]}

    def kill(self) -> None:
        """Stop serving, close the listening socket (new connections are refused) and every open connection (a
        request in flight, or the next one on a kept-alive connection, gets no answer)."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def dead_url(name: str = "lin") -> str:
    """The URL of a replica on a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v2/models/{name}"
