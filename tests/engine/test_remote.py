"""The remote backend: workers that are model replicas reached over the Open Inference Protocol, against real HTTP
servers on loopback (tests/engine/oip_replica.py) serving a model defined here; their real faults end as the
engine's outcomes (lost, failed, non-finite), never as a crash or a wrong answer."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from gencc.engine import BACKENDS, Task, backend_name, make_backend, make_pool
from gencc.engine.remote import RemoteError, check_fleet, check_upstreams, parse_upstream, read_upstreams
from gencc.engine.remote_backend import RemoteBackend
from gencc.errors import ConfigError
from gencc.faults import InjectedFault

from .oip_replica import dead_url, linear

X = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)


def test_an_upstream_url_names_a_model_route() -> None:
    u = parse_upstream("http://127.0.0.1:8001/v2/models/resnet/versions/3")
    assert (u.base, u.name, u.version) == ("http://127.0.0.1:8001", "resnet", "3")
    assert u.path == "/v2/models/resnet/versions/3"
    u = parse_upstream("https://gw.local/prefix/v2/models/m")
    assert (u.base, u.name, u.version) == ("https://gw.local/prefix", "m", None)
    for bad in ("127.0.0.1:8001", "http://h:1/v1/models/m", "ftp://h/v2/models/m", "http://h:x/v2/models/m",
                "http://h:1/v2/models/m?x=1", "http:///v2/models/m", "", 5):
        with pytest.raises(ConfigError, match="an upstream") as e:
            parse_upstream(bad)  # type: ignore[arg-type]
        assert e.value.field == "upstreams"
    with pytest.raises(ConfigError, match="named twice"):
        check_upstreams(["http://h:1/v2/models/m", "http://H:1/v2/models/m"])


def test_an_upstreams_file_lists_one_url_a_line(tmp_path) -> None:
    f = tmp_path / "ups.txt"
    f.write_text("# the fleet\nhttp://h:1/v2/models/m\n\n  http://h:2/v2/models/m  \n")
    assert read_upstreams(f) == ["http://h:1/v2/models/m", "http://h:2/v2/models/m"]
    f.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="names no upstream"):
        read_upstreams(f)
    with pytest.raises(ConfigError, match="cannot read"):
        read_upstreams(tmp_path / "missing.txt")


def test_the_fleet_is_read_from_the_replicas_metadata(replicas) -> None:
    a, b = replicas(2)
    fleet = check_fleet([a.url, b.url])
    sig = fleet.signature
    assert (fleet.in_shape, fleet.out_shape, sig.batched, sig.max_batch, fleet.codable) == ((4,), (3,), True, 8, True)
    assert (sig.input.name, sig.output.name, fleet.up) == ("x", "y", [True, True])
    model = fleet.model()
    assert model.in_shape == (4,) and model.out_shape == (3,)
    np.testing.assert_allclose(model(X), linear(X), rtol=1e-6, atol=1e-6)  # 20 inputs in requests of 8


def test_an_unreachable_replica_is_refused_unless_a_degraded_start_is_allowed(replicas) -> None:
    (a,) = replicas(1)
    gone = dead_url()
    with pytest.raises(ConfigError, match=f"upstream {gone} .*unreachable or not ready") as e:
        check_fleet([a.url, gone])
    assert e.value.field == "upstreams"
    fleet = check_fleet([a.url, gone], allow_degraded=True)
    assert fleet.up == [True, False] and fleet.in_shape == (4,)
    with pytest.raises(ConfigError, match="no upstream answered"):
        check_fleet([gone], allow_degraded=True)


def test_replicas_of_different_models_are_refused(replicas) -> None:
    (a,) = replicas(1)
    (b,) = replicas(1, in_shape=(5,))
    with pytest.raises(ConfigError, match=rf"upstreams serve different models: {a.url} has input x FP32 \[-1, 4\]"):
        check_fleet([a.url, b.url])


def test_models_gencc_cannot_serve_are_refused_naming_the_replica(replicas) -> None:
    (s,) = replicas(1, datatype="BYTES")
    with pytest.raises(ConfigError, match=f"upstream {s.url}: its input x is a string tensor"):
        check_fleet([s.url])
    (i,) = replicas(1, datatype="INT32")
    fleet = check_fleet([i.url])
    assert not fleet.codable  # integer inputs: copies only (serving refuses coded schemes over them)
    backend = RemoteBackend(fleet)
    try:
        np.testing.assert_allclose(backend.run(0, Task(0, np.array([1.0, 2, 3, 4])), 0, 1, "", 0, threading.Event()),
                                   linear(np.array([[1.0, 2, 3, 4]]))[0])
        with pytest.raises(ValueError, match="whole numbers"):
            backend.run(0, Task(0, np.array([1.5, 2, 3, 4])), 0, 1, "", 0, threading.Event())
    finally:
        backend.close()


def _run(backend: RemoteBackend, worker: int, x: np.ndarray, block: bool = False) -> np.ndarray:
    return backend.run(worker, Task(worker, x, block=block), 0.0, 1.0, "", 0.0, threading.Event())


def test_a_task_is_one_infer_request_and_a_block_respects_the_max_batch(replicas) -> None:
    a, b = replicas(2)
    backend = make_backend("remote", 2, upstreams=[a.url, b.url])
    try:
        assert isinstance(backend, RemoteBackend)
        y = _run(backend, 1, X[3])
        assert y.dtype == np.float64 and y.shape == (3,)
        np.testing.assert_array_equal(y, linear(X[3:4]).astype(np.float32)[0])
        assert (a.calls, b.calls) == (0, 1)
        block = _run(backend, 0, X, block=True)
        np.testing.assert_array_equal(block, linear(X).astype(np.float32))
        assert a.batches == [8, 8, 4]  # the replica's max_batch_size, from its configuration
    finally:
        backend.close()


@pytest.mark.parametrize(("mode", "error", "match"), [
    ("nan", InjectedFault, "nan"),
    ("shape", RemoteError, r"output y has shape \[1, 2\], expected \[1, 3\]"),
    ("500", RemoteError, "answered 500"),
    ("garbage", RemoteError, "not JSON"),
    ("reset", ConnectionError, "unreachable"),
])
def test_a_replicas_fault_fails_the_task_never_the_master(replicas, mode: str, error: type, match: str) -> None:
    (a,) = replicas(1)
    backend = RemoteBackend([a.url], probe_s=0.05)
    try:
        a.mode = mode
        with pytest.raises(error, match=match):
            _run(backend, 0, X[0])
        a.mode = "ok"  # the replica recovered (a lost one once its ready route answers): the next task is answered
        end = time.monotonic() + 5
        while not backend.can_serve(0) and time.monotonic() < end:
            time.sleep(0.02)
        np.testing.assert_array_equal(_run(backend, 0, X[0]), linear(X[:1]).astype(np.float32)[0])
    finally:
        backend.close()


def test_a_killed_replica_loses_its_task_and_a_slow_one_times_out(replicas) -> None:
    def slow(x):
        time.sleep(3.0)  # the model's own slowness
        return linear(x)

    (a,) = replicas(1)
    (s,) = replicas(1, model=slow)
    backend = RemoteBackend([a.url, s.url], read_s=0.3)
    try:
        t0 = time.monotonic()
        with pytest.raises(RemoteError, match="timed out"):
            _run(backend, 1, X[0])
        assert time.monotonic() - t0 < 2.0  # the 0.3 s read timeout, far from the 3 s call
        a.kill()
        with pytest.raises(ConnectionError, match="unreachable"):
            _run(backend, 0, X[0])
    finally:
        backend.close()


def test_on_the_engine_faults_are_stragglers_with_their_reason(replicas) -> None:
    a, b, c = replicas(3)
    pool = make_pool(3, make_backend("remote", 3, upstreams=[a.url, b.url, c.url]), mark_dead=False)
    done: list[Task] = []
    finished = threading.Event()

    def on_done(t: Task) -> None:
        done.append(t)
        if len(done) == 3:
            finished.set()

    try:
        b.mode, c.mode = "nan", "shape"
        pool.send_many((w, Task(x=X[w], fn="f", on_done=on_done)) for w in range(3))
        assert finished.wait(10)
        by = {t.worker: t for t in done}
        assert by[0].ok and np.array_equal(by[0].output, linear(X[:1]).astype(np.float32)[0])
        assert (by[1].ok, by[1].reason) == (False, "nan")
        assert (by[2].ok, by[2].reason) == (False, "raise") and "expected [1, 3]" in by[2].error
    finally:
        pool.close()


def test_the_factory_keeps_the_remote_backend_consistent(replicas) -> None:
    (a,) = replicas(1)
    assert "remote" in BACKENDS and backend_name("remote") == "remote"
    with pytest.raises(ValueError, match="the remote backend needs upstreams"):
        make_backend("remote", 1)
    with pytest.raises(ValueError, match="one worker per upstream: 1 upstreams, 2 workers"):
        make_backend("remote", 2, upstreams=[a.url])
    with pytest.raises(ValueError, match="upstreams apply to the remote backend"):
        make_backend("local", 1, upstreams=[a.url])
    with pytest.raises(ValueError, match="a parity model"):
        be = RemoteBackend([a.url])
        try:
            be.run(0, Task(0, X[0], fn=lambda x: x), 0, 1, "", 0, threading.Event())
        finally:
            be.close()

