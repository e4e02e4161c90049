"""Joining a Ray cluster fails fast and names the address: nothing listening there ends in
`gencc.errors.ClusterUnreachable` (a GenccError) within the connection timeout (Python) or exit 2 (the command
line), before Ray is started; a loopback address is used as given, not rewritten to the machine's network
address; a private Ray's credentials stay off the disk. No Ray starts here (the Ray runs are in
test_ray_reliability.py, inside the loopback-only namespace)."""

from __future__ import annotations

import socket
import time

import pytest

import gencc
from gencc.engine.ray import start as backend
from gencc.errors import ClusterUnreachable, ConfigError


def dead_address() -> str:
    """A loopback address where nothing listens (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("timeout", [1.0])
def test_a_dead_address_fails_within_the_timeout_naming_it(timeout: float) -> None:
    from gencc.runtime import RayExecutor

    address = dead_address()
    ex = RayExecutor(num_actors=2, address=address, connect_timeout=timeout)
    t0 = time.monotonic()
    with pytest.raises(gencc.GenccError) as info:
        ex.start(lambda x: x, 2)
    took = time.monotonic() - t0
    assert isinstance(info.value, ClusterUnreachable) and isinstance(info.value, ConnectionError)
    assert info.value.address == address and address in str(info.value)
    assert timeout - 0.5 <= took <= timeout + 1.5, took  # it tried again until the bound, and no longer


def test_an_address_that_listens_is_reached_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        t0 = time.monotonic()
        backend.reach_cluster(f"127.0.0.1:{s.getsockname()[1]}", 5.0)
        backend.reach_cluster(f"ray://127.0.0.1:{s.getsockname()[1]}", 5.0)
        assert time.monotonic() - t0 < 2.0
    backend.reach_cluster("auto", 0.1)  # Ray finds that one itself


def test_the_timeout_comes_from_the_environment_in_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backend.CONNECT_ENV, raising=False)
    assert backend.connect_timeout_s() == backend.CONNECT_TIMEOUT_S
    monkeypatch.setenv(backend.CONNECT_ENV, "1500")
    assert backend.connect_timeout_s() == 1.5
    for bad in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv(backend.CONNECT_ENV, bad)
        with pytest.raises(ConfigError, match=backend.CONNECT_ENV):
            backend.connect_timeout_s()


@pytest.mark.parametrize("command", ["run", "serve"])
def test_the_command_line_exits_2_naming_the_address(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("fastapi")
    from typer.testing import CliRunner

    from gencc.cli import app

    address = dead_address()
    monkeypatch.setenv(backend.CONNECT_ENV, "800")
    args = [command, "--backend", "ray", "--address", address, "--workload", "digits-mlp"]
    if command == "serve":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args += ["--port", str(s.getsockname()[1]), "--scheme", "replication", "--workers", "2"]
    t0 = time.monotonic()
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    flat = " ".join(r.output.split())
    assert f"no Ray cluster answers at {address}" in flat and "Traceback" not in r.output, r.output
    assert time.monotonic() - t0 < 60


def test_a_loopback_address_is_used_as_given() -> None:
    """Ray turns 127.0.0.1 in an address it joins into the address it finds for the machine (a UDP connect
    towards 8.8.8.8) unless its cluster mode is off: joining a loopback address, it is off while Ray starts."""
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants, services

    assert backend._loopback_host("127.0.0.1:6379") and backend._loopback_host("ray://localhost:10001")
    assert not backend._loopback_host("10.1.2.3:6379") and not backend._loopback_host("auto")
    before = ray_constants.ENABLE_RAY_CLUSTER
    with backend._loopback_node_address(ray, force=True):
        assert services.canonicalize_bootstrap_address("127.0.0.1:6379") == "127.0.0.1:6379"
    assert ray_constants.ENABLE_RAY_CLUSTER == before


def test_a_private_ray_keeps_its_credentials_off_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(backend, "in_loopback_namespace", lambda: True)
    backend.private_auth()
    assert backend.os.environ["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in backend.os.environ
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.setattr(backend, "in_loopback_namespace", lambda: False)
    backend.private_auth()
    token = backend.os.environ["RAY_AUTH_TOKEN"]
    assert backend.os.environ["RAY_AUTH_MODE"] == "token" and len(token) == 64 and int(token, 16) >= 0
    backend.private_auth()  # the mode is set now: the user's (or this) choice stands
    assert backend.os.environ["RAY_AUTH_TOKEN"] == token
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/somewhere/token")
    backend.private_auth()  # a token of the user's: used, not replaced
    assert "RAY_AUTH_TOKEN" not in backend.os.environ and backend.os.environ["RAY_AUTH_MODE"] == "token"
