"""MLServer (Seldon's Open Inference Protocol server, from PyPI) as a model replica of the tests: one `mlserver
start` process per replica on free loopback ports, serving `mlserver_model.py`, started and stopped here.

MLServer runs from its own virtual environment (its dependencies are not gencc's): the `mlserver` executable named
by GENCC_MLSERVER, else `.venv-mlserver/bin/mlserver` in the repository (`.ci/run` makes it:
`python -m venv .venv-mlserver && .venv-mlserver/bin/pip install mlserver`). Tests skip, saying so, where
neither exists."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def mlserver_executable() -> Path | None:
    """The `mlserver` command to run replicas with, or None where none is installed."""
    named = os.environ.get("GENCC_MLSERVER")
    path = Path(named) if named else REPO / ".venv-mlserver" / "bin" / "mlserver"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MLServerReplica:
    """One MLServer process serving the tests' model under `name`, its metadata declaring input `x` (FP32, shape
    [-1, 4]) and output `y` (FP64, [-1, 3]) unless `declare` is False (then it declares none, as a model-settings
    file without inputs does)."""

    def __init__(self, folder: Path, name: str = "m", *, sleep_s: float = 0.0, garbage: bool = False,
                 declare: bool = True):
        exe = mlserver_executable()
        if exe is None:
            raise RuntimeError("no mlserver executable (set GENCC_MLSERVER or make .venv-mlserver)")
        self.folder, self.name = folder, name
        model_dir = folder / name
        model_dir.mkdir(parents=True)
        shutil.copy(HERE / "mlserver_model.py", model_dir / "mlserver_model.py")
        settings = {"name": name, "implementation": "mlserver_model.Model"}
        if declare:
            settings |= {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                         "outputs": [{"name": "y", "datatype": "FP64", "shape": [-1, 3]}]}
        (model_dir / "model-settings.json").write_text(json.dumps(settings))
        self.port = _free_port()
        (folder / "settings.json").write_text(json.dumps({
            "host": "127.0.0.1", "http_port": self.port, "grpc_port": _free_port(), "metrics_port": _free_port(),
            "parallel_workers": 0, "debug": False}))
        env = {**os.environ, "GENCC_TEST_SLEEP_S": str(sleep_s), "GENCC_TEST_GARBAGE": "1" if garbage else "0"}
        self.log = (folder / "mlserver.log").open("w")
        self.proc = subprocess.Popen([str(exe), "start", str(folder)], cwd=folder, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}/v2/models/{name}"

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Until the model answers ready; RuntimeError with the log's tail if the process ends or time runs out."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/ready", timeout=1.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"MLServer on port {self.port} did not get ready:\n"
                           + (self.folder / "mlserver.log").read_text()[-2000:])

    def answer(self, X) -> list:
        """The replica's own answer to the inputs X (B, 4), asked directly: its outputs as nested lists."""
        import numpy as np

        X = np.asarray(X, dtype=np.float32)
        body = {"inputs": [{"name": "x", "shape": list(X.shape), "datatype": "FP32", "data": X.ravel().tolist()}]}
        r = httpx.post(self.url + "/infer", json=body, timeout=10, trust_env=False)
        r.raise_for_status()
        out = r.json()["outputs"][0]
        return np.asarray(out["data"], dtype=np.float64).reshape(out["shape"])

    def kill(self) -> None:
        """SIGKILL to the server's whole process group, as a crashed machine would stop it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()
