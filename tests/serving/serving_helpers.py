"""Shared by the serving tests: a real uvicorn server on a free loopback port in a thread, and a linear model."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import numpy as np


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(app: Any, wait_s: float = 10.0) -> tuple[Any, threading.Thread, int]:
    """Serve `app` on 127.0.0.1 in a daemon thread; returns (server, thread, port) once it has started.
    Stop it with `server.should_exit = True` and join the thread."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    t_end = time.monotonic() + wait_s
    while not server.started and time.monotonic() < t_end:
        time.sleep(0.02)
    assert server.started, f"uvicorn did not start on port {port} within {wait_s} s"
    return server, th, port


def lin(x: Any) -> np.ndarray:
    """A linear model: decodes of linear codes are then exact, checked against the direct answer."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    return np.stack([x.sum(axis=1), 2 * x[:, 0] - x[:, -1]], axis=1)
