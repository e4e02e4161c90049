"""Latency targets over real HTTP on loopback, with a model the test defines: a request that carries its target
(/v2 parameter `timeout` in microseconds, /predict header X-Deadline-Ms, or the server's default) is answered by
it: exactly, decoded (`degraded`, with its uncertainty), or 504 with {"error": ...} at the deadline, never more
than 10 ms after it; /metrics counts the outcomes."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from gencc.engine import ThreadBackend, Workers  # noqa: E402
from gencc.serving import Service, create_app  # noqa: E402
from gencc.serving._policy.loop_env import LoopEnv  # noqa: E402
from gencc.serving.service import make_dispatcher  # noqa: E402

from .serving_helpers import start_server  # noqa: E402

SHAPE, NAME = (4,), "sleepy"
SLOW_S = 0.3  # an input whose first value is SLOW takes this long; any other input (a coded one too) is instant
SLOW = 7.0
WEIGHTS = np.linspace(-1, 1, 12).reshape(4, 3)
SLACK_S = 0.010  # an answer may leave this long after its deadline
#: at the client, a round trip on a loaded test machine (two cores shared with other jobs) may add this much to
#: a single exchange; the quickest of three exchanges is held to SLACK_S, and the server's own answer time always
NOISY_S = 0.100


def sleepy(x):
    """(B, 4) -> (B, 3): tanh of a linear map; sleeps SLOW_S when an input starts with SLOW."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if np.any(x[:, 0] == SLOW):
        time.sleep(SLOW_S)
    return np.tanh(x @ WEIGHTS)


sleepy.batched = True


def serve(scheme: str, **kw):
    pool = Workers(3, ThreadBackend({"f": sleepy}, dtype=np.float32))
    svc = Service(pool, lambda env: make_dispatcher(scheme, env, K=2, max_wait=0.01, schedule="edf", **kw),
                  env=LoopEnv(pool))
    app = create_app(svc, in_shape=SHAPE, out_shape=(3,), name=NAME)
    observe, svc.answers = svc.dispatcher.on_answer, []

    def record(r):  # every answer, as the server sent it
        svc.answers.append(r)
        observe(r)

    svc.dispatcher.on_answer = record
    server, thread, port = start_server(app)
    return svc, server, thread, port


def check_on_time(svc, elapsed: list[float], target_s: float) -> None:
    """The server answered every request by its deadline + SLACK_S; at the client no exchange came before the
    deadline, the quickest within SLACK_S after it, none later than NOISY_S after it."""
    assert svc.answers and all(r.t_done <= r.deadline + SLACK_S for r in svc.answers if r.deadline < np.inf)
    assert target_s <= min(elapsed) <= target_s + SLACK_S and max(elapsed) <= target_s + NOISY_S


@pytest.fixture(scope="module")
def uncoded():
    svc, server, thread, port = serve("uncoded")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
        c.get("/healthz")  # the connection is open before anything is timed
        yield svc, c
    server.should_exit = True
    thread.join(20)


def v2(c, x, **params):
    """POST an infer request of the inputs x; (status, body, seconds at the client)."""
    body = {"inputs": [{"name": "input", "shape": [len(x), *SHAPE], "datatype": "FP32",
                        "data": np.asarray(x, dtype=float).ravel().tolist()}], "parameters": params}
    t = time.perf_counter()
    r = c.post(f"/v2/models/{NAME}/infer", json=body)
    return r.status_code, r.json(), time.perf_counter() - t


def inputs(*first):
    return np.array([[f, 0.5, -0.25, 1.0] for f in first], dtype=np.float32)


def test_a_request_that_misses_gets_504_at_its_deadline_and_one_that_makes_it_its_exact_answer(uncoded):
    svc, c = uncoded
    missed = []
    for _ in range(3):
        status, body, dt = v2(c, inputs(SLOW), timeout=80_000)
        assert status == 504 and "deadline" in body["error"]
        missed.append(dt)
        status, body, dt = v2(c, inputs(0.3), timeout=80_000)
        assert status == 200 and body["parameters"]["degraded"] is False and dt <= 0.080 + NOISY_S
        np.testing.assert_allclose(body["outputs"][0]["data"], sleepy(inputs(0.3)).ravel(), rtol=1e-5)
        time.sleep(SLOW_S)  # the abandoned task ends, the worker is free again
    check_on_time(svc, missed, 0.080)


def test_predict_takes_its_target_from_a_header_and_the_server_default_applies_otherwise(uncoded):
    svc, c = uncoded
    missed = []
    for _ in range(3):
        t = time.perf_counter()
        r = c.post("/predict", json={"input": inputs(SLOW)[0].tolist()}, headers={"X-Deadline-Ms": "60"})
        missed.append(time.perf_counter() - t)
        assert r.status_code == 504 and "deadline" in r.json()["error"]
        assert 60.0 <= r.json()["latency_ms"] <= missed[-1] * 1000  # the server's own time: at the target, not before
        time.sleep(SLOW_S)
    check_on_time(svc, missed, 0.060)
    r = c.post("/predict", json={"input": inputs(0.3)[0].tolist()}, headers={"X-Deadline-Ms": "soon"})
    assert r.status_code == 400 and "X-Deadline-Ms" in r.json()["detail"]
    svc.deadline_ms = 70.0  # what --deadline-ms sets
    try:
        status, body, dt = v2(c, inputs(SLOW))
        assert status == 504 and 0.070 <= dt <= 0.070 + NOISY_S
    finally:
        svc.deadline_ms = None
    status, body, _ = v2(c, inputs(0.3), timeout=0)
    assert status == 400 and "timeout" in body["error"]
    time.sleep(SLOW_S)
    text = c.get("/metrics").text
    assert 'gencc_deadline_answers_total{outcome="missed"}' in text


def test_a_coded_request_is_decoded_inside_its_target_unless_it_asks_for_exact_answers():
    """sgcc, K = 2 on 3 workers: with one member of a group slow, the other member's result and the coded one
    decode it inside its 150 ms target (degraded, with an uncertainty); with exact_only it gets 504 instead."""
    svc, server, thread, port = serve("sgcc")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as c:
            c.get("/healthz")
            status, body, dt = v2(c, inputs(SLOW, 0.3), timeout=150_000)
            assert status == 200 and body["parameters"]["degraded"] == [True, False] and dt <= 0.150 + NOISY_S
            y = np.asarray(body["outputs"][0]["data"]).reshape(2, 3)
            np.testing.assert_allclose(y[1], sleepy(inputs(0.3))[0], rtol=1e-5)
            assert np.isfinite(y[0]).all() and "uncertainty" in body["parameters"]
            time.sleep(SLOW_S)
            status, body, dt = v2(c, inputs(SLOW, 0.3), timeout=150_000, exact_only=True)
            assert status == 504 and "deadline" in body["error"] and 0.150 <= dt <= 0.150 + NOISY_S
            time.sleep(SLOW_S)
            assert all(r.t_done <= r.deadline + SLACK_S for r in svc.answers)
            text = c.get("/metrics").text
            for outcome in ("exact", "degraded", "missed"):
                line = next(s for s in text.splitlines()
                            if s.startswith(f'gencc_deadline_answers_total{{outcome="{outcome}"}}'))
                assert float(line.split()[-1]) >= 1
    finally:
        server.should_exit = True
        thread.join(20)
