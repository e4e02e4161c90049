"""gencc in front of Triton Inference Server itself: each replica a `tritonserver` (PyPI's nvidia-pytriton, on CPU)
serving a numpy model defined in tests/engine/triton_models.py, started and stopped here (tests/engine/
triton_replica.py). Triton's own metadata and configuration are what the fleet check reads; every answer gencc sends
that is not degraded is bit for bit the one Triton sends its own client (`tritonclient.http`), for every scheme; a
Triton replica killed mid-run loses no request; requests to Triton carry binary tensors (its extension), and
answer exactly as JSON ones; Triton's own HTTP client (`tritonclient.http`) talks to `gencc serve --upstream ...`
in front of Triton as it talks to Triton.

Skipped, with the reason, where the venv of Debian's python3.11 that runs PyTriton is absent (`.ci/run` makes it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from gencc.engine.remote import (
    Replica,
    Signature,
    Tensor,
    check_fleet,
    decode_response,
    encode_binary_request,
    parse_upstream,
)
from gencc.errors import ConfigError, RemoteError
from gencc.serving import Service

from ..processes import stop_process
from .oip_replica import Replica as RawReplica
from .triton_models import smooth
from .triton_replica import TritonServer, free_port, triton_python

MODELS = str(Path(__file__).with_name("triton_models.py"))
X = np.random.default_rng(7).normal(size=(24, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def triton_py() -> str:
    py, why = triton_python()
    if py is None:
        pytest.skip(why)
    return py


@pytest.fixture(scope="module")
def servers(triton_py: str):
    """Five Triton servers, started together: three replicas of `smooth` and two of `slow` (50 ms a call, its own
    model code), which the kill tests kill."""
    made = [TritonServer(triton_py, f"{MODELS}:smooth", wait=False) for _ in range(3)]
    made += [TritonServer(triton_py, f"{MODELS}:slow", wait=False, params={"sleep_s": 0.05}) for _ in range(2)]
    try:
        for s in made:
            s.wait_ready()
        yield made
    finally:
        for s in made:
            s.kill()


@pytest.fixture(scope="module")
def tritons(servers: list[TritonServer]) -> list[TritonServer]:
    return servers[:3]


def triton_answers(server: TritonServer, xs: np.ndarray) -> np.ndarray:
    """Triton's own answers to `xs`, asked by its own client (8 inputs a request: the model's max_batch_size)."""
    import tritonclient.http as th

    client = th.InferenceServerClient(f"127.0.0.1:{server.port}")
    out = []
    try:
        for i in range(0, len(xs), 8):
            inp = th.InferInput("x", [len(xs[i:i + 8]), 4], "FP32")
            inp.set_data_from_numpy(np.ascontiguousarray(xs[i:i + 8], dtype=np.float32))
            out.append(client.infer(server.name, [inp]).as_numpy("y"))
    finally:
        client.close()
    return np.concatenate(out)


def test_the_fleet_check_reads_tritons_own_metadata_and_configuration(tritons) -> None:
    fleet = check_fleet([s.url for s in tritons])
    sig = fleet.signature
    assert (fleet.in_shape, fleet.out_shape, sig.batched, fleet.codable) == ((4,), (3,), True, True)
    assert (sig.input.name, sig.input.datatype, sig.output.name) == ("x", "FP32", "y")
    assert sig.max_batch == 8  # Triton's /config max_batch_size, not the default
    model = fleet.model()
    np.testing.assert_array_equal(model(X), triton_answers(tritons[0], X).astype(np.float64))  # 24 in 3 requests
    np.testing.assert_allclose(model(X), smooth(X), rtol=1e-5, atol=1e-6)  # the model the test defined
    other = RawReplica(smooth, name="m", in_shape=(5,), out_shape=(3,))  # the same names, another input shape
    try:
        with pytest.raises(ConfigError, match=rf"upstreams serve different models: {tritons[0].url} has input x FP32 "
                                              r"\[-1, 4\] -> output y FP32 \[-1, 3\], .* has input x FP32 \[-1, 5\]"):
            check_fleet([tritons[0].url, other.url])
    finally:
        other.kill()


@pytest.mark.parametrize("scheme", ["uncoded", "replication", "hedged", None])
def test_every_answer_that_is_not_degraded_is_tritons_own(tritons, scheme: str | None) -> None:
    own = triton_answers(tritons[1], X)
    K = 2 if scheme is None else None  # the default scheme (sgcc) codes K = 2 inputs over the 3 replicas
    svc = Service.build(None, scheme=scheme, K=K, upstreams=[s.url for s in tritons], gate="off")
    try:
        assert svc.config.workers == 3 and svc.in_shape == (4,)
        futs = [svc.submit(x) for x in X]
        reqs = [f.result(timeout=30) for f in futs]
    finally:
        svc.close()
    assert [r.status for r in reqs] == [200] * len(X)
    exact = [i for i, r in enumerate(reqs) if not r.degraded]
    assert exact if scheme is not None else True
    for i in exact:
        np.testing.assert_array_equal(reqs[i].output, own[i])  # bit for bit: Triton's float32 answer
    for i, r in enumerate(reqs):  # a degraded answer (default scheme) is a decode: finite, near the model's
        assert r.output.shape == (3,) and np.all(np.isfinite(r.output))
        assert np.all(np.abs(r.output - own[i]) <= 2 * np.ptp(own, axis=0)), (i, r.output, own[i])


@pytest.mark.slow  # kills Triton servers
@pytest.mark.parametrize("scheme", ["uncoded", None])
def test_a_triton_replica_killed_mid_run_loses_no_request(servers, scheme: str | None) -> None:
    """The victim's own model takes 50 ms a call, so requests are in flight on it when it is killed (SIGKILL to
    tritonserver and its model's processes)."""
    tritons, victim = servers[:3], servers[3 if scheme == "uncoded" else 4]
    own = triton_answers(tritons[0], X)
    svc = Service.build(None, scheme=scheme, K=2 if scheme is None else None, gate="off",
                        upstreams=[victim.url] + [s.url for s in tritons])
    reqs: list = []
    try:
        futs = []
        killer = threading.Timer(0.3, victim.kill)
        killer.start()
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:  # 24 inputs every 0.1 s, before, during and after the kill
            futs += [svc.submit(x) for x in X]
            time.sleep(0.1)
        killer.join()
        reqs = [f.result(timeout=30) for f in futs]
        counts = dict(svc.pool.counts)
    finally:
        svc.close()
        victim.kill()
    assert not victim.alive and len(reqs) >= 4 * len(X)
    assert [r.status for r in reqs] == [200] * len(reqs), {r.status for r in reqs}
    for i, r in enumerate(reqs):
        if not r.degraded:
            np.testing.assert_array_equal(r.output, own[i % len(X)])
    assert counts.get("crash", 0) >= 1, counts  # the victim's tasks were lost, and answered elsewhere


def test_binary_tensors_go_to_a_replica_that_offers_them_and_answer_as_json_does(tritons) -> None:
    fleet = check_fleet([tritons[2].url])
    sig = fleet.signature
    binary, plain = Replica(parse_upstream(tritons[2].url)), Replica(parse_upstream(tritons[2].url), binary=False)
    try:
        assert binary.takes_binary(sig) and not plain.takes_binary(sig)  # Triton's GET /v2 lists the extension
        own = triton_answers(tritons[2], X).astype(np.float64)
        np.testing.assert_array_equal(binary.infer_rows(sig, X), own)
        np.testing.assert_array_equal(plain.infer_rows(sig, X), own)
    finally:
        binary.close()
        plain.close()
    raw = RawReplica(smooth, name="m")  # a server without the extension (its GET /v2 is 404): JSON
    rep = Replica(parse_upstream(raw.url))
    try:
        assert not rep.takes_binary(sig) and rep.binary is False
        np.testing.assert_allclose(rep.infer_rows(sig, X[:3]), smooth(X[:3]), rtol=1e-6, atol=1e-6)
    finally:
        rep.close()
        raw.kill()


def test_a_binary_answer_is_read_by_its_sizes_and_refused_when_they_do_not_fit() -> None:
    sig = Signature(Tensor("x", "FP32", (4,)), Tensor("y", "FP16", (2,)), True, 8)
    body, head = encode_binary_request(sig, X[:2])
    meta = json.loads(body[:head])
    assert meta["inputs"][0]["parameters"] == {"binary_data_size": 32} and meta["outputs"][0]["parameters"]
    np.testing.assert_array_equal(np.frombuffer(body[head:], dtype="<f4").reshape(2, 4), X[:2])
    y = np.array([[1.5, -2.0], [0.25, 8.0]], dtype="<f2")
    other = {"name": "z", "datatype": "FP32", "shape": [2, 1], "parameters": {"binary_data_size": 8}}
    mine = {"name": "y", "datatype": "FP16", "shape": [2, 2], "parameters": {"binary_data_size": 8}}
    blob = np.zeros(2, dtype="<f4").tobytes() + y.tobytes()  # another output's bytes first
    np.testing.assert_array_equal(decode_response(sig, {"outputs": [other, mine]}, 2, blob), y.astype(np.float64))
    with pytest.raises(RemoteError, match="does not lie within"):
        decode_response(sig, {"outputs": [other, mine]}, 2, blob[:12])
    with pytest.raises(RemoteError, match="not whole FP16 values"):
        decode_response(sig, {"outputs": [{**mine, "parameters": {"binary_data_size": 7}}]}, 2, blob)
    with pytest.raises(RemoteError, match="cannot read"):
        decode_response(sig, {"outputs": [{**mine, "datatype": "BYTES"}]}, 2, blob)
    with pytest.raises(RemoteError, match="without JSON data"):
        decode_response(sig, {"outputs": [mine]}, 2)  # binary sizes, but no bytes
    with pytest.raises(RemoteError, match=r"shape \[2, 4\], expected \[2, 2\]"):
        decode_response(sig, {"outputs": [{**mine, "shape": [2, 4], "parameters": {"binary_data_size": 16}}]}, 2,
                        y.tobytes() * 2)


XC = np.random.default_rng(11).normal(size=(16, 4)).astype(np.float32)


def client_answers(port: int, model: str, xs: np.ndarray, binary: bool) -> tuple[np.ndarray, list[bool]]:
    """What a tritonclient user does: read the model's metadata and configuration, then infer `xs` in batches of
    the configured max_batch_size (JSON or binary tensors); (the outputs, whether each was degraded)."""
    th = pytest.importorskip("tritonclient.http")
    client = th.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(model)
        meta, config = client.get_model_metadata(model), client.get_model_config(model)
        (inp,), (out,) = meta["inputs"], meta["outputs"]
        # the replicas' own names and shapes, through gencc as from Triton: a client written for Triton runs as is
        assert (inp["name"], inp["datatype"], inp["shape"], out["name"], out["shape"]) == ("x", "FP32", [-1, 4], "y",
                                                                                           [-1, 3])
        step = int(config["max_batch_size"])
        ys, degraded = [], []
        for i in range(0, len(xs), step):
            part = np.ascontiguousarray(xs[i:i + step])
            t = th.InferInput(inp["name"], list(part.shape), "FP32")
            t.set_data_from_numpy(part, binary_data=binary)
            res = client.infer(model, [t], outputs=[th.InferRequestedOutput(out["name"], binary_data=binary)])
            ys.append(res.as_numpy(out["name"]))
            d = res.get_response().get("parameters", {}).get("degraded", False)  # gencc's answer says; Triton's not
            degraded += d if isinstance(d, list) else [d] * len(part)
        return np.concatenate(ys), degraded
    finally:
        client.close()


def wait_ready(proc: subprocess.Popen, port: int, model: str, within_s: float = 60.0) -> None:
    th = pytest.importorskip("tritonclient.http")
    client = th.InferenceServerClient(f"127.0.0.1:{port}")
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if client.is_model_ready(model):
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.2)
    finally:
        client.close()
    out = proc.stdout.read() if proc.poll() is not None and proc.stdout else f"not ready in {within_s:g} s"
    raise AssertionError(out)


@pytest.mark.slow  # starts gencc serve as a process
def test_tritonclient_talks_to_gencc_in_front_of_triton_as_to_triton(tritons) -> None:
    """`gencc serve --upstream ...` as a user runs it, over the three Triton replicas; Triton's own HTTP client
    (readiness, metadata, configuration, infer with JSON and with binary tensors) against both."""
    port = free_port()
    args = [a for s in tritons for a in ("--upstream", s.url)]
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", *args, "--K", "2", "--gate", "off",
                             "--port", str(port), "--name", "m"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(proc, port, "m")
        for binary in (False, True):
            own, none = client_answers(tritons[0].port, "m", XC, binary)
            got, degraded = client_answers(port, "m", XC, binary)
            assert not any(none) and got.shape == own.shape == (16, 3) and got.dtype == own.dtype == np.float32
            exact = [i for i, d in enumerate(degraded) if not d]
            assert exact
            np.testing.assert_array_equal(got[exact], own[exact])  # bit for bit: Triton's answers
            assert np.all(np.isfinite(got)) and np.all(np.abs(got - own) <= 2 * np.ptp(own, axis=0))
    finally:
        stop_process(proc)
