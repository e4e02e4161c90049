"""Shared by the serving tests: a real uvicorn server on a free loopback port in a thread, and a linear model."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


def start_server(app: Any, wait_s: float = 30.0) -> tuple[Any, threading.Thread, int]:
    """Serve `app` on a free 127.0.0.1 port in a daemon thread; returns (server, thread, port) once it has
    started. Stop it with `server.should_exit = True` and join the thread."""
    from gencc.serving import start_in_thread

    return start_in_thread(app, wait_s=wait_s)


def lin(x: Any) -> np.ndarray:
    """A linear model: decodes of linear codes are then exact, checked against the direct answer."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    return np.stack([x.sum(axis=1), 2 * x[:, 0] - x[:, -1]], axis=1)


def serve_until_quarantined(svc: Any, X: Any, rounds: int = 8, timeout: float = 120.0) -> None:
    """Submit the inputs X in rounds until the checked service quarantines a worker (at most `rounds`); close it;
    assert every answer is 200 and every exact answer equals f (`svc.workload.f`), so no wrong result got out."""
    reqs: list = []
    try:
        for _ in range(rounds):
            reqs += [f.result(timeout=timeout) for f in [svc.submit(x) for x in X]]
            if svc.dispatcher.quarantined_view:
                break
    finally:
        svc.close()
    F = svc.workload.f(X)
    assert [r.status for r in reqs] == [200] * len(reqs)
    assert all(np.allclose(r.output, F[i % len(X)], rtol=1e-3, atol=1e-3) for i, r in enumerate(reqs)
               if not r.degraded)
