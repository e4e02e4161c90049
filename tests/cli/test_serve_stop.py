"""`gencc serve` stops cleanly: SIGTERM or SIGINT while requests are in flight answers every one of them, then the
process says so in one line and exits 0 (uvicorn's own `run` would end it by the signal again: exit 143, or 15
under Ray); a server that cannot start still exits non-zero. The same on Ray: tests/engine/ray/."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


MODEL = """
import numpy as np

W = np.linspace(-1, 1, 30).reshape(10, 3)


def f(x):
    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    return np.tanh(x @ W.astype(np.float32)).astype(np.float64)
"""


def own_model(tmp_path: Path) -> tuple[list[str], dict, object]:
    """The tests' own model (a module in tmp_path): its `gencc serve` options, an environment that imports it,
    and the model itself."""
    import importlib.util

    (tmp_path / "stop_model.py").write_text(MODEL)
    spec = importlib.util.spec_from_file_location("stop_model", tmp_path / "stop_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return ["--model", "stop_model:f", "--input-shape", "2,5"], env, mod.f


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_while_busy(argv: list[str], sig: int, env: dict, wait_healthy, x: list, start_s: float = 120
                    ) -> tuple[int, str, list]:
    """Start `gencc serve argv` on a free port, send three requests of input `x` that each take about 1.5 s, send
    `sig` while they are in flight; (exit status, output, the requests' HTTP statuses)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", *argv, "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    statuses: list = []
    try:
        wait_healthy(proc, url, start_s)

        def ask() -> None:
            try:
                statuses.append(httpx.post(url + "/predict", json={"input": x}, timeout=60).status_code)
            except httpx.HTTPError as e:
                statuses.append(repr(e))

        clients = [threading.Thread(target=ask) for _ in range(3)]
        for c in clients:
            c.start()
        deadline = time.monotonic() + 10
        while httpx.get(url + "/healthz", timeout=5).json()["in_flight"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(sig)
        for c in clients:
            c.join(60)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, statuses


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_answers_the_requests_in_flight_and_exits_0(sig, tmp_path: Path, wait_healthy) -> None:
    model, env, _ = own_model(tmp_path)
    rc, out, statuses = stop_while_busy([*model, "--scheme", "replication", "--workers", "2", "--service-ms", "1500"],
                                        sig, env, wait_healthy, np.ones((2, 5)).tolist())
    name = signal.Signals(sig).name
    assert rc == 0, out
    assert statuses == [200, 200, 200], (statuses, out)
    assert out.count(f"stopped on {name}: answered the requests in flight") == 1, out
    assert " ERROR " not in out and "Traceback" not in out, out


def test_a_signal_while_starting_stops_it_with_exit_0(tmp_path: Path) -> None:
    """SIGTERM while the model loads (its module takes long to import) is a requested stop: exit 0, one line
    saying so, no error; the same model failing to load instead exits non-zero with its reason."""
    marker = tmp_path / "loading"
    (tmp_path / "slow_model.py").write_text(MODEL + f"""
import os, time
if os.environ.get("SLOW_MODEL_FAILS"):
    raise RuntimeError("slow_model: the weights are missing")
open({str(marker)!r}, "w").close()
time.sleep(60)
""")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    argv = [sys.executable, "-m", "gencc.cli", "serve", "--model", "slow_model:f", "--input-shape", "2,5",
            "--scheme", "replication", "--workers", "2", "--port", str(free_port())]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert out.count("stopped on SIGTERM while starting") == 1 and took < 10, (took, out)
    assert " ERROR " not in out and "Traceback" not in out, out
    failed = subprocess.run(argv, env={**env, "SLOW_MODEL_FAILS": "1"}, capture_output=True, text=True, timeout=60)
    assert failed.returncode not in (0, None) and "the weights are missing" in failed.stdout + failed.stderr


def test_a_start_runs_beside_the_signals_and_its_outcome_comes_back() -> None:
    """The start runs in its own thread, so that nothing it calls (Ray's driver) takes SIGTERM over: a signal
    stops the wait at once, even while the start blocks; otherwise its value or its exception comes back, and
    the handlers there before are back."""
    from gencc.cli.serve import start_or_stop
    from gencc.errors import StartStopped

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)  # (SIGINT is ignored under a
    for sig in (signal.SIGTERM, signal.SIGINT):  # shell's background job: whatever they were, they come back)
        threading.Timer(0.3, lambda sig=sig: os.kill(os.getpid(), sig)).start()
        t0 = time.monotonic()
        with pytest.raises(StartStopped) as info:
            start_or_stop(lambda: time.sleep(5))
        assert info.value.name == signal.Signals(sig).name and time.monotonic() - t0 < 2
    assert start_or_stop(lambda: 42) == 42
    for error in (SystemExit(3), ValueError("bad input")):
        def fail(error=error):
            raise error
        with pytest.raises(type(error)):
            start_or_stop(fail)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_server_that_cannot_start_exits_non_zero() -> None:
    """uvicorn cannot bind a port held by another socket: serve_until_stopped lets its non-zero SystemExit through
    (the command then exits with it), never as a clean stop."""
    import uvicorn
    from fastapi import FastAPI

    from gencc.cli.serve import serve_until_stopped

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as info:
            serve_until_stopped(lambda: uvicorn.run(FastAPI(), host="127.0.0.1", port=port, log_level="critical"))
    assert info.value.code not in (0, None)


def test_a_signal_that_uvicorn_raises_again_after_its_shutdown_only_stops_it() -> None:
    """What uvicorn does once it has shut down on a signal, raising it again, ends neither the process nor the
    command: the signal is returned by name."""
    from gencc.cli.serve import serve_until_stopped

    before = signal.getsignal(signal.SIGINT)
    assert serve_until_stopped(lambda: signal.raise_signal(signal.SIGTERM)) == "SIGTERM"
    assert serve_until_stopped(lambda: signal.raise_signal(signal.SIGINT)) == "SIGINT"
    assert serve_until_stopped(lambda: None) is None
    assert signal.getsignal(signal.SIGINT) == before  # the handlers there before are back


@pytest.mark.slow
def test_two_front_ends_one_killed_mid_load_the_other_answers_every_retry(tmp_path: Path, wait_healthy) -> None:
    """Two `gencc serve` processes over workers of their own; a client sends to both in turn and retries a request
    on the other when its front end gives no HTTP answer. One front end is killed (SIGKILL) under load: the
    requests in flight there, and those sent to it afterwards, end in a transport error (no status: the client
    cannot tell whether a request ran, which for a pure function does not matter), and every request is answered
    200, right, by one front end or the other."""
    model, env, f = own_model(tmp_path)
    X = np.random.default_rng(0).uniform(-1, 1, size=(40, 2, 5))
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", *model, "--scheme", "replication",
                               "--workers", "2", "--service-ms", "100", "--port", str(p)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for p in ports]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    answers: dict[int, tuple[int, list]] = {}
    lost: list[str] = []  # what the client saw from the killed front end, per request in flight there
    try:
        for proc, url in zip(procs, urls, strict=True):
            wait_healthy(proc, url, 120)

        def ask(i: int) -> None:
            for k in (i % 2, 1 - i % 2):  # its own front end, then the other
                try:
                    r = httpx.post(urls[k] + "/predict", json={"input": X[i].tolist()}, timeout=60)
                except httpx.TransportError as e:
                    lost.append(type(e).__name__)
                    continue
                answers[i] = (r.status_code, r.json().get("output"))
                return

        clients = []
        for i in range(len(X)):  # 20 a second, each about 0.1 s: one or two in flight on each front end
            if i == 20:
                procs[0].kill()
            clients.append(threading.Thread(target=ask, args=(i,)))
            clients[-1].start()
            time.sleep(0.05)
        for c in clients:
            c.join(90)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert sorted(answers) == list(range(len(X))) and {s for s, _ in answers.values()} == {200}
    np.testing.assert_allclose(np.array([answers[i][1] for i in range(len(X))]), f(X), rtol=1e-5, atol=1e-5)
    assert lost and set(lost) <= {"RemoteProtocolError", "ReadError", "ConnectError"}, lost
    assert procs[1].returncode == 0
