"""The API key: every request checked when one is set (401 otherwise), `gencc serve` refusing a non-loopback
--host without one (and warning with one), loopback without a key staying open."""

from __future__ import annotations

import logging
import socket

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from gencc.cli import app as cli  # noqa: E402
from gencc.cli.serve import is_loopback  # noqa: E402
from gencc.engine import ThreadBackend, Workers  # noqa: E402
from gencc.serving import Service, create_app, make_dispatcher  # noqa: E402
from gencc.serving._http.limits import Limits, authorized  # noqa: E402

KEY = "s3cret-key-for-tests"


def double(x):
    """A model gencc never saw: doubles a (B, 3) batch."""
    return 2.0 * np.asarray(x, dtype=np.float64)


double.batched = True


def service():
    return Service(Workers(2, ThreadBackend({"f": double}, dtype=np.float32)),
                   lambda env: make_dispatcher("uncoded", env))


def test_every_request_needs_the_key_when_one_is_set():
    with TestClient(create_app(service(), limits=Limits(api_key=KEY), in_shape=(3,))) as c:
        for path in ("/healthz", "/metrics", "/openapi.json"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers={"Authorization": "Bearer wrong-key-123"}).status_code == 401
            assert c.get(path, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        r = c.post("/predict", json={"input": [1, 2, 3]})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer" and "API key" in r.json()["detail"]
        r = c.post("/predict", json={"input": [1, 2, 3]}, headers={"X-API-Key": KEY})
        assert r.status_code == 200 and r.json()["output"] == [2.0, 4.0, 6.0]
        r = c.post("/predict", json={"input": [1, 2, 3]}, headers={"Authorization": f"bearer {KEY}"})
        assert r.status_code == 200


def test_without_a_key_loopback_stays_open():
    with TestClient(create_app(service(), in_shape=(3,))) as c:
        assert c.get("/healthz").status_code == 200
        assert c.post("/predict", json={"input": [1, 2, 3]}).json()["output"] == [2.0, 4.0, 6.0]


def test_key_comparison():
    key = KEY.encode()
    assert authorized({b"authorization": b"Bearer " + key}, key)
    assert authorized({b"x-api-key": key}, key)
    assert not authorized({b"authorization": b"Bearer " + key[:-1]}, key)
    assert not authorized({b"authorization": key}, key)  # no scheme
    assert not authorized({}, key)
    with pytest.raises(ValueError, match="8 characters"):
        Limits(api_key="short")


def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_off_loopback_needs_a_key_then_warns(monkeypatch, caplog):
    from gencc.serving import service as service_module

    def stop(*a, **k):
        raise RuntimeError("stop here: the access check passed")

    monkeypatch.setattr(service_module.Service, "build", stop)
    monkeypatch.delenv("GENCC_API_KEY", raising=False)
    runner = CliRunner()
    port = str(free_port())
    r = runner.invoke(cli, ["serve", "--host", "0.0.0.0", "--port", port])
    assert r.exit_code == 2 and "--api-key" in r.output and "GENCC_API_KEY" in r.output, r.output
    assert "Traceback" not in r.output
    r = runner.invoke(cli, ["serve", "--host", "0.0.0.0", "--port", port, "--api-key", "short"])
    assert r.exit_code == 2 and "8 characters" in r.output
    caplog.set_level(logging.WARNING, logger="gencc")
    r = runner.invoke(cli, ["serve", "--host", "0.0.0.0", "--port", port], env={"GENCC_API_KEY": KEY})
    assert isinstance(r.exception, RuntimeError) and "access check passed" in str(r.exception)
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any("0.0.0.0, not loopback: every request must carry the API key" in m for m in warned), warned
    caplog.clear()
    r = runner.invoke(cli, ["serve", "--port", port])  # loopback, no key: open, no warning
    assert isinstance(r.exception, RuntimeError)
    assert not [rec for rec in caplog.records if rec.levelno == logging.WARNING]  # (the ERROR is our stop)


def test_the_load_generator_sends_the_key():
    from gencc.loadgen.load import run_http

    from .serving_helpers import start_server

    server, th, port = start_server(create_app(service(), limits=Limits(api_key=KEY), in_shape=(3,)))
    try:
        url = f"http://127.0.0.1:{port}"
        inputs = [[1.0, 2.0, 3.0]]
        with_key = run_http(url, rate=40, duration=0.3, inputs=inputs, api_key=KEY)
        without = run_http(url, rate=40, duration=0.3, inputs=inputs)
    finally:
        server.should_exit = True
        th.join(20)
    assert with_key and {r["status"] for r in with_key} == {200}
    assert without and {r["status"] for r in without} == {401}
    assert all("API key" in r["error"] for r in without)


def test_an_app_needs_the_input_shape_of_a_bare_service():
    svc = service()
    try:
        with pytest.raises(ValueError, match="in_shape"):
            create_app(svc)
    finally:
        svc.close()
