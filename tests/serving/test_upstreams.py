"""gencc in front of model replicas it does not run (`Service.build(upstreams=...)`, `gencc serve --upstream`):
the replicas are real servers on 127.0.0.1 started here (gencc's own uncoded service of a model defined in this file,
and the small protocol server of tests/engine/oip_replica.py for the faults gencc would never send), stopped here.
Every answer that is not degraded is the replica's own; a slow replica's tail is cut by the coded scheme; a
replica killed mid-run loses no request; a replica answering garbage is a straggler whose answer is never sent;
a fleet that cannot serve is refused before serving (exit 2, one message)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from gencc import as_model
from gencc.cli import app as cli_app
from gencc.errors import ConfigError
from gencc.serving import Service, ServiceConfig, create_app, start_in_thread

from ..engine.oip_replica import Replica as RawReplica
from ..engine.oip_replica import dead_url
from ..processes import stop_process
from .upstream_checks import (
    assert_exact_where_not_degraded,
    assert_the_replicas_answers,
    serve_all,
    worst_latency_with_a_slow_replica,
)

IN, OUT = (4,), (3,)
X = np.random.default_rng(1).normal(size=(24, 4)).astype(np.float32)


def model(X: Any) -> np.ndarray:
    """The replicas' model: smooth, not linear, so a decode is close to it but not equal."""
    X = np.asarray(X, dtype=np.float64)
    return np.stack([np.tanh(X).sum(axis=1), X[:, 0] * X[:, 1], np.sin(X[:, 2]) - X[:, 3]], axis=1)


class Slow:
    """The model, `sleep_s` slower per call: the replica's own slowness, not gencc's injection."""

    batched = True

    def __init__(self, sleep_s: float):
        self.sleep_s = sleep_s

    def __call__(self, X: Any) -> np.ndarray:
        time.sleep(self.sleep_s)
        return model(X)


class GenccReplica:
    """gencc's own uncoded service of `fn` on one worker, served over HTTP on a free loopback port."""

    def __init__(self, fn: Any = model):
        self.svc = Service.build(as_model(fn, input_shape=IN), scheme="uncoded", workers=1)
        self.server, self.thread, self.port = start_in_thread(create_app(self.svc, name="m"))
        self.url = f"http://127.0.0.1:{self.port}/v2/models/m"
        self.alive = True

    def answer(self, x: np.ndarray) -> np.ndarray:
        """The replica's own answer to one input, asked directly."""
        body = {"inputs": [{"name": "input", "shape": [1, *IN], "datatype": "FP32", "data": x.ravel().tolist()}]}
        r = httpx.post(self.url + "/infer", json=body, timeout=10, trust_env=False)
        r.raise_for_status()
        return np.asarray(r.json()["outputs"][0]["data"], dtype=np.float64).reshape(OUT)

    def kill(self) -> None:
        if self.alive:
            self.alive = False
            self.server.should_exit = True
            self.thread.join(10)
            self.svc.close(drain_s=1)


@pytest.fixture
def fleet():
    made: list[Any] = []

    def make(fns: list[Any]) -> list[GenccReplica]:
        reps = [GenccReplica(fn) for fn in fns]
        made.extend(reps)
        return reps

    yield make
    for r in made:
        r.kill()


@pytest.mark.parametrize(("scheme", "K"), [("uncoded", None), ("replication", None), ("hedged", None),
                                           (None, 2), ("gcc", 2)])
def test_every_answer_that_is_not_degraded_is_the_replicas_own(fleet, scheme: str | None, K: int | None) -> None:
    reps = fleet([model] * 4)
    own = np.stack([reps[0].answer(x) for x in X])
    svc = Service.build(None, scheme=scheme, K=K, upstreams=[r.url for r in reps], gate="off")
    try:
        assert svc.config.workers == 4 and svc.config.backend == "remote"
        assert svc.scheme == (scheme or "sgcc") and svc.in_shape == IN and svc.model.out_shape == OUT
        reqs = serve_all(svc, X)
    finally:
        svc.close()
    assert_the_replicas_answers(reqs, own)  # bit for bit where not degraded; a degraded one near, never garbage
    assert all(r.output.shape == OUT for r in reqs)


def test_the_front_door_speaks_the_protocol_over_the_upstreams(fleet) -> None:
    reps = fleet([model] * 2)
    svc = Service.build(None, scheme="uncoded", upstreams=[r.url for r in reps])
    server, thread, port = start_in_thread(create_app(svc, name="front"))
    try:
        meta = httpx.get(f"http://127.0.0.1:{port}/v2/models/front", trust_env=False).json()
        assert meta["inputs"][0]["shape"] == [-1, 4] and meta["outputs"][0]["shape"] == [-1, 3]
        body = {"inputs": [{"name": "input", "shape": [3, 4], "datatype": "FP32", "data": X[:3].ravel().tolist()}]}
        r = httpx.post(f"http://127.0.0.1:{port}/v2/models/front/infer", json=body, timeout=10, trust_env=False)
        assert r.status_code == 200
        got = np.asarray(r.json()["outputs"][0]["data"]).reshape(3, 3)
        np.testing.assert_array_equal(got, np.stack([reps[1].answer(x) for x in X[:3]]))
    finally:
        server.should_exit = True
        thread.join(10)
        svc.close()


@pytest.mark.slow  # waits out a replica's 5 s calls
def test_a_slow_replica_is_cut_from_the_tail_by_the_coded_scheme(fleet) -> None:
    """Replica 0 sleeps 5 s per call in its own model: 8 requests at once on 4 replicas, uncoded sends two to it
    and waits; sgcc's coded tasks (or a decode of the request it sent there) answer without it."""
    reps = fleet([Slow(5.0), model, model, model])
    own = np.stack([reps[1].answer(x) for x in X[:8]])
    worst = worst_latency_with_a_slow_replica([r.url for r in reps], X[:8], own, drain_s=5)
    assert worst["uncoded"] >= 4.9  # 8 requests on 4 replicas: two wait for the slow one
    assert worst["sgcc"] < 3.0, worst  # far from the slow replica's 5 s, on a loaded machine too


def test_a_replica_killed_mid_run_loses_no_request(fleet) -> None:
    reps = fleet([model] * 4)
    own = np.stack([reps[0].answer(x) for x in X])
    for scheme, K in (("uncoded", None), ("sgcc", 2)):
        if not reps[2].alive:
            reps[2] = fleet([model])[0]
        svc = Service.build(None, scheme=scheme, K=K, upstreams=[r.url for r in reps], gate="off")
        try:
            reqs = []
            for i in range(3):
                if i == 1:
                    reps[2].kill()
                reqs += serve_all(svc, X)
            health = svc.health()
        finally:
            svc.close()
        assert_exact_where_not_degraded(reqs, own)
        assert svc.pool.counts["crash"] >= 1 and health["workers"] == 4


@pytest.mark.parametrize("mode", ["nan", "shape", "500"])
def test_a_replica_answering_garbage_is_a_straggler_never_an_answer(fleet, mode: str) -> None:
    reps = fleet([model] * 3)
    bad = RawReplica(model, name="m", in_shape=IN, out_shape=OUT, input_name="input", output_name="output")
    try:
        own = np.stack([reps[0].answer(x) for x in X])
        for scheme, K in (("uncoded", None), ("sgcc", 2)):
            svc = Service.build(None, scheme=scheme, K=K, upstreams=[bad.url] + [r.url for r in reps], gate="off")
            bad.mode = mode
            try:
                reqs = serve_all(svc, X)
            finally:
                svc.close()
            assert [r.status for r in reqs] == [200] * len(X)
            for i, r in enumerate(reqs):
                assert np.all(np.isfinite(r.output)) and r.output.shape == OUT
                if not r.degraded:
                    np.testing.assert_array_equal(r.output, own[i])
            failed = sum(n for k, n in svc.pool.counts.items() if k != "ok")
            assert failed >= 1 and bad.calls + (mode == "500") >= 1
            bad.mode = "ok"
    finally:
        bad.kill()



def test_a_replica_that_keeps_failing_leaves_the_rotation_and_comes_back(fleet) -> None:
    reps = fleet([model] * 2)
    bad = RawReplica(model, name="m", in_shape=IN, out_shape=OUT, input_name="input", output_name="output")
    svc = Service.build(None, scheme="uncoded", upstreams=[bad.url] + [r.url for r in reps])
    server, thread, port = start_in_thread(create_app(svc, name="front"))
    base = f"http://127.0.0.1:{port}"

    def until(cond, timeout: float = 10.0) -> bool:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            time.sleep(0.05)
        return cond()

    try:
        own = np.stack([reps[0].answer(x) for x in X])
        bad.mode = "unready"  # 503 to inference and to its ready route
        assert_exact_where_not_degraded(serve_all(svc, X), own)  # its failures retried on the others
        assert until(lambda: svc.upstream_states()[0]["state"] == "out")
        posts = bad.posts
        assert_exact_where_not_degraded(serve_all(svc, X), own)
        assert bad.posts == posts  # out of rotation: no request went to it
        health = httpx.get(base + "/healthz", trust_env=False).json()
        assert [u["state"] for u in health["upstreams"]] == ["out", "in", "in"]
        assert health["upstreams"][0]["url"] == bad.url and health["alive"] == 2
        meta = httpx.get(base + "/v2/models/front", trust_env=False).json()
        assert meta["parameters"]["upstreams"][0]["state"] == "out"
        text = httpx.get(base + "/metrics", trust_env=False).text
        assert f'gencc_upstream_in_rotation{{upstream="{bad.url}"}} 0.0' in text
        assert f'gencc_upstream_ejections_total{{upstream="{bad.url}"}} 1.0' in text
        bad.mode = "ok"  # recovered: its ready route answers, the probe puts it back and its worker is re-created
        assert until(lambda: svc.upstream_states()[0]["state"] == "in" and svc.health()["alive"] == 3)
        calls = bad.calls
        assert_exact_where_not_degraded(serve_all(svc, X), own)
        assert bad.calls > calls
        text = httpx.get(base + "/metrics", trust_env=False).text
        assert f'gencc_upstream_in_rotation{{upstream="{bad.url}"}} 1.0' in text
    finally:
        server.should_exit = True
        thread.join(10)
        svc.close()
        bad.kill()

def test_a_fleet_that_cannot_serve_is_refused_by_the_library(fleet) -> None:
    (r,) = fleet([model])
    ints = [RawReplica(model, name="m", in_shape=IN, out_shape=OUT, datatype="INT32", input_name="input",
                       output_name="output") for _ in range(3)]
    try:
        with pytest.raises(ConfigError, match="workers must be 1") as e:
            ServiceConfig(scheme="uncoded", upstreams=[r.url], workers=12)
        assert e.value.field == "workers"
        with pytest.raises(ConfigError, match="does not apply") as e:
            ServiceConfig(scheme="uncoded", upstreams=[r.url], workers=1, backend="ray")
        with pytest.raises(ConfigError, match="parity model .* over upstreams choose uncoded") as e:
            ServiceConfig(scheme="parm", upstreams=[r.url] * 1, workers=1)
        assert e.value.field == "scheme"
        with pytest.raises(ConfigError, match="backend remote needs upstreams"):
            ServiceConfig(backend="remote")
        with pytest.raises(ConfigError, match="integer inputs take only copies, hedging and replication") as e:
            Service.build(None, scheme="sgcc", K=2, upstreams=[i.url for i in ints])
        assert e.value.field == "scheme"
        svc = Service.build(None, scheme="replication", upstreams=[i.url for i in ints])  # copies take them
        try:
            got = svc.submit(np.array([1.0, 2.0, 3.0, 4.0])).result(10)
            assert got.status == 200
            np.testing.assert_allclose(got.output, model(np.array([[1.0, 2, 3, 4]]))[0], rtol=1e-6)
        finally:
            svc.close()
        with pytest.raises(ConfigError, match="unreachable or not ready"):
            Service.build(None, scheme="uncoded", upstreams=[r.url, dead_url("m")])
        with pytest.raises(ConfigError, match="give no workload or model"):
            Service.build("digits-cnn", scheme="uncoded", upstreams=[r.url])
    finally:
        for i in ints:
            i.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused(args: list[str]) -> str:
    result = CliRunner().invoke(cli_app, ["serve", "--port", str(_free_port()), *args])
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out and out.count("Invalid value") == 1, out
    return " ".join(out.replace("│", " ").split())


def test_the_command_refuses_a_fleet_that_cannot_serve_with_exit_2(fleet, tmp_path) -> None:
    (r,) = fleet([model])
    other = RawReplica(model, name="m", in_shape=(5,), out_shape=OUT, input_name="input", output_name="output")
    try:
        gone = dead_url("m")
        assert "'--upstream': upstream " + gone in _refused(["--upstream", r.url, "--upstream", gone,
                                                             "--scheme", "uncoded"])
        assert "upstreams serve different models" in _refused(["--upstream", r.url, "--upstream", other.url,
                                                                "--scheme", "uncoded"])
        assert "an upstream names a model's route" in _refused(["--upstream", "http://127.0.0.1:1/v1/m"])
        assert "'--workers'" in _refused(["--upstream", r.url, "--workers", "3", "--scheme", "uncoded"])
        assert "'--workload'" in _refused(["--upstream", r.url, "--workload", "digits-cnn"])
        assert "'--scheme'" in _refused(["--upstream", r.url, "--scheme", "sgcc-parity"])
        assert "'--upstreams'" in _refused(["--upstreams", str(tmp_path / "none.txt")])
        assert "'--start-degraded'" in _refused(["--start-degraded"])
    finally:
        other.kill()


def test_gencc_serve_runs_in_front_of_the_replicas(fleet, tmp_path) -> None:
    """The command itself, as a process, over replicas listed in a file; stopped by the test."""
    reps = fleet([model] * 3)
    listing = tmp_path / "upstreams.txt"
    listing.write_text("# three replicas\n" + "\n".join(r.url for r in reps) + "\n")
    port = _free_port()
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", "--upstreams", str(listing), "--scheme",
                             "hedged", "--port", str(port), "--name", "front"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/v2/models/front"
        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = httpx.get(url + "/ready", timeout=1, trust_env=False).status_code == 200
            except httpx.HTTPError:
                ready = False
            if ready:
                break
            time.sleep(0.2)
        assert ready, proc.stdout.read() if proc.poll() is not None else "not ready in 60 s"
        body = {"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": X[:2].ravel().tolist()}]}
        r = httpx.post(url + "/infer", json=body, timeout=10, trust_env=False)
        assert r.status_code == 200 and r.json()["parameters"]["scheme"] == "hedged"
        got = np.asarray(r.json()["outputs"][0]["data"]).reshape(2, 3)
        np.testing.assert_array_equal(got, np.stack([reps[0].answer(x) for x in X[:2]]))
    finally:
        stop_process(proc)
