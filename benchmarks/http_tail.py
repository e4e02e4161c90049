"""Tail latency on an independent client: `gencc serve` in its own process, driven by an open-loop Poisson client
that shares no code with gencc (httpx, one task per request, `POST /v2/models/model/infer` with JSON data, in a
process of its own). Two measurements:

- `default` (issue 32): the default scheme without a parity model (`gencc serve --model SPEC --data TRAIN.npy`,
  no --scheme, no --parity) against `--scheme uncoded`, on two models gencc does not ship, defined below and
  trained here on sklearn's digits: "mlp" (1x8x8 inputs, digits-sized) and "cnn28" (a CNN on the digits upsampled
  to 28x28). W = 12, K = 8, 40 ms injected service time, persistent stragglers (10% of the time slow x10),
  Poisson arrivals at 30% of uncoded's capacity W / E[task time]. Bar: the default's (p99.9 - p50) gap at most
  0.3 of uncoded's.
- `sweep` (issue 35): digits-cnn served by uncoded, hedged and the default coded scheme at equal W = 12, 50 ms
  service, 10% slow x10, at loads 0.3 to 0.95 of uncoded's capacity (one server per scheme, the loads in turn),
  with the simulator's prediction of each point (`serving_sweep.py`'s, its gate holding every decode for the
  coded scheme) beside it, fed two measurements: the mean run time of a worker's task in its normal state at that
  point (the server's `gencc_task_run_seconds` / `gencc_task_runs` on /metrics: the injected time plus the
  model's forward pass and the CPU it waits for), which sets the simulated workers' service time; and the front
  door's own time per request (HTTP, JSON, the client, the dispatcher, at that arrival rate), measured first at
  each load by the same client against an uncoded server with no injected service time, of which each simulated
  latency gets an independent draw added. Bar: the
  default's p99.9 at most 1.1x the better of uncoded's and hedged's; the prediction within 20% at p50 and p99.

    python benchmarks/http_tail.py default --out docs/generated/default-tail.md
    python benchmarks/http_tail.py default --duration 20 --models mlp          # a quick look
    python benchmarks/http_tail.py sweep --out docs/generated/serving-http-sweep.md

A coded server calibrates its gate on training inputs before it binds its port; the client starts once
/v2/health/ready answers 200, so no calibration overlaps a measurement. The machine should be otherwise idle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from measure import free_port, machine, server_ready

HERE = Path(__file__).resolve().parent
W, K, SERVICE_MS, SLOW_F, SLOW_X, LOAD = 12, 8, 40.0, 0.1, 10.0, 0.3
BAR = 0.3
MODELS = {"mlp": 8, "cnn28": 28}


# ---- the models (imported by `gencc serve --model http_tail:NAME` with GENCC_BENCH_CACHE set) -------------

def _digits(size: int):
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    X = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    if size != 8:
        X = torch.nn.functional.interpolate(X, size=(size, size), mode="bilinear", align_corners=False)
    return X, torch.tensor(d.target)


def _trained(name: str, net, size: int):
    """`net` trained on the first 1,400 digits (cached in $GENCC_BENCH_CACHE with its train / test inputs)."""
    import torch

    cache = Path(os.environ["GENCC_BENCH_CACHE"])
    path = cache / f"{name}.pt"
    if path.exists():
        net.load_state_dict(torch.load(path))
        return net.eval()
    torch.manual_seed(0)
    X, y = _digits(size)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(30):
        perm = torch.randperm(1400)
        for i in range(0, 1400, 64):
            b = perm[i:i + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(X[b]), y[b]).backward()
            opt.step()
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache / f"{name}-train.npy", X[:1400].numpy())
    np.save(cache / f"{name}-test.npy", X[1400:].numpy())
    torch.save(net.state_dict(), path)
    return net.eval()


def mlp():
    """(B, 1, 8, 8) -> (B, 10): a tanh MLP."""
    from torch import nn

    return _trained("mlp", nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10)), 8)


def cnn28():
    """(B, 1, 28, 28) -> (B, 10): two conv layers and two linear ones."""
    from torch import nn

    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 7 * 7, 64), nn.ReLU(),
                        nn.Linear(64, 10))
    return _trained("cnn28", net, 28)


# ---- the independent client ----------------------------------------------------------------------------------

def client(url: str, rate: float, duration: float, data: Path, seed: int, samples: bool = False) -> dict:
    """Open-loop Poisson load on /v2/models/model/infer (httpx only): latency percentiles of the 200 answers (ms),
    the answers not 200 and the share of degraded answers (with `samples`, every latency too)."""
    import httpx

    X = np.load(data).astype(np.float32)
    gaps = np.random.default_rng(seed).exponential(1 / rate, size=int(rate * duration * 1.5) + 10)
    times = np.cumsum(gaps)
    times = times[times < duration]

    async def run() -> tuple[list[float], int, int]:
        lat: list[float] = []
        bad = degraded = 0
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
        async with httpx.AsyncClient(timeout=60, limits=limits) as c:
            t0 = time.perf_counter()

            async def one(i: int, t: float) -> None:
                nonlocal bad, degraded
                await asyncio.sleep(max(0.0, t - (time.perf_counter() - t0)))
                x = X[i % len(X)]
                body = {"inputs": [{"name": "input", "shape": [1, *x.shape], "datatype": "FP32",
                                    "data": x.ravel().tolist()}]}
                sent = time.perf_counter()
                r = await c.post(url + "/v2/models/model/infer", json=body)
                took = (time.perf_counter() - sent) * 1000
                if r.status_code != 200:
                    bad += 1
                    return
                lat.append(took)
                degraded += bool(r.json().get("parameters", {}).get("degraded"))

            await asyncio.gather(*(one(i, float(t)) for i, t in enumerate(times)))
        return lat, bad, degraded

    lat, bad, degraded = asyncio.run(run())
    p50, p99, p999 = (float(v) for v in np.percentile(lat, [50, 99, 99.9]))
    return {"requests": len(times), "not_200": bad, "degraded": degraded / max(len(lat), 1), "p50": p50, "p99": p99,
            "p999": p999, "gap": p999 - p50, **({"latencies": lat} if samples else {})}


# ---- the driver ----------------------------------------------------------------------------------------------

def serve(args: list[str], env: dict, start_timeout: float) -> tuple[subprocess.Popen, int, float]:
    """`gencc serve ARGS` on a free loopback port in its own process: (process, port, seconds until ready)."""
    port = free_port()
    cmd = [sys.executable, "-m", "gencc.cli", "serve", *args, "--port", str(port), "--max-pending", "100000"]
    server = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while not server_ready(port):
        if server.poll() is not None:
            raise SystemExit(f"gencc serve exited {server.returncode}: {server.stdout.read()[-2000:]}")
        if time.monotonic() - t0 > start_timeout:
            server.terminate()
            raise SystemExit(f"gencc serve not ready after {start_timeout:.0f} s")
        time.sleep(1)
    return server, port, time.monotonic() - t0


def task_runs(port: int) -> tuple[float, float]:
    """(seconds, count) of the normal-state tasks that returned so far, from the server's /metrics."""
    import re

    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text

    def value(name: str) -> float:
        got = re.search(rf'^{name}_total{{state="normal"}} (\S+)$', text, re.M)
        return float(got.group(1)) if got else 0.0

    return value("gencc_task_run_seconds"), value("gencc_task_runs")


def drive(port: int, rate: float, duration: float, data: Path, seed: int, env: dict, samples: bool = False) -> dict:
    """The independent client in its own process against the server on `port`; with the mean run time of the
    normal-state tasks meanwhile (ms, from /metrics)."""
    s0, n0 = task_runs(port)
    got = subprocess.run([sys.executable, str(Path(__file__).resolve()), "client", "--url",
                          f"http://127.0.0.1:{port}", "--rate", str(rate), "--duration", str(duration),
                          "--data", str(data), "--seed", str(seed), *(["--samples"] if samples else [])],
                         env=env, capture_output=True, text=True, check=True)
    s1, n1 = task_runs(port)
    return {**json.loads(got.stdout.strip().splitlines()[-1]), "task_ms": 1000 * (s1 - s0) / max(n1 - n0, 1)}


#: requests per load of the front door's measurement
OVERHEAD_REQUESTS = 1000


def front_door(a: argparse.Namespace, env: dict, data: Path) -> dict[float, np.ndarray]:
    """Per load, the front door's time per request (ms): the sweep's client at that arrival rate (OVERHEAD_REQUESTS
    requests) against an uncoded digits-cnn server on W workers with no injected service time and no stragglers."""
    args = ["--workload", "digits-cnn", "--workers", str(W), "--K", str(K), "--scheme", "uncoded"]
    server, port, _ = serve(args, env, a.start_timeout)
    try:
        out = {}
        for i, frac in enumerate(a.loads):
            rate = frac * capacity(SWEEP_MS)
            out[frac] = np.array(drive(port, rate, OVERHEAD_REQUESTS / rate, data, a.seed + 100 + i, env,
                                       samples=True)["latencies"])
            print(json.dumps({"load": frac, "front_door_ms": {q: float(np.percentile(out[frac], q))
                                                              for q in (50, 99)}}), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return out


def capacity(service_ms: float) -> float:
    """Uncoded's capacity W / E[task time] (req/s) under the persistent stragglers."""
    return W / (service_ms / 1000 * (1 - SLOW_F + SLOW_F * SLOW_X))


def slowdown(service_ms: float) -> list[str]:
    return ["--workers", str(W), "--K", str(K), "--service-ms", str(service_ms), "--slow-fraction", str(SLOW_F),
            "--slow-factor", str(SLOW_X)]


def default_rows(a: argparse.Namespace, env: dict) -> list[dict]:
    cache = Path(env["GENCC_BENCH_CACHE"])
    rows = []
    for name in a.models:
        subprocess.run([sys.executable, "-c", f"import http_tail as d; d.{name}()"], cwd=HERE, env=env, check=True)
        for scheme in ("uncoded", None):
            args = ["--model", f"http_tail:{name}", "--data", str(cache / f"{name}-train.npy"),
                    *slowdown(SERVICE_MS), *(["--scheme", scheme] if scheme else [])]
            server, port, ready_s = serve(args, env, a.start_timeout)
            try:
                rate = LOAD * capacity(SERVICE_MS)
                row = drive(port, rate, a.duration, cache / f"{name}-test.npy", a.seed, env)
            finally:
                server.terminate()
                server.wait(timeout=60)
            rows.append({"model": name, "scheme": scheme or "default", "rate": rate, "ready_s": ready_s, **row})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def default_table(rows: list[dict]) -> str:
    out = ["| model | scheme | requests | not 200 | degraded | p50 (ms) | p99 (ms) | p99.9 (ms) | gap (ms) | "
           "gap / uncoded's | meets 0.3 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = next(u for u in rows if u["model"] == r["model"] and u["scheme"] == "uncoded")
        ratio = r["gap"] / ref["gap"]
        meets = "" if r["scheme"] == "uncoded" else ("yes" if ratio <= BAR else "no")
        out.append(f"| {r['model']} | {r['scheme']} | {r['requests']:,} | {r['not_200']} | {r['degraded']:.1%} | "
                   f"{r['p50']:.0f} | {r['p99']:.0f} | {r['p999']:.0f} | {r['gap']:.0f} | {ratio:.2f} | {meets} |")
    return "\n".join(out)


def predict(scheme: str, rate: float, task_ms: float, overhead_ms: np.ndarray) -> dict:
    """The simulator's p50 / p99 / p99.9 of a sweep point at `rate` req/s (serving_sweep.py's model of it, 3 seeds
    of 60 s) with the measured normal-state task time `task_ms` as its service time, each simulated latency plus an
    independent draw of the front door's measured time (`front_door`)."""
    import serving_sweep as sweep

    ns = argparse.Namespace(workers=W, K=K, service_ms=task_ms, F=SLOW_F, X=SLOW_X, mean_slow_s=1.0,
                            max_wait_ms=50.0, duration=60.0, seeds=3)
    gate = "sent" if scheme in BASELINES else "held"
    lat = np.concatenate([sweep.sim_run(scheme, ns, rate, seed, gate)[0] for seed in range(ns.seeds)])
    lat = lat + np.random.default_rng(11).choice(overhead_ms, size=lat.size)
    p50, p99, p999 = (float(v) for v in np.percentile(lat, [50, 99, 99.9]))
    return {"p50": p50, "p99": p99, "p999": p999}


BASELINES = ("uncoded", "hedged")
SWEEP_MS = 50.0
SWEEP_LOADS = (0.3, 0.57, 0.76, 0.95)


def sweep_rows(a: argparse.Namespace, env: dict) -> list[dict]:
    from gencc.serving.config import ServiceConfig
    from gencc.workloads import load

    data = Path(env["GENCC_BENCH_CACHE"]) / "digits-cnn-test.npy"
    np.save(data, load("digits-cnn", progress=False).X_test)
    default = ServiceConfig().scheme
    overhead = front_door(a, env, data)
    rows = []
    for scheme in (*BASELINES, default):
        args = ["--workload", "digits-cnn", *slowdown(SWEEP_MS), "--scheme", scheme]
        server, port, ready_s = serve(args, env, a.start_timeout)
        try:
            for i, frac in enumerate(a.loads):
                rate = frac * capacity(SWEEP_MS)
                row = drive(port, rate, a.requests / rate, data, a.seed + i, env)
                sim = predict(scheme, rate, row["task_ms"], overhead[frac])
                rows.append({"scheme": scheme, "default": scheme == default, "load": frac, "rate": rate,
                             **row, "sim": sim, "front_door_p50": float(np.median(overhead[frac]))})
                print(json.dumps(rows[-1]), flush=True)
                time.sleep(2)  # the queues drain before the next load
        finally:
            server.terminate()
            server.wait(timeout=60)
    return rows


def sweep_table(rows: list[dict]) -> str:
    out = ["| load | scheme | requests | task (ms) | p50 (ms) | p99 (ms) | p99.9 (ms) | gap / uncoded's | p99.9 / best "
           "baseline's | simulated p50 / p99 (ms) | real / simulated p50, p99 |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = [u for u in rows if u["load"] == r["load"]]
        unc = next(u for u in same if u["scheme"] == "uncoded")
        best = min(u["p999"] for u in same if u["scheme"] in BASELINES)
        name = f"{r['scheme']} (default)" if r.get("default") else r["scheme"]
        vs = "" if r["scheme"] in BASELINES else f"{r['p999'] / best:.2f}"
        s = r["sim"]
        out.append(f"| {r['load']:g} | {name} | {r['requests']:,} | {r['task_ms']:.1f} | {r['p50']:.0f} | "
                   f"{r['p99']:.0f} | {r['p999']:.0f} | {r['gap'] / unc['gap']:.2f} | {vs} | {s['p50']:.0f} / "
                   f"{s['p99']:.0f} | {r['p50'] / s['p50']:.2f}, {r['p99'] / s['p99']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["default", "sweep", "client"])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="default: the models")
    ap.add_argument("--duration", type=float, default=90.0, help="default: seconds of arrivals per point (90)")
    ap.add_argument("--loads", type=float, nargs="+", default=list(SWEEP_LOADS),
                    help="sweep: fractions of uncoded's capacity (0.3 0.57 0.76 0.95)")
    ap.add_argument("--requests", type=int, default=4500, help="sweep: requests per point (4500)")
    ap.add_argument("--seed", type=int, default=0, help="the client's arrivals")
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds to wait for a server to be ready")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown page here")
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--samples", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.duration <= 0 or a.requests < 100 or not all(0 < x < 1.5 for x in a.loads):
        ap.error("--duration must be > 0, --requests at least 100, --loads in (0, 1.5)")
    if a.mode == "client":
        print(json.dumps(client(a.url, a.rate, a.duration, a.data, a.seed, a.samples)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GENCC_BENCH_CACHE": os.environ.get("GENCC_BENCH_CACHE", tmp),
               "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        rows = default_rows(a, env) if a.mode == "default" else sweep_rows(a, env)
    text = default_table(rows) if a.mode == "default" else sweep_table(rows)
    print(text)
    if a.out is None:
        return
    shown = Path(os.path.relpath(a.out.resolve(), HERE.parent))  # the page's command, from the repository root
    if a.mode == "default":
        cmd = "python benchmarks/http_tail.py default" + (f" --duration {a.duration:g}" if a.duration != 90 else "")
        intro = (f"# The default without a parity model, on an independent client\n\nRegenerate: `{cmd} --out "
                 f"{shown}`.\n\n`gencc serve --model SPEC --data TRAIN.npy` (the default scheme, no parity model) "
                 f"against `--scheme uncoded` on {W} workers, K = {K}, {SERVICE_MS:g} ms service, {SLOW_F:.0%} of the "
                 f"time slow x{SLOW_X:g}, Poisson arrivals at {LOAD:.0%} of uncoded's capacity for {a.duration:g} s, "
                 f"seed {a.seed}. Models this benchmark defines and trains on sklearn's digits: mlp (1x8x8) and "
                 f"cnn28 (28x28).")
    else:
        extra = "" if a.requests == 4500 else f" --requests {a.requests}"
        front = ", ".join(f"{r['front_door_p50']:.1f} ms at {r['load']:g}" for r in rows if r["scheme"] == "uncoded")
        intro = (f"# Coded serving against the baselines on the real server, on an independent client\n\n"
                 f"Regenerate: `python benchmarks/http_tail.py sweep{extra} --out {shown}`.\n\ndigits-cnn on {W} "
                 f"workers (K = {K}), {SWEEP_MS:g} ms service, {SLOW_F:.0%} of the time slow x{SLOW_X:g}; "
                 f"{a.requests:,} Poisson requests per load (a fraction of uncoded's capacity, "
                 f"{capacity(SWEEP_MS):.0f} req/s), one server per scheme. The simulated columns are "
                 f"`serving_sweep.py`'s model of the same point (3 seeds of 60 s; the coded scheme's gate holding "
                 f"every decode) with the point's measured normal-state task time as its service time, plus the front "
                 f"door's own time at that load: the same client sent "
                 f"{OVERHEAD_REQUESTS:,} requests at each load's rate to an uncoded server with no injected service "
                 f"time, and each simulated latency gets an independent draw of those latencies added (their median: "
                 f"{front}).")
    a.out.write_text(f"{intro} The client is httpx alone (no gencc code), open loop, over "
                     f"`/v2/models/model/infer`, in a process of its own. {machine()}\n\n{text}\n")


if __name__ == "__main__":
    main()
