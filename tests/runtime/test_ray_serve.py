"""`gencc serve --backend ray` from outside: it re-runs itself inside a loopback-only network namespace (as
`gencc run` does), the port bound outside and handed over, so a client here is answered by a server whose Ray
sees only `lo`; SIGTERM shuts it down and every temp folder it made is gone (issue 18)."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gencc.engine.ray.namespace import can_unshare, in_loopback_namespace

pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.slow
def test_serve_on_ray_runs_in_the_loopback_namespace_and_cleans_up(tmp_path: Path, wait_healthy) -> None:
    ok, why = can_unshare()
    if not ok or in_loopback_namespace():
        pytest.skip(f"needs a loopback-only namespace made from outside one ({why})")
    from gencc.workloads import load

    cache = tmp_path / "cache"
    w = load("digits-mlp", progress=False, cache_dir=cache)  # the quickest trained workload
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tmp_path / "t"
    tmp.mkdir()
    before = set(glob.glob("/tmp/gcr*"))
    env = {**os.environ, "GENCC_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", "--workload", "digits-mlp", "--backend",
                             "ray", "--scheme", "replication", "--workers", "2", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, 150)
        inner = [c for c in _children(proc.pid) if "serve" in Path(f"/proc/{c}/cmdline").read_text()]
        assert inner and os.readlink(f"/proc/{inner[0]}/ns/net") != os.readlink("/proc/self/ns/net")
        x = w.X_test[:3]
        got = [httpx.post(url + "/predict", json={"input": xi.tolist()}, timeout=30).json()["output"] for xi in x]
        np.testing.assert_allclose(np.array(got), w.f(x), rtol=1e-5, atol=1e-5)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert "loopback-only network namespace" in out and f"at {url}" in out, out
    assert list(tmp.iterdir()) == []  # the namespace's TMPDIR and Ray's folders inside it are gone
    assert set(glob.glob("/tmp/gcr*")) <= before
