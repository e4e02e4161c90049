"""gencc in front of MLServer replicas (Seldon's Open Inference Protocol server, from PyPI: a server no one here
wrote), each a separate `mlserver start` process on loopback started and stopped here, serving a model this test
defines (tests/engine/mlserver_model.py). Every answer that is not degraded is MLServer's own, bit for bit, for
every scheme; a replica slow by its own model code is cut from the tail; one killed mid-run loses no request; one
answering NaN is never an answer; a replica whose metadata declares no tensors is refused with the fix. Skipped,
with the reason, where MLServer's virtual environment is absent (`.ci/run` makes it)."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gencc.cli import app as cli_app
from gencc.engine.remote import check_fleet
from gencc.serving import Service

from ..engine.mlserver_replica import MLServerReplica, mlserver_executable
from .upstream_checks import (
    assert_exact_where_not_degraded,
    assert_the_replicas_answers,
    serve_all,
    worst_latency_with_a_slow_replica,
)

pytestmark = pytest.mark.skipif(mlserver_executable() is None,
                                reason="MLServer is not installed: make .venv-mlserver as .ci/run does, or set "
                                       "GENCC_MLSERVER to an mlserver executable")

X = np.random.default_rng(1).normal(size=(24, 4)).astype(np.float32)
#: the replicas of the module, by role: four plain ones (the last one is killed by the last test), one slow by
#: its own model code, one answering NaN, one whose metadata declares no tensors
ROLES = {"a": {}, "b": {}, "c": {}, "d": {}, "slow": {"sleep_s": 2.0}, "nan": {"garbage": True},
         "bare": {"declare": False}}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("mlserver")
    reps: dict[str, MLServerReplica] = {}

    def start(role: str) -> None:
        for attempt in range(3):  # a free port taken by another process before MLServer binds it: new ports
            rep = MLServerReplica(root / role / f"try{attempt}", **ROLES[role])
            reps[role] = rep
            try:
                rep.wait_ready()
                return
            except RuntimeError:
                if attempt == 2:
                    raise

    try:
        with cf.ThreadPoolExecutor(len(ROLES)) as ex:
            list(ex.map(start, ROLES))
        yield reps
    finally:
        for r in reps.values():
            r.kill()


def test_the_fleet_check_reads_mlservers_own_metadata(fleet) -> None:
    f = check_fleet([fleet[r].url for r in "abc"])
    assert f.in_shape == (4,) and f.out_shape == (3,) and f.codable
    sig = f.signature
    assert sig.input.name == "x" and sig.input.datatype == "FP32" and sig.output.name == "y" and sig.batched


@pytest.mark.parametrize(("scheme", "K"), [("uncoded", None), ("replication", None), ("hedged", None),
                                           (None, 2)])
def test_every_answer_that_is_not_degraded_is_mlservers_own(fleet, scheme: str | None, K: int | None) -> None:
    own = fleet["a"].answer(X)
    svc = Service.build(None, scheme=scheme, K=K, upstreams=[fleet[r].url for r in "abc"], gate="off")
    try:
        assert svc.config.backend == "remote" and svc.scheme == (scheme or "sgcc") and svc.tensor_names == ("x", "y")
        reqs = serve_all(svc, X)
    finally:
        svc.close()
    assert_the_replicas_answers(reqs, own)


def test_a_replica_answering_nan_is_never_an_answer(fleet) -> None:
    own = fleet["a"].answer(X)
    for scheme, K in (("uncoded", None), ("sgcc", 2)):
        svc = Service.build(None, scheme=scheme, K=K, upstreams=[fleet[r].url for r in ("nan", "a", "b", "c")],
                            gate="off")
        try:
            reqs = serve_all(svc, X)
        finally:
            svc.close()
        assert [r.status for r in reqs] == [200] * len(X)
        for i, r in enumerate(reqs):
            assert np.all(np.isfinite(r.output))
            if not r.degraded:
                np.testing.assert_array_equal(r.output, own[i])


@pytest.mark.slow  # waits out the slow replica's 2 s calls
def test_a_replica_slow_by_its_own_code_is_cut_from_the_tail(fleet) -> None:
    """8 requests at once on 4 replicas, one of which sleeps 2 s per call in its model: uncoded sends two to it
    and waits; sgcc answers them from the coded tasks without it."""
    urls = [fleet[r].url for r in ("slow", "a", "b", "c")]
    worst = worst_latency_with_a_slow_replica(urls, X[:8], fleet["a"].answer(X[:8]), drain_s=3)
    assert worst["uncoded"] >= 1.9 and worst["sgcc"] < 1.5, worst


def test_a_replica_without_declared_tensors_is_refused_with_the_fix(fleet) -> None:
    r = CliRunner().invoke(cli_app, ["serve", "--scheme", "uncoded", "--upstream", fleet["bare"].url,
                                     "--upstream", fleet["a"].url])
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert fleet["bare"].url in text and "declares no input" in text and "model-settings.json" in text, text


def test_a_replica_killed_mid_run_loses_no_request(fleet) -> None:
    """Runs last: it kills replica d."""
    own = fleet["a"].answer(X)
    svc = Service.build(None, scheme="sgcc", K=2, upstreams=[fleet[r].url for r in "abcd"], gate="off")
    try:
        reqs = serve_all(svc, X)
        fleet["d"].kill()
        reqs += serve_all(svc, X) + serve_all(svc, X)
    finally:
        svc.close()
    assert_exact_where_not_degraded(reqs, own)
    assert svc.pool.counts["crash"] >= 1


def test_gencc_serve_over_three_replicas_codes_groups_of_two_and_keeps_their_tensor_names(fleet, monkeypatch,
                                                                                       caplog) -> None:
    """No --K over 3 replicas: groups of K = 2 (the default 8 needs more than 8 workers); a client that types the
    replicas' tensor names (x, y) into its request gets its answer under them (uvicorn replaced by a TestClient)."""
    import logging

    import uvicorn
    from fastapi.testclient import TestClient

    seen: dict = {}

    def fake_run(app_, host, port, **kwargs):
        with TestClient(app_) as c:
            meta = c.get("/v2/models/model").json()
            seen["names"] = (meta["inputs"][0]["name"], meta["outputs"][0]["name"])
            body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X[:2].ravel().tolist()}]}
            r = c.post("/v2/models/model/infer", json=body)
            seen["status"], seen["out"] = r.status_code, r.json()["outputs"][0]
            seen["degraded"] = r.json()["parameters"]["degraded"]

    monkeypatch.setattr(uvicorn, "run", fake_run)
    caplog.set_level(logging.INFO, logger="gencc")
    urls = [a for k in "abc" for a in ("--upstream", fleet[k].url)]
    r = CliRunner().invoke(cli_app, ["--log-level", "info", "serve", "--gate", "off", *urls])
    assert r.exit_code == 0, r.output
    assert any("scheme sgcc" in m and "K=2" in m for m in (rec.getMessage() for rec in caplog.records))
    assert seen["names"] == ("x", "y") and seen["status"] == 200 and seen["out"]["name"] == "y", seen
    got, own = np.asarray(seen["out"]["data"]).reshape(2, 3), fleet["a"].answer(X[:2])
    exact = ~np.broadcast_to(np.asarray(seen["degraded"], dtype=bool), (2,))
    np.testing.assert_array_equal(got[exact], own[exact].astype(np.float32))  # the replicas' own, as float32
    assert np.all(np.abs(got - own) <= 2 * np.ptp(fleet["a"].answer(X), axis=0))
