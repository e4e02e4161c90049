"""gencc in front of a fleet of Triton replicas, measured as a user would see it.

W = 12 replicas, each its own `tritonserver` process (PyPI's nvidia-pytriton, on CPU; one model instance each,
Triton's dynamic batcher on, max batch 8), serving a model this file defines (`classify`: a tanh of a linear map,
16 -> 10). The replica's own model code makes it slow part of the time: it sleeps SERVICE_MS per input (a batch of
B inputs sleeps B times as long, so Triton's batching adds no capacity), x SLOW_X while the replica is in a slow
period (SLOW_F of the time, periods of MEAN_SLOW_S on average, each replica its own seeded on/off process). The
process restarts with each draw of the arrivals: the client writes the draw's start and seed to a file the
replicas read, so every configuration meets the same slow periods at the same moments of the draw (a paired
comparison; on the wall clock alone each configuration met slow periods of its own). The sleep keeps the model's
CPU use small: on a machine of 2 shared cores the work is waiting, and the page reports the CPU the run used
(client, gencc and Triton together), so a point that ran short of CPU shows.

An open-loop Poisson client that shares no code with gencc (`oip_client.py`: pre-encoded requests on raw asyncio
streams, in a process of its own; it reads the target's metadata for the tensor names, and checks each answer
against `classify` computed here; a latency counts from the request's scheduled time) sends the same
arrivals, at equal replicas, to:

- direct: round-robin straight to the 12 replicas (what a client does without a front end);
- `gencc serve --upstreams FILE --scheme uncoded` (a least-loaded proxy), `--scheme hedged`, and gencc's default
  (no --scheme: sgcc, K = 8 over the 12 replicas) twice: as it starts with no training inputs (its gate then holds
  every decode, so every answer is a replica's own) and with `--gate off` (every decode it makes is sent); one
  server each, all in front of the same replicas (a gate calibrated with `--data` calls one replica thousands of
  times before the server starts: minutes with this model, so it is not measured here);

at 30%, 60% and 90% of the fleet's capacity (W / the mean time per input, slow periods included), several
independent draws of the arrivals per point, pooled (a p99.9 of a few thousand requests rests on a handful of
them). Reported: p50 / p99 / p99.9, the share of degraded answers (decoded, not a replica's own) and how many of
them agree with the model's answer (argmax), the tasks per request (inferences the replicas ran, from Triton's own
statistics endpoint, over the requests answered), and the CPU cores the run used. First, with no slowness anywhere,
what the front end itself adds: the p50 of gencc uncoded against the direct client at 30% of capacity, and the
answered requests per second of each with 2W requests kept in flight (closed loop).

    python benchmarks/run.py upstreams --requests 1000 --seeds 10 --closed-s 8 --perf-analyzer PATH \
        --out docs/generated/upstreams-fleet.md           # the docs' page (about 70 minutes)
    python benchmarks/run.py upstreams --requests 300 --seeds 1        # a quick look

perf_analyzer (Triton's load tool; benchmarks/investigations/perf_analyzer_load.py says where to get it) runs at a
low rate on one replica and on gencc uncoded in front of the fleet: a check that it talks to both, not a load
figure.

The replicas need the venv of Debian's python3.11 with nvidia-pytriton (tests/engine/triton_replica.py, which this
benchmark uses to start them: `.ci/run` makes `.venv-triton`). This file is also loaded by that venv's Python as
the replicas' model: it imports numpy and the standard library only at the top.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = "upstreams"
W, K, SERVICE_MS, SLOW_F, SLOW_X, MEAN_SLOW_S = 12, 8, 50.0, 0.1, 10.0, 1.0
LOADS = (0.3, 0.6, 0.9)
D_IN, D_OUT = 16, 10
_WEIGHTS = np.random.default_rng(0).normal(size=(D_IN, D_OUT)) / 2
CONFIGS = ("direct", "uncoded", "hedged", "default", "gate-off")
#: each configuration's `gencc serve` options (direct: none, the client goes straight to the replicas)
FRONTS = {"uncoded": ["--scheme", "uncoded"], "hedged": ["--scheme", "hedged"], "default": [],
          "gate-off": ["--gate", "off"]}


# ---- the replicas' model (run by Triton's venv) -----------------------------------------------------------------
def classify(X: Any) -> np.ndarray:
    """The model: (B, 16) -> (B, 10), tanh of a linear map; its argmax is the class."""
    return np.tanh(np.asarray(X, dtype=np.float64) @ _WEIGHTS)


def slow_periods(replica: int, seed: int, draw: int, slow_fraction: float = SLOW_F, mean_slow_s: float = MEAN_SLOW_S,
                 horizon_s: float = 3600.0) -> list[tuple[float, float]]:
    """Replica `replica`'s slow periods (start, end) in seconds from a draw's start, up to `horizon_s`: an on/off
    process of exponential periods (slow: mean_slow_s; normal: long enough that the replica is slow
    slow_fraction of the time), its state at the start drawn from that fraction; seeded by (seed, replica, draw)."""
    if slow_fraction <= 0:
        return []
    rng = np.random.default_rng([seed, replica, draw])
    mean_normal = mean_slow_s * (1 - slow_fraction) / slow_fraction
    slow, t, out = bool(rng.random() < slow_fraction), 0.0, []
    while t < horizon_s:
        end = t + rng.exponential(mean_slow_s if slow else mean_normal)
        if slow:
            out.append((t, end))
        slow, t = not slow, end
    return out


def replica_model(replica: int = 0, service_ms: float = SERVICE_MS, slow_fraction: float = SLOW_F,
                  slow_factor: float = SLOW_X, mean_slow_s: float = MEAN_SLOW_S, seed: int = 0,
                  clock: str = "") -> Any:
    """Replica `replica`'s model: `classify` after sleeping service_ms per input, x slow_factor in its slow periods
    (`slow_periods`). `clock`: a file holding "START DRAW" (a draw's start, Unix time, and its number), read
    whenever it changes, so the periods restart with each draw (without one: draw 0 from the model's start)."""
    state: dict[str, Any] = {"stamp": None, "start": time.time(),
                             "periods": slow_periods(replica, seed, 0, slow_fraction, mean_slow_s)}
    lock = threading.Lock()

    def f(X: Any) -> np.ndarray:
        now = time.time()
        with lock:
            if clock:
                try:
                    stamp = os.stat(clock).st_mtime_ns
                    if stamp != state["stamp"]:
                        start, draw = Path(clock).read_text().split()
                        state.update(stamp=stamp, start=float(start),
                                     periods=slow_periods(replica, seed, int(draw), slow_fraction, mean_slow_s))
                except (OSError, ValueError):
                    pass  # no draw started yet: the periods go on
            t, periods = now - state["start"], state["periods"]
            i = bisect.bisect_right(periods, (t, math.inf)) - 1  # the last period starting by t
            factor = slow_factor if i >= 0 and t < periods[i][1] else 1.0
        time.sleep(service_ms / 1000 * len(X) * factor)
        return classify(X)

    return f


def capacity(slow_fraction: float = SLOW_F) -> float:
    """The fleet's capacity (req/s): W over the mean time per input, slow periods included."""
    return W / (SERVICE_MS / 1000 * (1 - slow_fraction + slow_fraction * SLOW_X))


def inputs(n: int = 512) -> np.ndarray:
    return np.random.default_rng(123).normal(size=(n, D_IN)).astype(np.float32)


# ---- the independent client (raw asyncio streams: oip_client) ----------------------------------------------------
def client(targets: list[str], rate: float, requests: int, seed: int, closed: int = 0, duration: float = 0.0,
           clock: str = "") -> dict:
    """Open-loop Poisson load at `rate` req/s, request i to targets[i % len(targets)] (or, with `closed` > 0, that
    many requests kept in flight for `duration` s; `clock`: a file this draw's start and seed are written to as
    it starts, which restarts the replicas' slow periods): every latency of the 200 answers (ms; open loop: from
    the request's scheduled time, so a client running late adds to it, never hides it), how late the client wrote
    each request (ms after its scheduled time), the other answers (and the requests whose connection failed), the
    degraded ones and how many of them (and of the rest) agree with `classify`."""
    import asyncio

    import httpx
    from oip_client import Failed, Pool, request

    X = inputs()
    want = classify(X).argmax(axis=1)
    meta = httpx.get(targets[0], timeout=10, trust_env=False).json()
    in_name, out_name = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    gaps = np.random.default_rng(seed).exponential(1 / rate, size=requests) if rate > 0 else np.zeros(0)
    times = np.cumsum(gaps)
    # every (target, input) request encoded before the clock starts
    wire = {(t, j): request(t + "/infer", json.dumps(
        {"inputs": [{"name": in_name, "shape": [1, D_IN], "datatype": "FP32", "data": X[j].tolist()}],
         "outputs": [{"name": out_name}]}).encode()) for t in targets for j in range(len(X))}
    got: dict[str, Any] = {"lat": [], "late": [], "not_200": 0, "degraded": 0, "degraded_agree": 0, "exact": 0,
                           "exact_agree": 0, "max_err": 0.0}

    async def run() -> float:
        pool = Pool()
        if clock:
            Path(clock).write_text(f"{time.time()!r} {seed}\n")
        t0 = time.perf_counter()

        async def one(i: int, due: float | None = None) -> None:
            j = i % len(X)
            where, data = wire[targets[i % len(targets)], j]
            sent = time.perf_counter()
            start = sent if due is None else t0 + due
            got["late"].append((sent - start) * 1000)
            try:
                status, body = await asyncio.wait_for(pool.exchange(where, data), 120)
            except (Failed, asyncio.TimeoutError):  # a connection refused, reset or closed, or no answer
                got["not_200"] += 1
                return
            took = (time.perf_counter() - start) * 1000
            if status != 200:
                got["not_200"] += 1
                return
            ans = json.loads(body)
            y = np.asarray(ans["outputs"][0]["data"], dtype=np.float64)
            got["lat"].append(took)
            agree = int(y.argmax() == want[j])
            if ans.get("parameters", {}).get("degraded"):
                got["degraded"] += 1
                got["degraded_agree"] += agree
            else:
                got["exact"] += 1
                got["exact_agree"] += agree
                got["max_err"] = max(got["max_err"], float(np.abs(y - classify(X[j][None])[0]).max()))

        try:
            if closed:
                count = iter(range(10 ** 9))

                async def loop() -> None:
                    while time.perf_counter() - t0 < duration:
                        await one(next(count))

                await asyncio.gather(*(loop() for _ in range(closed)))
            else:
                async def at(i: int, t: float) -> None:
                    await asyncio.sleep(max(0.0, t - (time.perf_counter() - t0)))
                    await one(i, t)

                await asyncio.gather(*(at(i, float(t)) for i, t in enumerate(times)))
        finally:
            pool.close()
        return time.perf_counter() - t0

    wall = asyncio.run(run())
    return {**got, "wall_s": wall}


# ---- the driver --------------------------------------------------------------------------------------------------
def _triton() -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    import triton_replica

    return triton_replica


def fleet(slow_fraction: float, seed: int, clock: str = "") -> list[Any]:
    """W Triton servers, started together, each replica_model(replica=i), reading `clock` (see `replica_model`)."""
    tr = _triton()
    py, why = tr.triton_python()
    if py is None:
        raise SystemExit(why)
    servers = []
    try:
        for i in range(W):
            servers.append(tr.TritonServer(py, f"{Path(__file__).resolve()}:replica_model", in_shape=(D_IN,),
                                           out_shape=(D_OUT,), wait=False,
                                           params={"replica": i, "slow_fraction": slow_fraction, "seed": seed,
                                                   "clock": clock}))
        for s in servers:
            s.wait_ready(300)
    except BaseException:
        for s in servers:
            s.kill()
        raise
    return servers


def serve(urls_file: Path, options: list[str], env: dict, launcher: list[str] | None = None,
          name: str = "gencc serve") -> tuple[subprocess.Popen, str]:
    """`gencc serve --upstreams FILE OPTIONS` on a free port: (process, its model's URL); `launcher`: the command
    before `serve` (default: this Python's `-m gencc.cli`), `name` what an error calls it."""
    import httpx

    port = _triton().free_port()
    cmd = [*(launcher or [sys.executable, "-m", "gencc.cli"]), "serve", "--upstreams", str(urls_file), "--port",
           str(port), "--name", "m", "--max-pending", "100000", *options]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v2/models/m"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited {proc.returncode}: {proc.stdout.read()[-2000:]}")
        try:
            if httpx.get(url + "/ready", timeout=2, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"{name} was not ready in 300 s")


def inferences(servers: list[Any]) -> int:
    """Inputs the replicas have run so far (Triton's statistics endpoint)."""
    import httpx

    total = 0
    for s in servers:
        stats = httpx.get(s.url + "/stats", timeout=10, trust_env=False).json()
        total += sum(int(m["inference_count"]) for m in stats["model_stats"])
    return total


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return total


def drive(targets: list[str], rate: float, requests: int, seed: int, env: dict, closed: int = 0,
          duration: float = 0.0, clock: str = "") -> dict:
    """The client in its own process (its CPU time included in `client_cpu_s`)."""
    args = [sys.executable, str(Path(__file__).resolve()), "--client", json.dumps(
        {"targets": targets, "rate": rate, "requests": requests, "seed": seed, "closed": closed,
         "duration": duration, "clock": clock})]
    t = os.times()
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the client failed: {out.stderr[-2000:]}")
    u = os.times()
    return {**json.loads(out.stdout.strip().splitlines()[-1]),
            "client_cpu_s": (u.children_user - t.children_user) + (u.children_system - t.children_system)}


def point(name: str, targets: list[str], servers: list[Any], pids: list[int], rate: float, requests: int,
          seed: int, env: dict, clock: str = "") -> dict:
    """One configuration at one load and seed: the client's figures, the replicas' inferences, the CPU used."""
    n0, c0, t0 = inferences(servers), cpu_seconds(pids), time.monotonic()
    row = drive(targets, rate, requests, seed, env, clock=clock)
    time.sleep(1.0)  # hedges and coded tasks still out finish, and are counted
    wall = time.monotonic() - t0
    row["tasks"] = inferences(servers) - n0
    row["cores"] = (cpu_seconds(pids) - c0 + row["client_cpu_s"]) / wall
    row.update(config=name, rate=rate, seed=seed)
    shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k not in ("lat", "late")}
    print(json.dumps(shown), flush=True)
    return row


def shut_down(fronts: list[subprocess.Popen], servers: list[Any]) -> None:
    """Stop the gencc front ends (SIGTERM, then wait) and kill the Triton replicas."""
    for f in fronts:
        f.terminate()
        f.wait(30)
    for s in servers:
        s.kill()


def pids_of(servers: list[Any], fronts: list[subprocess.Popen]) -> list[int]:
    tr = _triton()
    return [p for s in servers for p in (s.proc.pid, *tr._descendants(s.proc.pid))] + [f.pid for f in fronts]


def overhead(a: argparse.Namespace, env: dict, tmp: Path) -> dict:
    """With no slowness: p50 of the direct client and of gencc uncoded at 30% of capacity (open loop), and the
    answered req/s of each with 2W requests in flight (closed loop, `a.closed_s` s), interleaved."""
    servers = fleet(0.0, a.seed)
    fronts: list[subprocess.Popen] = []
    try:
        listing = tmp / "fleet.txt"
        listing.write_text("\n".join(s.url for s in servers) + "\n")
        front, url = serve(listing, FRONTS["uncoded"], env)
        fronts.append(front)
        direct = [s.url for s in servers]
        pids = pids_of(servers, fronts)
        rate = 0.3 * capacity(0.0)
        out: dict[str, dict] = {"direct": {"lat": [], "per_s": [], "cores": []},
                                "uncoded": {"lat": [], "per_s": [], "cores": []}}
        drive(direct, rate, 100, 99, env)  # warm-up: connections, Triton's first calls
        drive([url], rate, 100, 99, env)
        for j in range(a.seeds):
            for name, targets in (("direct", direct), ("uncoded", [url])):
                out[name]["lat"] += point(name, targets, servers, pids, rate, a.requests, a.seed + 500 + j, env)["lat"]
                c0, t0 = cpu_seconds(pids), time.monotonic()
                r = drive(targets, 0.0, 0, 0, env, closed=2 * W, duration=a.closed_s)
                out[name]["per_s"].append(len(r["lat"]) / r["wall_s"])
                out[name]["cores"].append((cpu_seconds(pids) - c0 + r["client_cpu_s"]) / (time.monotonic() - t0))
                print(json.dumps({"closed_loop": name, "per_s": out[name]["per_s"][-1],
                                  "cores": out[name]["cores"][-1]}), flush=True)
        return {"rate": rate, **{name: {"p50": float(np.percentile(v["lat"], 50)), "requests": len(v["lat"]),
                                        "per_s": float(np.median(v["per_s"])), "cores": float(np.max(v["cores"]))}
                                 for name, v in out.items()}}
    finally:
        shut_down(fronts, servers)


def tails(a: argparse.Namespace, env: dict, tmp: Path,
          starts: dict[str, Callable[[Path], tuple[subprocess.Popen, str]]] | None = None) -> list[dict]:
    """Every configuration at every load and seed, interleaved (seed, then load, then configuration); each draw
    restarts the replicas' slow periods (its seed, from its start), the same for every configuration. `starts`:
    name -> what starts that front end in front of the fleet listed in a file (its process and model URL);
    default: the client going direct, then CONFIGS' gencc front ends."""
    clock = str(tmp / "clock")
    servers = fleet(SLOW_F, a.seed, clock)
    fronts: list[subprocess.Popen] = []
    try:
        listing = tmp / "fleet.txt"
        listing.write_text("\n".join(s.url for s in servers) + "\n")
        urls = {}
        if starts is None:
            urls["direct"] = [s.url for s in servers]
            starts = {name: lambda listing, options=FRONTS[name]: serve(listing, options, env) for name in CONFIGS[1:]}
        for name, start in starts.items():
            proc, url = start(listing)
            fronts.append(proc)
            urls[name] = [url]
        pids = pids_of(servers, fronts)
        for name in urls:  # warm-up
            drive(urls[name], 0.3 * capacity(), 50, 99, env)
        rows = []
        for j in range(a.seeds):
            for i, load in enumerate(a.loads):
                rate = load * capacity()
                for name in urls:
                    row = point(name, urls[name], servers, pids, rate, a.requests, a.seed + i + 1000 * j, env,
                                clock)
                    rows.append({**row, "load": load})
                    time.sleep(1.0)
        return rows
    finally:
        shut_down(fronts, servers)


def pooled(rows: list[dict]) -> list[dict]:
    out = []
    for key in dict.fromkeys((r["load"], r["config"]) for r in rows):
        runs = [r for r in rows if (r["load"], r["config"]) == key]
        lat = np.concatenate([r["lat"] for r in runs])
        answered = sum(len(r["lat"]) for r in runs)
        p50, p99, p999 = (float(v) for v in np.percentile(lat, [50, 99, 99.9]))
        deg = sum(r["degraded"] for r in runs)
        out.append({"load": key[0], "config": key[1], "rate": runs[0]["rate"], "sent": sum(
            len(r["lat"]) + r["not_200"] for r in runs), "not_200": sum(r["not_200"] for r in runs),
            "p50": p50, "p99": p99, "p999": p999, "degraded": deg / max(answered, 1),
            "degraded_agree": sum(r["degraded_agree"] for r in runs) / deg if deg else float("nan"),
            "exact_agree": sum(r["exact_agree"] for r in runs) / max(sum(r["exact"] for r in runs), 1),
            "max_err": max(r["max_err"] for r in runs), "tasks": sum(r["tasks"] for r in runs) / max(answered, 1),
            "cores": max(r["cores"] for r in runs), "seeds": [float(np.percentile(r["lat"], 99.9)) for r in runs]})
    return out


def kept_to_schedule(raw: list[dict]) -> str:
    """A sentence on how late the client wrote its requests (after their scheduled times), over every draw."""
    late = [np.asarray(r["late"]) for r in raw if r.get("late")]
    if not late:
        return ""
    worst = max(float(np.percentile(x, 99.9)) for x in late)
    return (f"The client kept to its schedule: in every draw of every configuration, 99.9% of its requests left within "
            f"{worst:.1f} ms of their scheduled times (the latest {max(float(x.max()) for x in late):.0f} ms).")


#: the page's interval for the default's ratio: the middle LEVEL of RESAMPLES bootstrap resamples of the draws
LEVEL, RESAMPLES = 0.9, 2000


def ratio_interval(raw: list[dict], load: float, config: str = "default", level: float = LEVEL,
                   resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """`config`'s pooled p99.9 over the better of direct's and hedged's at `load`, with a `level` bootstrap
    interval over the draws: whole draws resampled with replacement, the same draws for every configuration
    (they met the same arrivals and slow periods), pooled, the ratio recomputed."""
    runs = {c: [r["lat"] for r in raw if r["load"] == load and r["config"] == c] for c in (config, "direct", "hedged")}
    n = len(runs[config])
    if n == 0 or any(len(v) != n for v in runs.values()):
        raise ValueError(f"every configuration needs the same draws at load {load}")

    def ratio(idx: Any) -> float:
        p = {c: np.percentile(np.concatenate([v[i] for i in idx]), 99.9) for c, v in runs.items()}
        return float(p[config] / min(p["direct"], p["hedged"]))

    rng = np.random.default_rng(seed)
    boot = [ratio(rng.integers(0, n, n)) for _ in range(resamples)]
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return ratio(range(n)), float(lo), float(hi)


def interval_table(raw: list[dict]) -> str:
    """Per load: the default's p99.9 over the better of direct and hedged, with its bootstrap interval (LEVEL)."""
    out = ["| load | default's p99.9 / best of direct, hedged | "
           f"{LEVEL:.0%} interval over the draws |", "|---|---|---|"]
    for load in dict.fromkeys(r["load"] for r in raw):
        est, lo, hi = ratio_interval(raw, load)
        out.append(f"| {load:.0%} | {est:.2f} | {lo:.2f} to {hi:.2f} |")
    return "\n".join(out)


def table(rows: list[dict]) -> str:
    out = ["| load | client / front end | requests | failed | p50 (ms) | p99 (ms) | p99.9 (ms) | p99.9 / direct's | "
           "p99.9 / best of direct, hedged | degraded | degraded that agree | exact that agree | tasks per request | "
           "CPU cores used (most) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = {u["config"]: u for u in rows if u["load"] == r["load"]}
        best = min(same[c]["p999"] for c in ("direct", "hedged") if c in same)
        name = {"direct": "direct round-robin", "default": "gencc default (sgcc)",
                "gate-off": "gencc default, --gate off"}.get(r["config"], f"gencc {r['config']}")
        agree = "" if math.isnan(r["degraded_agree"]) else f"{r['degraded_agree']:.1%}"
        out.append(f"| {r['load']:.0%} | {name} | {r['sent']:,} | {r['not_200']} | {r['p50']:.0f} | {r['p99']:.0f} | "
                   f"{r['p999']:.0f} | {r['p999'] / same['direct']['p999']:.2f} | {r['p999'] / best:.2f} | "
                   f"{r['degraded']:.1%} | {agree} | {r['exact_agree']:.1%} | {r['tasks']:.2f} | {r['cores']:.2f} |")
    out += ["", "p99.9 of each draw alone (ms; the same arrivals and slow periods for every configuration):", "",
            "| load | " + " | ".join(CONFIGS) + " |", "|---|" + "---|" * len(CONFIGS)]
    for load in dict.fromkeys(r["load"] for r in rows):
        by = {r["config"]: r["seeds"] for r in rows if r["load"] == load}
        out.append(f"| {load:.0%} | " + " | ".join(", ".join(f"{v:.0f}" for v in by[c]) for c in CONFIGS) + " |")
    return "\n".join(out)


def overhead_table(o: dict) -> str:
    d, u = o["direct"], o["uncoded"]
    return ("| | direct round-robin | gencc uncoded | gencc - direct | gencc / direct |\n|---|---|---|---|---|\n"
            f"| p50 at {o['rate']:.0f} req/s, open loop (ms) | {d['p50']:.1f} | {u['p50']:.1f} | "
            f"{u['p50'] - d['p50']:+.1f} | |\n"
            f"| answered req/s, {2 * W} in flight (median of draws) | {d['per_s']:.0f} | {u['per_s']:.0f} | | "
            f"{u['per_s'] / d['per_s']:.2f} |\n"
            f"| CPU cores used, closed loop (most) | {d['cores']:.2f} | {u['cores']:.2f} | | |")


def perf_analyzer(binary: str, env: dict, tmp: Path) -> str:
    """perf_analyzer (Triton's load tool) at the same rate on one replica directly and on gencc uncoded in front of
    the fleet (no slowness; --input-data zero: its random data are float32 up to about 1e31)."""
    import csv

    servers = fleet(0.0, 0)
    front = None
    try:
        listing = tmp / "fleet.txt"
        listing.write_text("\n".join(s.url for s in servers) + "\n")
        front, url = serve(listing, FRONTS["uncoded"], env)
        lines = ["| perf_analyzer on | request rate | answered per s | p50 (ms) | p99 (ms) |", "|---|---|---|---|---|"]
        for name, hostport in (("one Triton replica", f"127.0.0.1:{servers[0].port}"),
                               ("gencc uncoded in front of the fleet", url.split("/")[2])):
            out = tmp / "pa.csv"
            cmd = [binary, "-m", "m", "-u", hostport, "-i", "http", "--request-rate-range", "10",
                   "--request-distribution", "poisson", "--measurement-interval", "5000", "--max-trials", "3",
                   "--stability-percentage", "100", "--input-data", "zero", "-f", str(out)]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
            if p.returncode != 0 or not out.exists():
                raise SystemExit(f"perf_analyzer failed ({p.returncode}): {(p.stdout + p.stderr)[-2000:]}")
            with out.open() as fh:
                row = next(csv.DictReader(fh))
            lines.append(f"| {name} | 10 | {float(row['Inferences/Second']):.1f} | "
                         f"{float(row['p50 latency']) / 1000:.1f} | {float(row['p99 latency']) / 1000:.1f} |")
        return "\n".join(lines)
    finally:
        shut_down([front] if front is not None else [], servers)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--requests", type=int, default=1500, help="requests per point and draw (1500)")
    ap.add_argument("--seeds", type=int, default=3, help="independent draws of the arrivals per point, pooled (3)")
    ap.add_argument("--seed", type=int, default=0, help="the first draw's seed, and the slowness's")
    ap.add_argument("--loads", type=float, nargs="+", default=list(LOADS), help="fractions of the fleet's capacity")
    ap.add_argument("--closed-s", type=float, default=10.0, help="seconds of each closed-loop throughput run (10)")
    ap.add_argument("--perf-analyzer", default=None, metavar="PATH", help="also run Triton's perf_analyzer (see "
                    "benchmarks/investigations/perf_analyzer_load.py for where to get it)")
    ap.add_argument("--skip-overhead", action="store_true", help="skip the front end's own cost")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown page here")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.client is not None:
        print(json.dumps(client(**json.loads(a.client))))
        return 0
    if a.requests < 50 or not 1 <= a.seeds <= 20 or not all(0 < x < 1.2 for x in a.loads) or a.closed_s <= 0:
        ap.error("--requests must be at least 50, --seeds in 1..20, --loads in (0, 1.2), --closed-s > 0")
    sys.path.insert(0, str(HERE))
    from measure import command, machine

    print(machine(), flush=True)
    env = {**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    if a.perf_analyzer:  # before the minutes of work: a binary that cannot start (a missing library) says so now
        try:
            p = subprocess.run([a.perf_analyzer, "--help"], capture_output=True, text=True, timeout=30, env=env)
        except OSError as e:
            ap.error(f"--perf-analyzer {a.perf_analyzer}: {e.strerror}")
        if p.returncode == 127 or "error while loading shared libraries" in p.stderr:
            ap.error(f"--perf-analyzer {a.perf_analyzer} cannot start: {p.stderr.strip()[:300]} (see "
                     "benchmarks/investigations/perf_analyzer_load.py for its libraries)")
    with tempfile.TemporaryDirectory() as tmp:
        over = None if a.skip_overhead else overhead(a, env, Path(tmp))
        if over is not None:
            print(overhead_table(over), flush=True)
        raw = tails(a, env, Path(tmp))
        rows = pooled(raw)
        pa = perf_analyzer(a.perf_analyzer, env, Path(tmp)) if a.perf_analyzer else None
    when = machine()
    text = table(rows)
    spread = interval_table(raw) if {"direct", "hedged", "default"} <= {r["config"] for r in raw} else None
    schedule = kept_to_schedule(raw)
    print(text)
    if spread:
        print(spread)
    print(schedule)
    if pa:
        print(pa)
    if a.out is None:
        return 0
    shown = os.path.relpath(a.out.resolve(), ROOT)
    argv_shown = [x for x in (sys.argv[1:] if argv is None else argv) if x not in ("--out", str(a.out))]
    argv_shown = ["PATH" if x == a.perf_analyzer else x for x in argv_shown]  # where perf_analyzer lies here
    cmd = command(SUITE, [*argv_shown, "--out", shown])
    page = [f"Generated by `{cmd}`; do not edit by hand. {when}", "",
            f"W = {W} Triton replicas (separate `tritonserver` processes, CPU, one model instance each), a model of "
            f"{SERVICE_MS:g} ms per input, each replica slow x{SLOW_X:g} {SLOW_F:.0%} of the time in periods of "
            f"{MEAN_SLOW_S:g} s on average (its own model code); capacity {capacity():.0f} req/s. "
            f"{a.seeds} draws of {a.requests:,} Poisson arrivals per point, pooled, the same draws for every "
            "configuration, each draw with the same slow periods for all (they restart with the draw); the client "
            "(`benchmarks/oip_client.py`: pre-encoded requests on raw asyncio streams) runs open loop, in a process "
            "of its own, and a latency counts from the request's scheduled time. gencc's default is sgcc "
            f"with K = {K} over the {W} replicas: with no training inputs its gate holds every decode (every answer "
            "is a replica's own); with `--gate off` every decode it makes is sent. Tasks per request: the inputs "
            "the replicas ran (Triton's statistics) over the requests answered. CPU cores: client, gencc and "
            "Triton processes together, the most of any draw, of the machine's 2 shared cores.", ""]
    if over is not None:
        page += ["What the front end adds, with no slowness anywhere (the same replicas):", "", overhead_table(over),
                 ""]
    page += ["Tail latency at equal replicas:", "", text, ""]
    if schedule:
        page += [schedule, ""]
    if spread:
        page += ["How far the draws move the default's ratio: the same ratio over whole draws resampled with "
                 f"replacement (paired: a resample takes the same draws for every configuration), {RESAMPLES:,} times; "
                 f"the interval holds the middle {LEVEL:.0%} of them.", "", spread, ""]
    if pa:
        page += ["Triton's perf_analyzer (Poisson, 10 req/s, zero inputs) on a replica and on gencc in front:", "",
                 pa, ""]
    a.out.write_text("\n".join(page))
    return 0


if __name__ == "__main__":
    sys.exit(main())
