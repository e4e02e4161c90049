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


@pytest.mark.ray
def test_parity_model_runs_in_ray_actors():
    """sgcc-parity on Ray: the coded slots run the parity model shipped to the actors by its factory."""
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")
    import numpy as np

    from gencc.serving import Service

    svc = Service.build("digits-cnn", "sgcc-parity", workers=6, K=4, backend="ray", service_ms=2.0,
                        slow_fraction=0.3, slow_factor=10.0, mean_slow_s=0.2, max_wait_ms=5)
    try:
        X = svc.workload.X_test[:24]
        reqs = [f.result(timeout=60) for f in [svc.submit(x) for x in X]]
    finally:
        svc.close()
    assert [r.status for r in reqs] == [200] * len(X)
    exact = [i for i, r in enumerate(reqs) if not r.degraded]
    assert np.allclose(np.stack([reqs[i].output for i in exact]), svc.workload.f(X[exact]), atol=1e-4)
    par = [t for t in svc.pool.executed if t.fn == "parity"]
    assert par and all(t.ok for t in par) and svc.pool.errors == []
