"""A baseline scheme's dispatcher on the front door's event loop (`LoopEnv`), on a model
gencc never saw: answers, timeouts and retries still hold there; a coded scheme on a local pool attaches too
(tests/serving/test_coded_loop.py checks it runs nowhere else)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

import gencc  # noqa: E402
from gencc.faults import Faults  # noqa: E402
from gencc.serving import Service, create_app  # noqa: E402


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return torch.tanh(self.lin(x))


@pytest.fixture(scope="module")
def model():
    return gencc.as_model(Tiny().eval(), input_shape=(4,))


def test_uncoded_dispatches_on_the_loop_and_answers_the_model(model):
    svc = Service.build(model, "uncoded", workers=3)
    seen: list[str] = []
    dispatch = svc.dispatcher.dispatch
    svc.dispatcher.dispatch = lambda req: (seen.append(threading.current_thread().name), dispatch(req))
    X = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    with TestClient(create_app(svc)) as c:
        assert svc.env.loop is not None
        outs = [c.post("/predict", json={"input": x.tolist()}) for x in X]
        assert [r.status_code for r in outs] == [200] * len(X)
        got = np.array([r.json()["output"] for r in outs])
        # an in-process submit from another thread goes to the loop too, and is answered
        assert svc.submit(X[0]).result(timeout=10).status == 200
    np.testing.assert_allclose(got, model(X), rtol=1e-5, atol=1e-6)
    assert len(seen) == len(X) + 1 and not any(n.endswith("-control") for n in seen), seen
    assert svc.env.loop is None and svc.pending == 0


def test_a_timeout_and_failed_retries_are_answered_on_the_loop(model):
    slow = Service.build(model, "uncoded", workers=1, service_ms=1500.0, request_timeout=0.3)
    with TestClient(create_app(slow)) as c:
        t = time.monotonic()
        r = c.post("/predict", json={"input": [0.1, 0.2, 0.3, 0.4]})
        assert r.status_code == 504 and time.monotonic() - t < 1.2
    failing = Service.build(model, "replication", workers=3, faults=Faults(raise_p=1.0))
    with TestClient(create_app(failing)) as c:
        r = c.post("/predict", json={"input": [0.1, 0.2, 0.3, 0.4]})
        assert r.status_code == 503 and "attempts failed on workers (the model raised)" in r.json()["detail"]
    assert failing.pool.errors == [] and failing.dispatcher.errors == {}
    overflowing = Service.build(model, "replication", workers=3, faults=Faults(nan_p=1.0))
    with TestClient(create_app(overflowing)) as c:  # every output not finite: the 503 says so
        r = c.post("/predict", json={"input": [0.1, 0.2, 0.3, 0.4]})
        assert r.status_code == 503 and "(the output was not finite)" in r.json()["detail"], r.json()


def test_a_coded_scheme_on_a_local_pool_attaches_to_the_loop(model):
    svc = Service.build(model, "gcc", workers=6, K=4, gate="off")
    with TestClient(create_app(svc)) as c:
        assert svc.env is not None and svc.env.loop is not None
        r = c.post("/predict", json={"input": [0.1, 0.2, 0.3, 0.4]})
        assert r.status_code == 200
    np.testing.assert_allclose(r.json()["output"], model(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))[0],
                               rtol=1e-5, atol=1e-6)
    assert svc.env.loop is None and svc.pending == 0
