"""The serving pool on Ray actors, end to end over HTTP, with faults (a killed actor included). Runs only inside a
loopback-only network namespace; the launcher test re-executes this module there."""

from __future__ import annotations

from pathlib import Path

import pytest

from gencc.engine.ray.namespace import in_loopback_namespace
from gencc.faults import Faults, WrongResults

from .serving_helpers import serve_until_quarantined, start_server

HERE = Path(__file__)


@pytest.fixture(scope="module", autouse=True)
def one_ray_for_the_module():
    """Inside the namespace, one private loopback Ray for this module's tests (started as each Service's backend
    starts its own: gencc's init_ray): every backend finds it initialised, uses it, and leaves it running; it is
    shut down, and its temp dir removed, after the last test. Outside the namespace: nothing."""
    if not in_loopback_namespace():
        yield
        return
    ray = pytest.importorskip("ray")
    from gencc.engine.ray.backend import init_ray, remove_temp_dir

    _, owns, tmp = init_ray()
    assert owns  # a fresh Ray, started here
    try:
        yield
    finally:
        ray.shutdown()
        remove_temp_dir(tmp)


@pytest.mark.slow
@pytest.mark.ray_suite(HERE)
def test_ray_serving_in_loopback_namespace(run_ray_tests_in_namespace):
    pytest.importorskip("fastapi")
    run_ray_tests_in_namespace()


@pytest.mark.ray
def test_http_on_ray_actors_with_faults_answers_every_request_once():
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")
    from gencc.loadgen.load import run_http
    from gencc.serving import Service, create_app

    svc = Service.build("digits-cnn", "gcc", workers=6, K=4, backend="ray", service_ms=5.0, max_wait_ms=10,
                        faults=Faults(raise_p=0.05, nan_p=0.05, hang_p=0.02, crash_p=0.01, hang_s=0.3),
                        request_timeout=5.0)
    server, th, port = start_server(create_app(svc))
    rows = run_http(f"http://127.0.0.1:{port}", rate=60, duration=2.0, inputs=svc.workload.X_test[:40].tolist())
    import httpx  # the Open Inference Protocol on the same Ray-backed service

    v2 = [httpx.post(f"http://127.0.0.1:{port}/v2/models/model/infer", timeout=10, json={"inputs": [
        {"name": "input", "shape": [2, 1, 8, 8], "datatype": "FP32", "data": x.ravel().tolist()}]})
        for x in (svc.workload.X_test[i:i + 2] for i in range(0, 20, 2))]
    dead = int(svc.pool.dead.sum())
    restarts = sum(svc.pool.backend.restarts)
    fails = dict(svc.dispatcher.failures)
    server.should_exit = True
    th.join(60)
    st = [r["status"] for r in rows]
    assert len(rows) > 60 and set(st) <= {200, 503, 504} and st.count(200) >= 0.8 * len(rows), st
    assert all(r["scheme"] == "gcc" for r in rows)
    ok = [r.json() for r in v2 if r.status_code == 200]
    assert len(ok) >= 5 and all(len(b["parameters"]["degraded"]) == 2 and b["outputs"][0]["shape"] == [2, 10]
                                for b in ok) and all("error" in r.json() for r in v2 if r.status_code != 200)
    assert sum(fails.values()) > 0 and svc.pool.errors == []
    assert dead == 0 and (restarts >= 1 or "crash" not in fails)  # a killed actor is replaced; its worker stays


@pytest.mark.ray
def test_parity_model_runs_in_ray_actors():
    """sgcc-parity on Ray: the coded slots run the parity model shipped to the actors by its factory."""
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")
    import numpy as np

    from gencc.serving import Service

    svc = Service.build("digits-cnn", "sgcc-parity", workers=6, K=4, backend="ray", service_ms=2.0, gate="off",
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


@pytest.mark.ray
def test_checked_serving_on_ray_outvotes_and_quarantines_a_worker_returning_garbage():
    """A Ray actor returns finite garbage on every task: no exact answer carries it, the worker is flagged with
    the reason "inconsistent result" and quarantined."""
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")
    from gencc.serving import Service
    from gencc.serving._policy.checked import REASON

    svc = Service.build("digits-cnn", "gcc", workers=8, K=4, backend="ray", service_ms=3.0, max_wait_ms=10,
                        check="strict", wrong=WrongResults(workers=[5], scale=5.0))
    serve_until_quarantined(svc, svc.workload.X_test[:48])
    assert svc.dispatcher.quarantined == {5} and svc.dispatcher.failures[REASON] >= 2


@pytest.mark.ray
def test_http_on_ray_2x_overload_and_shutdown_mid_load_lose_nothing():
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")
    import threading

    from gencc.loadgen.load import accounting, run_http
    from gencc.serving import Service, create_app

    W, service_ms = 4, 40.0
    svc = Service.build("digits-cnn", "gcc", workers=W, K=2, backend="ray", service_ms=service_ms, max_wait_ms=10,
                        max_pending=8, request_timeout=30.0)
    app = create_app(svc)
    server, th, port = start_server(app)
    out: dict = {}
    rate = 2 * W / (service_ms / 1000)  # twice uncoded capacity

    def load():
        out["rows"] = run_http(f"http://127.0.0.1:{port}", rate=rate, duration=3.0,
                               inputs=svc.workload.X_test[:40].tolist(), timeout=60)

    lt = threading.Thread(target=load)
    lt.start()
    lt.join(2.0)  # mid-load (arrivals run 3 s): in-flight requests are answered, later ones refused
    server.should_exit = True
    lt.join(120)
    th.join(120)
    rows = out["rows"]
    acc = accounting(rows)
    assert acc["ids_once"] and acc["sent"] == acc["answered_200"] + acc["rejected_503"] + acc["other"] + acc["lost"]
    assert acc["answered_200"] > 20 and acc["rejected_503"] > 0 and acc["other"] == 0, acc
    # what the client did not get an HTTP answer for never reached the app (refused, or a keep-alive connection
    # closed by the shutdown); every request the app took was answered: its 200 count equals the client's
    m = app.state.metrics.requests
    assert m.labels("200")._value.get() == acc["answered_200"] and m.labels("503")._value.get() == acc["rejected_503"]
    assert all(r["status"] in (200, 503) or r["error"].split(":")[0] in ("ConnectError", "ReadError",
                                                                         "RemoteProtocolError") for r in rows)
    assert svc.pending == 0 and svc.pool.errors == []
