"""Tail latency on an independent client: `gencc serve` in its own process, driven by an open-loop Poisson client
that shares no code with gencc (httpx, one task per request, `POST /v2/models/model/infer` with JSON data, in a
process of its own). Two measurements:

- `default`: the default scheme without a parity model (`gencc serve --model SPEC --data TRAIN.npy`,
  no --scheme, no --parity) against `--scheme uncoded`, on two models gencc does not ship, defined below and
  trained here on sklearn's digits: "mlp" (1x8x8 inputs, digits-sized) and "cnn28" (a CNN on the digits upsampled
  to 28x28). W = 12, K = 8, 40 ms injected service time, persistent stragglers (10% of the time slow x10),
  Poisson arrivals at 30% of uncoded's capacity W / E[task time]. Target: the default's (p99.9 - p50) gap at most
  0.3 of uncoded's.
- `sweep`: digits-cnn served by uncoded, hedged and the default coded scheme at equal W = 12, 50 ms
  service, 10% slow x10, at loads 0.3 to 0.95 of uncoded's capacity (one server per scheme, the loads in turn),
  with the simulator's prediction of each point (`serving_sweep.py`'s, its gate holding every decode for the
  coded scheme) beside it, fed two measurements: the mean run time of a worker's task in its normal state at that
  point (the server's `gencc_task_run_seconds` / `gencc_task_runs` on /metrics: the injected time plus the
  model's forward pass and the CPU it waits for), which sets the simulated workers' service time; and the front
  door's own time per request (HTTP, JSON, the client, the dispatcher, at that arrival rate), measured first at
  each load by the same client against an uncoded server with no injected service time, of which each simulated
  latency gets an independent draw added. Each point is run for `--seeds` independent draws of the arrivals
  (3; the same draws for every scheme) and their requests are pooled: a p99.9 of one run of 4,500 requests rests
  on its 4-5 slowest answers, and one run of hedged requests' p99.9 was seen to move 3x between seeds. The page
  also shows each seed alone, the server process's CPU time per request (from /proc: the front door, the
  dispatcher and the model together), and a figure (`--png`). Target: the default's p99.9 at most 1.1x the better
  of uncoded's and hedged's; the prediction within 20% at p50 and p99.

    python benchmarks/run.py http-tail default --out docs/generated/default-tail.md
    python benchmarks/run.py http-tail default --duration 20 --models mlp          # a quick look
    python benchmarks/run.py http-tail sweep --png docs/figures/serving-http-sweep.png \
        --out docs/generated/serving-http-sweep.md
    python benchmarks/run.py http-tail sweep --from-raw R.json --out P.md      # re-render a run kept with --raw R.json

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
from measure import command, free_port, machine, server_ready

HERE = Path(__file__).resolve().parent
SUITE = "http-tail"
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    """One row per (scheme, load, seed): the client's figures and every latency. Each server stays up for all its
    points; seed j of load i draws the arrivals `seed + i + 1000 j`, the same for every scheme."""
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
                for j in range(a.seeds):
                    cpu = cpu_seconds(server.pid)
                    row = drive(port, rate, a.requests / rate, data, a.seed + i + 1000 * j, env, samples=True)
                    cpu = cpu_seconds(server.pid) - cpu
                    rows.append({"scheme": scheme, "default": scheme == default, "load": frac, "rate": rate,
                                 "seed": j, **row, "server_cpu_s": cpu, "front_door_ms": overhead[frac].tolist()})
                    print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("latencies", "front_door_ms")}),
                          flush=True)
                    time.sleep(2)  # the queues drain before the next point
        finally:
            server.terminate()
            server.wait(timeout=60)
    return rows


def pooled(rows: list[dict]) -> list[dict]:
    """Per (scheme, load): the percentiles of every seed's latencies together, each seed's p99.9, the mean
    normal-state task time, and the simulator's prediction of the point fed that task time."""
    out = []
    for key in dict.fromkeys((r["scheme"], r["load"]) for r in rows):
        runs = [r for r in rows if (r["scheme"], r["load"]) == key]
        lat = np.concatenate([r["latencies"] for r in runs])
        p50, p99, p999 = (float(v) for v in np.percentile(lat, [50, 99, 99.9]))
        task_ms = float(np.mean([r["task_ms"] for r in runs]))
        cpu_ms = 1000 * sum(r["server_cpu_s"] for r in runs) / sum(r["requests"] for r in runs)
        out.append({"scheme": key[0], "load": key[1], "rate": runs[0]["rate"], "default": runs[0]["default"],
                    "requests": sum(r["requests"] for r in runs), "not_200": sum(r["not_200"] for r in runs),
                    "task_ms": task_ms, "cpu_ms": cpu_ms, "p50": p50, "p99": p99, "p999": p999, "gap": p999 - p50,
                    "seeds": {r["seed"]: r["p999"] for r in runs},
                    "sim": predict(key[0], runs[0]["rate"], task_ms, np.array(runs[0]["front_door_ms"])),
                    "front_door_p50": float(np.median(runs[0]["front_door_ms"]))})
    return out


def sweep_table(rows: list[dict]) -> str:
    """The pooled figures per (load, scheme), then the p99.9 of each seed alone."""
    out = ["| load | scheme | requests | task (ms) | server CPU per request (ms) | p50 (ms) | p99 (ms) | p99.9 (ms) | "
           "gap / uncoded's | p99.9 / best baseline's | simulated p50 / p99 (ms) | real / simulated p50, p99 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = [u for u in rows if u["load"] == r["load"]]
        unc = next(u for u in same if u["scheme"] == "uncoded")
        best = min(u["p999"] for u in same if u["scheme"] in BASELINES)
        name = f"{r['scheme']} (default)" if r.get("default") else r["scheme"]
        vs = "" if r["scheme"] in BASELINES else f"**{r['p999'] / best:.2f}**"
        s = r["sim"]
        out.append(f"| {r['load']:g} | {name} | {r['requests']:,} | {r['task_ms']:.1f} | {r['cpu_ms']:.1f} | "
                   f"{r['p50']:.0f} | {r['p99']:.0f} | {r['p999']:.0f} | {r['gap'] / unc['gap']:.2f} | {vs} | "
                   f"{s['p50']:.0f} / {s['p99']:.0f} | {r['p50'] / s['p50']:.2f}, {r['p99'] / s['p99']:.2f} |")
    seeds = sorted({j for r in rows for j in r["seeds"]})
    out += ["", "Each seed alone (its own arrivals, the same for every scheme), p99.9 in ms, and the default's p99.9 "
            "over the better baseline's in that seed:", "",
            "| load | " + " | ".join(f"seed {j}: uncoded / hedged / default" for j in seeds) + " | default / best "
            "baseline, per seed |", "|---|" + "---|" * (len(seeds) + 1)]
    for frac in dict.fromkeys(r["load"] for r in rows):
        by = {r["scheme"]: r["seeds"] for r in rows if r["load"] == frac}
        default = next(r["scheme"] for r in rows if r.get("default"))
        cells = [" / ".join(f"{by[s][j]:.0f}" for s in (*BASELINES, default)) for j in seeds]
        ratios = [by[default][j] / min(by[s][j] for s in BASELINES) for j in seeds]
        out.append(f"| {frac:g} | " + " | ".join(cells) + " | " + ", ".join(f"{x:.2f}" for x in ratios) + " |")
    return "\n".join(out)


def sweep_figure(rows: list[dict], path: Path) -> None:
    """p99.9 against load per scheme (pooled; the bars span the seeds' own p99.9), and the default over the better
    baseline with the target's 1.1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8))
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = sorted((r for r in rows if r["scheme"] == scheme), key=lambda r: r["load"])
        y = np.array([r["p999"] for r in mine])
        lo = y - np.array([min(r["seeds"].values()) for r in mine])
        hi = np.array([max(r["seeds"].values()) for r in mine]) - y
        label = f"{scheme} (default)" if mine[0]["default"] else scheme
        ax.errorbar([r["load"] for r in mine], y, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], marker="o",
                    capsize=3, label=label)
        if mine[0]["default"]:
            best = [min(u["p999"] for u in rows if u["load"] == r["load"] and u["scheme"] in BASELINES)
                    for r in mine]
            xs = [r["load"] for r in mine]
            bx.plot(xs, np.array(y) / np.array(best), marker="o", label="pooled")
            per = [[r["seeds"][j] / min(u["seeds"][j] for u in rows if u["load"] == r["load"]
                                        and u["scheme"] in BASELINES) for j in r["seeds"]] for r in mine]
            for x, ys in zip(xs, per, strict=True):
                bx.scatter([x] * len(ys), ys, color="grey", s=12, zorder=3)
    bx.axhline(1.1, color="red", ls="--", lw=1, label="target 1.1")
    bx.scatter([], [], color="grey", s=12, label="each seed")
    ax.set(xlabel="load (fraction of uncoded's capacity)", ylabel="p99.9 (ms)", yscale="log",
           title="real server, independent client")
    bx.set(xlabel="load (fraction of uncoded's capacity)", ylabel="default's p99.9 / better baseline's",
           title="the default against hedged and uncoded")
    ax.legend(fontsize=8)
    bx.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["default", "sweep", "client"])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="default: the models")
    ap.add_argument("--duration", type=float, default=90.0, help="default: seconds of arrivals per point (90)")
    ap.add_argument("--loads", type=float, nargs="+", default=list(SWEEP_LOADS),
                    help="sweep: fractions of uncoded's capacity (0.3 0.57 0.76 0.95)")
    ap.add_argument("--requests", type=int, default=4500, help="sweep: requests per point (4500)")
    ap.add_argument("--seed", type=int, default=0, help="the client's arrivals")
    ap.add_argument("--seeds", type=int, default=3, help="sweep: arrival draws per point, pooled (3)")
    ap.add_argument("--png", type=Path, default=None, help="sweep: write the figure here")
    ap.add_argument("--raw", type=Path, default=None, help="sweep: keep every point's latencies in this JSON file")
    ap.add_argument("--from-raw", type=Path, default=None, help="sweep: render the page and figure from --raw's "
                    "file instead of measuring")
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds to wait for a server to be ready")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown page here")
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--samples", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.duration <= 0 or a.requests < 100 or not all(0 < x < 1.5 for x in a.loads) or not 1 <= a.seeds <= 20:
        ap.error("--duration must be > 0, --requests at least 100, --loads in (0, 1.5), --seeds in 1..20")
    raw = None
    if a.from_raw is not None:
        if not a.from_raw.is_file():
            ap.error(f"--from-raw {a.from_raw}: no such file (write one with sweep --raw)")
        try:
            raw = json.loads(a.from_raw.read_text())
        except ValueError:
            raw = None
        if not isinstance(raw, dict) or not {"requests", "seeds", "seed", "machine", "rows"} <= raw.keys():
            ap.error(f"--from-raw {a.from_raw}: not a file written by sweep --raw")
    if a.mode == "client":
        print(json.dumps(client(a.url, a.rate, a.duration, a.data, a.seed, a.samples)))
        return 0
    if a.mode == "sweep" and raw is not None:
        a.requests, a.seeds, a.seed = raw["requests"], raw["seeds"], raw["seed"]
        rows, when = raw["rows"], raw["machine"]
    else:
        print(machine(), flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "GENCC_BENCH_CACHE": os.environ.get("GENCC_BENCH_CACHE", tmp),
                   "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
            rows = default_rows(a, env) if a.mode == "default" else sweep_rows(a, env)
        when = machine()
        if a.mode == "sweep" and a.raw is not None:
            a.raw.parent.mkdir(parents=True, exist_ok=True)
            a.raw.write_text(json.dumps({"requests": a.requests, "seeds": a.seeds, "seed": a.seed, "machine": when,
                                         "rows": rows}))
    if a.mode == "sweep":
        rows = pooled(rows)
        if a.png is not None:
            sweep_figure(rows, a.png)
    text = default_table(rows) if a.mode == "default" else sweep_table(rows)
    print(text)
    if a.out is None:
        return 0
    shown = Path(os.path.relpath(a.out.resolve(), HERE.parent))  # the page's command, from the repository root
    if a.mode == "default":
        cmd = command(SUITE, ["default", *(["--duration", f"{a.duration:g}"] if a.duration != 90 else []),
                              "--out", str(shown)])
        intro = (f"# The default without a parity model, on an independent client\n\nRegenerate: `{cmd}`.\n\n"
                 f"`gencc serve --model SPEC --data TRAIN.npy` (the default scheme, no parity model) "
                 f"against `--scheme uncoded` on {W} workers, K = {K}, {SERVICE_MS:g} ms service, {SLOW_F:.0%} of the "
                 f"time slow x{SLOW_X:g}, Poisson arrivals at {LOAD:.0%} of uncoded's capacity for {a.duration:g} s, "
                 f"seed {a.seed}. Models this benchmark defines and trains on sklearn's digits: mlp (1x8x8) and "
                 f"cnn28 (28x28).")
    else:
        extra = ("" if a.requests == 4500 else f" --requests {a.requests}") + \
            ("" if a.seeds == 3 else f" --seeds {a.seeds}") + ("" if a.seed == 0 else f" --seed {a.seed}")
        png = f" --png {os.path.relpath(a.png.resolve(), HERE.parent)}" if a.png is not None else ""
        front = ", ".join(f"{r['front_door_p50']:.1f} ms at {r['load']:g}" for r in rows if r["scheme"] == "uncoded")
        intro = (f"# Coded serving against the baselines on the real server, on an independent client\n\n"
                 f"Regenerate: `{command(SUITE, ['sweep'])}{extra}{png} --out {shown}`.\n\ndigits-cnn on "
                 f"{W} workers (K = {K}), {SWEEP_MS:g} ms service, {SLOW_F:.0%} of the time slow x{SLOW_X:g}; "
                 f"{a.seeds} x {a.requests:,} Poisson requests per load (a fraction of uncoded's capacity, "
                 f"{capacity(SWEEP_MS):.0f} req/s), {a.seeds} independent draws of the arrivals (seeds), one server "
                 f"per scheme. The first table pools every seed's requests per point (its p99.9 rests on about "
                 f"{a.seeds * a.requests // 1000} slowest answers); the second shows each seed's p99.9 alone, whose "
                 f"spread is the sampling error of one run. The simulated columns are "
                 f"`serving_sweep.py`'s model of the same point (3 seeds of 60 s; the coded scheme's gate holding "
                 f"every decode) with the point's measured normal-state task time as its service time, plus the front "
                 f"door's own time at that load: the same client sent "
                 f"{OVERHEAD_REQUESTS:,} requests at each load's rate to an uncoded server with no injected service "
                 f"time, and each simulated latency gets an independent draw of those latencies added (their median: "
                 f"{front}).")
    a.out.write_text(f"{intro} The client is httpx alone (no gencc code), open loop, over "
                     f"`/v2/models/model/infer`, in a process of its own. {when}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
