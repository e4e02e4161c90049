"""The serving pool on Ray actors, end to end over HTTP, with faults (a killed actor included). Runs only inside a
loopback-only network namespace; the launcher test re-executes this module there."""

from __future__ import annotations

from pathlib import Path

import pytest
from serving_helpers import start_server

from gencc.testing.isolation import in_loopback_namespace

HERE = Path(__file__)


def test_ray_serving_in_loopback_namespace(run_ray_tests_in_namespace):
    pytest.importorskip("fastapi")
    run_ray_tests_in_namespace(HERE)


@pytest.mark.ray
def test_http_on_ray_actors_with_faults_answers_every_request_once():
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")
    from gencc.serving import Faults, Service
    from gencc.serving.app import create_app
    from gencc.serving.load import run_http

    svc = Service.build("digits-cnn", "gcc", workers=6, K=4, backend="ray", service_ms=5.0, max_wait_ms=10,
                        faults=Faults(raise_p=0.05, nan_p=0.05, hang_p=0.02, crash_p=0.01, hang_s=0.3),
                        request_timeout=5.0)
    server, th, port = start_server(create_app(svc))
    rows = run_http(f"http://127.0.0.1:{port}", rate=60, duration=2.0, inputs=svc.workload.X_test[:40].tolist())
    dead = int(svc.pool.dead.sum())
    fails = dict(svc.dispatcher.failures)
    server.should_exit = True
    th.join(60)
    st = [r["status"] for r in rows]
    assert len(rows) > 60 and set(st) <= {200, 503, 504} and st.count(200) >= 0.8 * len(rows), st
    assert all(r["scheme"] == "gcc" for r in rows)
    assert sum(fails.values()) > 0 and svc.pool.errors == []
    assert dead >= 1 or "crash" not in fails  # a killed actor marks its worker dead
