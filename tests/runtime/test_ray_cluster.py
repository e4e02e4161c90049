"""RayExecutor against an existing cluster (address=), started here as `ray start --head --block`.

Only the process started here is stopped, by its pid (never `ray stop`).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
import runtime_helpers
from runtime_helpers import reference, smooth

import gencc
from gencc.runtime import RayExecutor, run

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(runtime_helpers)  # tests/ is not importable on the actors


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    tmp = tempfile.mkdtemp(prefix="gencc-rc-")
    port = 6379  # free: this runs in its own network namespace
    exe = os.path.join(os.path.dirname(sys.executable), "ray")
    proc = subprocess.Popen(
        [exe, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    address = f"127.0.0.1:{port}"
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen, deadline = [], time.time() + 90
    while time.time() < deadline and proc.poll() is None:  # wait until the head reports it is up
        try:
            seen.append(lines.get(timeout=1))
        except queue.Empty:
            continue
        if "Ray runtime started" in seen[-1]:
            break
    else:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
        pytest.fail("ray start did not come up:\n" + "".join(seen))
    yield address
    proc.terminate()  # `ray start --block` stops the processes it started; nothing else is touched
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the process group this fixture started


def test_existing_cluster(cluster):
    X = np.random.default_rng(0).normal(size=(4, 3))
    code = gencc.BACC(K=4, N=6)
    ex = RayExecutor(num_actors=3, address=cluster)
    try:
        r = run(smooth, X, code, ex, order=False)
        assert ray.get_runtime_context().gcs_address == cluster
    finally:
        ex.close()
    assert not ray.is_initialized()
    np.testing.assert_allclose(r.outputs, reference(code, X, range(6)), atol=1e-12)
