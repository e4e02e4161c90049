"""Shared by the serving tests: a real uvicorn server on a free loopback port in a thread, and a linear model."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


def start_server(app: Any, wait_s: float = 30.0) -> tuple[Any, threading.Thread, int]:
    """Serve `app` on a free 127.0.0.1 port in a daemon thread; returns (server, thread, port) once it has
    started. Stop it with `server.should_exit = True` and join the thread."""
    from gencc.serving.app import start_in_thread

    return start_in_thread(app, wait_s=wait_s)


def lin(x: Any) -> np.ndarray:
    """A linear model: decodes of linear codes are then exact, checked against the direct answer."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    return np.stack([x.sum(axis=1), 2 * x[:, 0] - x[:, -1]], axis=1)
