"""Triton Inference Server as a replica, for tests and benchmarks: the `tritonserver` of PyPI's `nvidia-pytriton`
wheel, serving a numpy model the caller defines, on CPU, on a loopback port.

Two halves in one file:

- run as a script by the Python of a venv made from Debian's own python3.11 (PyTriton's Python-backend stub links
  the system's libpython, so no other build of 3.11 can run its model side), it starts one `tritonserver` with one
  model or several (`--models N`: models NAME0 .. NAME{N-1}, each its own replica) and serves until it is stopped:

      .venv-triton/bin/python tests/engine/triton_replica.py --port 8000 --model tests/engine/triton_models.py:smooth

  `--model PATH:NAME` names a batched numpy callable ((B, *in) -> (B, *out)) in a file that imports numpy and the
  standard library only; with `--params JSON`, NAME is a factory called as NAME(replica=i, **params) for model i
  (params may name the replica itself);
- imported by gencc's tests (standard library only at import), `triton_python()` finds that venv and
  `TritonServer` starts the script as a process, waits until it is ready, and stops or kills it (`kill()`:
  SIGKILL to tritonserver, its stubs and the script, as a crashed machine goes).

The venv's python is `$GENCC_TRITON_PYTHON`, else `.venv-triton/bin/python` under the repository (`.ci/run` makes
it: `/usr/bin/python3.11 -m venv .venv-triton && .venv-triton/bin/pip install nvidia-pytriton`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
DATATYPES = {"FP32": "float32", "FP64": "float64", "FP16": "float16", "INT32": "int32", "INT64": "int64"}


# ----- the side gencc's tests run on (standard library only) ---------------------------------------------------
def triton_python() -> tuple[str | None, str]:
    """(the venv's python that can run PyTriton, or None; why not, when None)."""
    path = os.environ.get("GENCC_TRITON_PYTHON") or str(ROOT / ".venv-triton" / "bin" / "python")
    if not Path(path).exists():
        return None, (f"no Python for Triton at {path} (make it: /usr/bin/python3.11 -m venv .venv-triton && "
                      ".venv-triton/bin/pip install nvidia-pytriton; or set GENCC_TRITON_PYTHON)")
    probe = subprocess.run([path, "-c", "import pytriton.triton"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return None, f"{path} cannot import pytriton: {probe.stderr.strip().splitlines()[-1:]}"
    return path, ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """The process ids below `pid` (children first, then theirs), from /proc."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _shared_memory(pid: int) -> set[str]:
    """The /dev/shm files process `pid` has mapped."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    return {p for p in (line.split(maxsplit=5)[-1] for line in lines if "/dev/shm/" in line)
            if p.startswith("/dev/shm/") and not p.endswith(" (deleted)")}


class TritonServer:
    """One `tritonserver` on a free loopback port serving `model` ("PATH:NAME") under `name` (or `models` of them,
    NAME0 ..), input `input_name` of `datatype` [-1, *in_shape], output `output_name` FP32 [-1, *out_shape]."""

    def __init__(self, python: str, model: str, *, name: str = "m", in_shape: tuple = (4,), out_shape: tuple = (3,),
                 datatype: str = "FP32", max_batch: int = 8, models: int = 1, instances: int = 1,
                 params: dict | None = None, input_name: str = "x", output_name: str = "y",
                 wait: bool = True, ready_s: float = 90.0):
        self.port, self.name, self.models = free_port(), name, models
        self.tmp = tempfile.mkdtemp(prefix="gencc-triton-")  # PyTriton's workspace (its sockets), removed at the end
        cmd = [python, str(HERE), "--port", str(self.port), "--model", model, "--name", name,
               "--workspace", os.path.join(self.tmp, "workspace"),
               "--in-shape", ",".join(map(str, in_shape)), "--out-shape", ",".join(map(str, out_shape)),
               "--datatype", datatype, "--max-batch", str(max_batch), "--models", str(models),
               "--instances", str(instances), "--input", input_name, "--output", output_name]
        if params is not None:
            cmd += ["--params", json.dumps(params)]
        self.log = open(os.devnull, "w")  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
        self.alive = True
        if wait:
            self.wait_ready(ready_s)

    def wait_ready(self, ready_s: float = 90.0) -> TritonServer:
        """Wait until every model served answers its ready route (a RuntimeError, the server killed, otherwise)."""
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.kill()
                raise RuntimeError(f"the Triton replica exited ({self.proc.returncode}) before it was ready")
            if all(self._ready(u) for u in self.urls):
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"the Triton replica was not ready in {ready_s:g} s")

    @property
    def urls(self) -> list[str]:
        """One upstream URL per model served."""
        names = [self.name] if self.models == 1 else [f"{self.name}{i}" for i in range(self.models)]
        return [f"http://127.0.0.1:{self.port}/v2/models/{n}" for n in names]

    @property
    def url(self) -> str:
        return self.urls[0]

    @staticmethod
    def _ready(url: str) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url + "/ready", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL to the script, tritonserver and its model stubs: connections drop, the port then refuses. The
        shared memory they had mapped (/dev/shm) is removed after them."""
        if not self.alive:
            return
        self.alive = False
        pids = [*_descendants(self.proc.pid), self.proc.pid]
        shm = set().union(*(_shared_memory(p) for p in pids))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        for f in shm:
            Path(f).unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop it as a user would (SIGTERM: PyTriton stops tritonserver), killed after 15 s."""
        if not self.alive:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


# ----- the side that runs in the Triton venv (numpy and pytriton) -----------------------------------------------
def _load(spec: str) -> Any:
    path, _, name = spec.rpartition(":")
    mod_spec = importlib.util.spec_from_file_location(Path(path).stem + "_triton_model", path)
    if not path or mod_spec is None or mod_spec.loader is None:
        raise SystemExit(f"--model is PATH:NAME, got {spec!r}")
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return getattr(mod, name)


def serve(args: argparse.Namespace) -> None:
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    target = _load(args.model)
    params = json.loads(args.params) if args.params else None
    in_shape = tuple(int(d) for d in args.in_shape.split(","))
    out_shape = tuple(int(d) for d in args.out_shape.split(","))
    in_dtype = np.dtype(DATATYPES[args.datatype])
    config = TritonConfig(http_address="127.0.0.1", http_port=args.port, allow_grpc=False, allow_metrics=False,
                          exit_timeout_secs=2)

    def infer_fn(f: Any) -> Any:
        @batch
        def infer(**inputs: Any) -> dict:
            y = np.asarray(f(inputs[args.input]), dtype=np.float32)
            return {args.output: y.reshape(len(y), *out_shape)}

        return infer

    # PyTriton restricts some of Triton's HTTP APIs to a token it makes; statistics stays open, as in Triton, for
    # perf_analyzer, which reads it
    security = TritonSecurityConfig(restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"])
    with Triton(config=config, workspace=args.workspace, security_config=security) as triton:
        for i in range(args.models):
            name = args.name if args.models == 1 else f"{args.name}{i}"
            fns = [infer_fn(target(**{"replica": i, **params}) if params is not None else target)
                   for _ in range(args.instances)]
            triton.bind(model_name=name, infer_func=fns if args.instances > 1 else fns[0],
                        inputs=[Tensor(name=args.input, dtype=in_dtype, shape=in_shape)],
                        outputs=[Tensor(name=args.output, dtype=np.float32, shape=out_shape)],
                        config=ModelConfig(max_batch_size=args.max_batch), strict=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # leaves the with: PyTriton stops tritonserver
        triton.serve()


def main() -> None:
    ap = argparse.ArgumentParser(description="Serve a numpy model with Triton (PyTriton) on a loopback port.")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True, help="PATH:NAME of a batched numpy callable (or factory: --params)")
    ap.add_argument("--params", default=None, help="JSON keyword arguments: NAME is a factory of the callable")
    ap.add_argument("--name", default="m")
    ap.add_argument("--workspace", default=None, help="PyTriton's workspace folder (default: a temporary one)")
    ap.add_argument("--models", type=int, default=1, help="serve this many models, NAME0 .., one replica each")
    ap.add_argument("--instances", type=int, default=1, help="model instances per model")
    ap.add_argument("--in-shape", default="4")
    ap.add_argument("--out-shape", default="3")
    ap.add_argument("--datatype", default="FP32", choices=sorted(DATATYPES))
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--input", default="x")
    ap.add_argument("--output", default="y")
    serve(ap.parse_args())


if __name__ == "__main__":
    main()
