"""Service.health and the routes that read it (/healthz, /v2/health/ready, /metrics) tell the workers apart: alive,
being replaced, dead for good; workers re-created (`restarts`) apart from the tasks lost with them
(`lost_tasks`); ready only while the live workers cover what the scheme uses at once. On threads here; on Ray
actors killed by PID in tests/engine/ray/test_ray_reliability.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from gencc.engine import ThreadBackend, Workers
from gencc.faults import Faults, ServiceTimes
from gencc.serving import Service, make_dispatcher
from gencc.serving.service import worker_states

from .serving_helpers import lin

IN = (2, 3)


def crashing_service(restart_s: float | None) -> Service:
    """Two thread workers on which every task crashes its worker; a crashed worker is re-created after
    `restart_s` seconds (None: never)."""
    pool = Workers(2, ThreadBackend({"f": lin}, dtype=np.float32), ServiceTimes(0.05), faults=Faults(crash_p=1.0),
                   restart_s=restart_s)
    svc = Service(pool, lambda env: make_dispatcher("replication", env))
    svc.in_shape = IN
    return svc


def crash_both_workers_under_three_requests(svc: Service) -> list:
    """Three requests at once, two copies each: each worker's first task crashes it, and the tasks queued behind
    it by then are lost with it (all six on a quiet machine; a request submitted after both crashed is answered
    503 at once, sending none). The answered requests."""
    x = np.zeros(IN, np.float32)
    reqs = [f.result(timeout=10) for f in [svc.submit(x) for _ in range(3)]]
    assert all(r.status != 200 for r in reqs)
    return reqs


def lost(reqs: list) -> int:
    """The requests' tasks that failed with their worker, counted from the requests themselves."""
    return sum(t.reason == "crash" for r in reqs for t in r.tasks)


def test_a_crashed_worker_is_replacing_then_alive_and_counted_once_while_its_lost_tasks_count_apart() -> None:
    svc = crashing_service(restart_s=0.5)
    try:
        h = svc.health()
        assert (h["status"], h["alive"], h["replacing"], h["dead"], h["restarts"], h["lost_tasks"]) == \
            ("ok", 2, 0, 0, 0, 0)
        reqs = crash_both_workers_under_three_requests(svc)
        h = svc.health()
        assert (h["status"], h["alive"], h["replacing"], h["live"], h["needed"]) == ("down", 0, 2, 0, 2), h
        n_lost = lost(reqs)  # at least each worker's own task
        assert (h["restarts"], h["lost_tasks"]) == (0, n_lost) and 2 <= n_lost <= 6  # nothing re-created yet
        deadline = time.monotonic() + 10
        while svc.health()["alive"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        h = svc.health()
        assert (h["status"], h["alive"], h["replacing"], h["restarts"], h["lost_tasks"]) == ("ok", 2, 0, 2, n_lost), h
    finally:
        svc.close()


def test_a_worker_that_is_never_re_created_is_dead() -> None:
    svc = crashing_service(restart_s=None)
    try:
        crash_both_workers_under_three_requests(svc)
        time.sleep(0.2)
        h = svc.health()
        assert (h["alive"], h["replacing"], h["dead"], h["restarts"], h["status"]) == (0, 0, 2, 0, "down"), h
        assert worker_states(svc.pool) == ["dead", "dead"]
    finally:
        svc.close()


def test_a_pool_that_knows_its_workers_says_so_itself() -> None:
    pool = SimpleNamespace(worker_states=lambda: ["alive", "replacing", "dead"], dead=np.zeros(3, bool))
    assert worker_states(pool) == ["alive", "replacing", "dead"]
    assert worker_states(SimpleNamespace(dead=np.array([False, True]), mark_dead=True, restart_s=0.5)) == \
        ["alive", "replacing"]


def test_the_routes_report_the_same_and_turn_ready_again_when_the_worker_is_back() -> None:
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from gencc.serving import create_app

    svc = crashing_service(restart_s=0.5)
    with TestClient(create_app(svc)) as c:
        assert c.get("/healthz").status_code == 200 and c.get("/v2/health/ready").status_code == 200
        n_lost = lost(crash_both_workers_under_three_requests(svc))
        body = c.get("/healthz").json()
        assert c.get("/healthz").status_code == 503 and (body["replacing"], body["lost_tasks"]) == (2, n_lost)
        assert c.get("/v2/health/ready").status_code == 503 and c.get("/v2/health/live").status_code == 200
        text = c.get("/metrics").text
        for line in ('gencc_workers{state="alive"} 0.0', 'gencc_workers{state="replacing"} 2.0',
                     "gencc_workers_live 0.0", "gencc_ready 0.0", f"gencc_lost_tasks_total {float(n_lost)}",
                     "gencc_worker_restarts_total 0.0"):
            assert line in text, (line, text)
        deadline = time.monotonic() + 10
        while c.get("/v2/health/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        text = c.get("/metrics").text
        assert "gencc_worker_restarts_total 2.0" in text and "gencc_ready 1.0" in text, text


def test_workers_that_stop_answering_without_dying_turn_health_down_and_back() -> None:
    """Every call hangs (as on a Ray cluster whose head is gone: the actors still listed alive): once requests
    have waited `stall_s` with no output, health says down, ready is 503 and says why; outputs again: ok."""
    pytest.importorskip("httpx")
    import threading

    from fastapi.testclient import TestClient

    from gencc.serving import create_app

    go = threading.Event()
    go.set()

    def held(X):
        go.wait(30)
        return lin(X)

    held.batched = True
    pool = Workers(2, ThreadBackend({"f": held}, dtype=np.float32), ServiceTimes(0.0))
    svc = Service(pool, lambda env: make_dispatcher("uncoded", env))
    svc.in_shape, svc.stall_s = IN, 0.5
    x = np.zeros(IN, np.float32)
    with TestClient(create_app(svc)) as c:
        assert svc.submit(x).result(timeout=10).status == 200
        assert c.get("/healthz").json()["stalled_s"] == 0
        go.clear()  # the workers stop answering, alive all the while
        futs = [svc.submit(x) for _ in range(3)]
        deadline = time.monotonic() + 10
        while c.get("/healthz").status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        body = c.get("/healthz").json()
        assert body["status"] == "down" and body["stalled_s"] > 0.5 and body["alive"] == 2
        ready = c.get("/v2/health/ready")
        assert ready.status_code == 503 and "no task has returned an output" in ready.json()["error"]
        go.set()
        assert [f.result(timeout=10).status for f in futs] == [200] * 3
        assert c.get("/healthz").status_code == 200 and c.get("/healthz").json()["stalled_s"] == 0
