"""Answered: Triton's perf_analyzer and `gencc loadtest` see the same server (docs/guides/clients.md).

Triton's `perf_analyzer` against `gencc serve` over the Open Inference Protocol, beside `gencc loadtest` on
the same server: both send open-loop Poisson load at the same rate to a model this file defines (a tanh of a
linear map, (1, 8, 8) -> (10,), numpy), served with gcc on 12 workers, K = 8, injected service time and
persistent stragglers; each reports answered requests per second and its latency percentiles.

    python benchmarks/investigations/perf_analyzer_load.py --perf-analyzer PATH
    python benchmarks/investigations/perf_analyzer_load.py --perf-analyzer PATH --out docs/generated/perf-analyzer.md

perf_analyzer is not on PyPI as a program (the PyPI package `perf-analyzer` is a placeholder). It ships in
Triton's SDK container image, and, up to tritonclient 2.40.0, inside tritonclient's wheel; that binary needs
libb64 (Debian: libb64-0d) and the CUDA runtime library libcudart.so.12 (the wheel nvidia-cuda-runtime-cu12),
no GPU:

    pip download tritonclient==2.40.0 --no-deps -d pa && cd pa && unzip -q tritonclient-2.40.0-*.whl \\
        'tritonclient-2.40.0.data/data/bin/perf_analyzer'
    apt-get install libb64-0d
    pip download nvidia-cuda-runtime-cu12 --no-deps -d cu && cd cu && unzip -q nvidia_cuda_runtime_cu12-*.whl
    export LD_LIBRARY_PATH=$PWD/cu/nvidia/cuda_runtime/lib

The server runs in its own process (`gencc serve --model perf_analyzer_load:model`), and so does each client.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # measure.py, shared with the suites in benchmarks/

from measure import free_port, machine, server_ready  # noqa: E402

HERE = Path(__file__).resolve().parent
SHAPE, NAME = (1, 8, 8), "tiny"
_W = np.random.default_rng(0).normal(size=(64, 10)) / 8


def model(x):
    """The served model: (B, 1, 8, 8) -> (B, 10)."""
    return np.tanh(np.asarray(x, dtype=np.float64).reshape(len(x), -1) @ _W)


def perf_analyzer(binary: str, port: int, rate: float, window_ms: int, out: Path) -> dict:
    """One perf_analyzer run at `rate` (Poisson): its CSV row (latencies in microseconds)."""
    cmd = [binary, "-m", NAME, "-u", f"127.0.0.1:{port}", "-i", "http", "--request-rate-range", f"{rate:g}",
           "--request-distribution", "poisson", "--measurement-interval", str(window_ms), "--max-trials", "3",
           "--stability-percentage", "100", "-f", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not out.exists():
        raise SystemExit(f"perf_analyzer failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
    with out.open() as fh:
        return next(csv.DictReader(fh))


def loadtest(port: int, rate: float, duration: float, data: Path, out: Path) -> dict:
    """One `gencc loadtest` run at `rate`: answered per second and latency percentiles from its CSV."""
    cmd = [sys.executable, "-m", "gencc.cli", "loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", f"{rate:g}",
           "--duration-ms", f"{duration * 1e3:g}", "--data", str(data), "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"gencc loadtest failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    lat = np.array([float(r["latency_ms"]) for r in rows if r["status"] == "200"])
    return {"sent": len(rows), "answered": int(lat.size), "per_s": lat.size / duration,
            "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "degraded": sum(r["degraded"] in ("True", "1", "true") for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--perf-analyzer", default=shutil.which("perf_analyzer"),
                    help="the perf_analyzer binary (default: on PATH)")
    ap.add_argument("--rate", type=float, default=100.0, help="requests per second, both clients (default 100)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per measurement (default 10)")
    ap.add_argument("--scheme", default="gcc", help="gencc serve --scheme (default gcc)")
    ap.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = ap.parse_args()
    if not args.perf_analyzer:
        raise SystemExit("no perf_analyzer binary: pass --perf-analyzer PATH (see this file's docstring for where "
                         "to get one)")
    port = free_port()
    K = ["--K", "8"] if args.scheme in ("gcc", "bacc", "sgcc") else []  # noqa: N806
    serve = [sys.executable, "-m", "gencc.cli", "serve", "--model", "perf_analyzer_load:model", "--input-shape",
             ",".join(map(str, SHAPE)), "--name", NAME, "--scheme", args.scheme, "--workers", "12", *K,
             "--service-ms", "10", "--slow-fraction", "0.1", "--gate", "off", "--port", str(port)]
    server = subprocess.Popen(serve, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines = []
    try:
        t_end = time.monotonic() + 180
        while not server_ready(port):
            if server.poll() is not None or time.monotonic() > t_end:
                raise SystemExit(f"gencc serve did not start: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.3)
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "inputs.npy"
            np.save(data, np.random.default_rng(1).uniform(0, 1, size=(256, *SHAPE)).astype(np.float32))
            pa = perf_analyzer(args.perf_analyzer, port, args.rate, int(args.duration * 1000), Path(tmp) / "pa.csv")
            lt = loadtest(port, args.rate, args.duration, data, Path(tmp) / "lt.csv")
        lines += [f"| client (`{args.scheme}`, 12 workers, {args.rate:g} requests/s Poisson) | answered/s | p50 ms | "
                  "p99 ms | degraded |", "|---|---|---|---|---|",
                  f"| perf_analyzer (v2 infer, binary tensors) | {float(pa['Inferences/Second']):.1f} | "
                  f"{float(pa['p50 latency']) / 1000:.1f} | {float(pa['p99 latency']) / 1000:.1f} | not read |",
                  f"| gencc loadtest (/predict) | {lt['per_s']:.1f} | {lt['p50']:.1f} | {lt['p99']:.1f} | "
                  f"{lt['degraded']} of {lt['sent']} |"]
        print("\n".join(lines), flush=True)
    finally:
        server.terminate()
        server.wait(30)
    if args.out:
        args.out.write_text("Generated by `python benchmarks/investigations/perf_analyzer_load.py --perf-analyzer "
                            f"PATH --out {args.out}`\n\n{machine()}\n\n" + "\n".join(lines) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
