"""Answer by the deadline on a real server: `gencc serve` in its own process, driven from this one by an open-loop
HTTP client on loopback, every request carrying its latency target (`python benchmarks/run.py deadlines --real`;
`deadlines-real` is the same run).

    python benchmarks/run.py deadlines --real --duration 20 --seeds 3 --out docs/generated/deadlines-real.md

Per scheme (the default sgcc, hedged requests, uncoded: `--real-schemes`) one server: digits-cnn on W = 12
threads, 50 ms service, each worker slow x10 about 10% of the time, `--deadline-ms` at 2x the service time (its
queue earliest deadline first) and each request's own header `X-Deadline-Ms` saying the same. Per load
(`--real-loads`, fractions of uncoded's capacity) `--seeds` Poisson arrival draws of `--duration` s each, the
figures pooled over all their requests, with the spread between draws beside them. The client:

- times every answer from its send to its last byte (client-side: the loopback round trip and the client's own
  scheduling on a shared machine included; its schedule lag is reported) and reads the server's own
  arrival-to-answer time from the body of each 200 and 504 (server-side);
- checks every answer against the model computed in its own process on the same input: an exact answer must
  equal the model's output (to float32 rounding: a batch of one and a batch of many round differently), a
  degraded one is scored by top-1 agreement;
- reads the server process's CPU time (utime + stime, /proc/PID/stat) before and after each draw: the server's
  CPU per request beside the share of requests that missed their target.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # measure.py, when run as a script

from measure import free_port, generated_by, machine, server_ready  # noqa: E402

SUITE = "deadlines"
BASELINES = ("uncoded", "hedged", "replication")
#: inputs served (held-out test inputs, cycled); the client computes the model on each once
N_INPUTS = 500
#: an exact answer equals the model's output to this (float32 rounding of a batch of one against a batch)
EXACT_TOL = 1e-4
#: seconds of load at 0.3 of capacity before a scheme's first point (its task-time and hedge statistics fill)
WARMUP_S = 5.0
#: seconds the idle server's CPU is read over, before its first point
IDLE_S = 3.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far, all its threads (Linux /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_seconds(pid: int) -> float:
    """Seconds the threads of process `pid` have spent runnable but waiting for a CPU (the sum over its live
    threads of /proc/PID/task/TID/schedstat's run-queue time): what other processes on the machine cost it."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def measure_draw(pid: int, drive: Any) -> dict[str, Any]:
    """Run `drive()` (rows, lags) and read process `pid`'s CPU and CPU wait around it, and the load average."""
    c0, w0, t0 = cpu_seconds(pid), wait_seconds(pid), time.monotonic()
    rows, lags = drive()
    time.sleep(0.5)  # abandoned tasks finish inside the draw's reading
    return {"rows": rows, "lags": lags, "cpu_s": cpu_seconds(pid) - c0, "wait_s": wait_seconds(pid) - w0,
            "wall_s": time.monotonic() - t0, "loadavg": os.getloadavg()[0]}


async def _drive(port: int, rate: float, duration: float, bodies: list[bytes], seed: int, target_ms: float,
                 timeout: float) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Poisson arrivals at `rate`/s for `duration` s on 127.0.0.1:port/predict, request i sending input
    (i + 97 seed) mod len(bodies) with header X-Deadline-Ms; rows (input, status, client latency ms, body) and
    the send lags (ms, actual minus scheduled)."""
    from gencc.loadgen.arrivals import poisson_arrivals
    from gencc.loadgen.client import HttpClient, Pending

    times = poisson_arrivals(rate, duration, np.random.default_rng(seed))
    loop = asyncio.get_running_loop()
    client = HttpClient("127.0.0.1", port, 512, timeout)
    headers = {"Content-Type": "application/json", "X-Deadline-Ms": f"{target_ms:g}"}
    raws = [client.encode("POST", "/predict", b, headers) for b in bodies]
    rows: list[dict[str, Any]] = [{} for _ in times]
    lags = np.zeros(len(times))
    left, finished = [len(times)], loop.create_future()

    def record(i: int, k: int, due: float, p: Pending, status: int, body: bytes, err: Any) -> None:
        sent = p.sent or due
        lags[i] = (sent - due) * 1000
        rows[i] = {"input": k, "status": status, "latency_ms": (loop.time() - sent) * 1000, "body": body}
        left[0] -= 1
        if not left[0] and not finished.done():
            finished.set_result(None)

    t0 = loop.time()
    for i, t in enumerate(times):
        due = t0 + float(t)
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        k = (i + 97 * seed) % len(raws)
        p = Pending(raws[k], lambda *a: None)
        p.done = functools.partial(record, i, k, due, p)
        client.send(p)
    if left[0]:
        await finished
    client.close()
    return rows, lags


def judge(rows: list[dict[str, Any]], reference: np.ndarray, target_ms: float) -> list[dict[str, Any]]:
    """Each answer read and checked against the model's own output on its input: kind ("exact", "degraded",
    "504", or the status), inside (a 200 the client received within the target), the server's latency for a
    200 or a 504, whether an exact answer equals the model's and whether a degraded one has its top-1."""
    out = []
    for r in rows:
        body: dict[str, Any] = {}
        if r["body"]:
            try:
                body = json.loads(r["body"])
            except ValueError:
                body = {}
        st, ref = r["status"], reference[r["input"]]
        j = {"status": st, "latency_ms": r["latency_ms"], "server_ms": math.nan, "equal": None, "agree": None}
        if st == 200 and "output" in body:
            y = np.asarray(body["output"], dtype=np.float64).reshape(-1)
            j["server_ms"] = float(body.get("latency_ms", math.nan))
            if body.get("degraded"):
                j["kind"], j["agree"] = "degraded", bool(np.argmax(y) == np.argmax(ref))
            else:
                j["kind"] = "exact"
                j["diff"] = float(np.max(np.abs(y - ref))) if y.shape == ref.shape else math.inf
                j["equal"] = j["diff"] <= EXACT_TOL * max(1.0, float(np.max(np.abs(ref))))
        else:
            j["kind"] = "504" if st == 504 else str(st)
            if st == 504:  # the server's own arrival-to-answer time: when it sent the 504
                j["server_ms"] = float(body.get("latency_ms", math.nan))
            j["unrun"] = st == 504 and "cannot be met" in str(body.get("error", ""))  # never sent to a worker
        j["inside"] = j["kind"] in ("exact", "degraded") and r["latency_ms"] <= target_ms
        out.append(j)
    return out


def draw_figures(d: dict[str, Any], target_ms: float) -> dict[str, Any]:
    """One draw's own figures: its share inside, its latest answers against the target (client- and server-side),
    the server's CPU use and its wait for a CPU (ms per second of the draw), the machine's load average."""
    js = d["judged"]
    answered = [j["latency_ms"] for j in js if j["kind"] in ("exact", "degraded", "504")]
    server = [j["server_ms"] for j in js if math.isfinite(j["server_ms"])]
    return {"n": len(js), "inside": sum(j["inside"] for j in js) / max(len(js), 1),
            "late_client": max(answered, default=math.nan) - target_ms,
            "late_server": max(server, default=math.nan) - target_ms,
            "cpu_per_s": 1000 * d["cpu_s"] / d["wall_s"], "wait_per_s": 1000 * d["wait_s"] / d["wall_s"],
            "loadavg": d["loadavg"]}


def point(draws: list[dict[str, Any]], target_ms: float, idle_cpu_per_s: float = 0.0) -> dict[str, Any]:
    """One scheme at one load, its draws pooled (each: answers `judged`, send `lags` (ms), the server's `cpu_s`
    and `wait_s` (CPU seconds used, seconds its threads waited for a CPU) over `wall_s` s, the `loadavg`);
    `idle_cpu_per_s`: the idle server's CPU ms per second, for the CPU per request above idle."""
    js = [j for d in draws for j in d["judged"]]
    n = len(js)
    kinds = [j["kind"] for j in js]
    exact = [j for j in js if j["kind"] == "exact"]
    deg = [j for j in js if j["kind"] == "degraded"]
    t504 = [j["latency_ms"] for j in js if j["kind"] == "504"]
    per = [draw_figures(d, target_ms) for d in draws]
    cpu_s, wall_s = sum(d["cpu_s"] for d in draws), sum(d["wall_s"] for d in draws)
    return {
        "n": n, "inside": sum(j["inside"] for j in js) / n, "draw_min": min(f["inside"] for f in per),
        "draw_max": max(f["inside"] for f in per), "draws": per,
        "exact": len(exact) / n, "degraded": len(deg) / n, "504": len(t504) / n,
        "other": sum(k not in ("exact", "degraded", "504") for k in kinds) / n,
        "equal": (sum(bool(j["equal"]) for j in exact), len(exact)),
        "max_diff": max((j["diff"] for j in exact), default=math.nan),
        "agree": (sum(bool(j["agree"]) for j in deg), len(deg)),
        "late_client": max(f["late_client"] for f in per), "late_server": max(f["late_server"] for f in per),
        "late_200s": sum(j["server_ms"] > target_ms for j in js
                         if j["kind"] in ("exact", "degraded") and math.isfinite(j["server_ms"])),
        "504_ms": (float(np.median(t504)), max(t504)) if t504 else None,
        "unrun": sum(bool(j.get("unrun")) for j in js),
        "lag_p99": float(np.percentile(np.concatenate([d["lags"] for d in draws]), 99)),
        "cpu_ms": 1000 * cpu_s / n, "cpu_above_idle_ms": (1000 * cpu_s - idle_cpu_per_s * wall_s) / n,
        "wait_per_s": 1000 * sum(d["wait_s"] for d in draws) / wall_s,
    }


def _share(k: int, n: int) -> str:
    return f"{k / n:.4f} ({k}/{n})" if n else "-"


def rows_md(scheme: str, load: float, p: dict[str, Any]) -> tuple[str, str, list[str]]:
    """The point's line in the answers table and in the timing and CPU table, and its draws' lines."""
    t504 = "-" if p["504_ms"] is None else f"{p['504_ms'][0]:.1f} / {p['504_ms'][1]:.1f}"
    n504 = round(p["504"] * p["n"])
    answers = (f"| {scheme} | {load:g} | {p['n']} | {p['inside']:.4f} | {p['draw_min']:.4f} - {p['draw_max']:.4f} "
               f"| {p['exact']:.4f} | {p['degraded']:.4f} | {p['504']:.4f} | {p['other']:.4f} | "
               f"{_share(*p['equal'])} | {p['max_diff']:.1e} | {_share(*p['agree'])} |")
    timing = (f"| {scheme} | {load:g} | {p['late_client']:+.1f} | {p['late_server']:+.1f} | {p['late_200s']} | "
              f"{t504} | {p['unrun']}/{n504} | {p['lag_p99']:.1f} | {1 - p['inside']:.4f} | {p['cpu_ms']:.2f} | "
              f"{p['cpu_above_idle_ms']:.2f} | {p['wait_per_s']:.0f} |")
    draws = [f"| {scheme} | {load:g} | {i} | {f['n']} | {f['inside']:.4f} | {f['late_client']:+.1f} | "
             f"{f['late_server']:+.1f} | {f['cpu_per_s']:.0f} | {f['wait_per_s']:.0f} | {f['loadavg']:.1f} |"
             for i, f in enumerate(p["draws"])]
    return answers, timing, draws


def serve(a: argparse.Namespace, scheme: str, port: int, target_ms: float) -> subprocess.Popen:
    """`gencc serve` for `scheme` in its own process on 127.0.0.1:port, ready (its gate calibrated)."""
    cmd = [sys.executable, "-c", "from gencc.cli import main; main()", "serve", "--workload", a.model,
           "--scheme", scheme, "--workers", str(a.workers), "--service-ms", str(a.service_ms),
           "--slow-fraction", str(a.F), "--slow-factor", str(a.X), "--deadline-ms", f"{target_ms:g}",
           "--port", str(port)]
    if scheme not in BASELINES:
        cmd += ["--K", str(a.K)]
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_end = time.monotonic() + 300
    while not server_ready(port) and time.monotonic() < t_end and srv.poll() is None:
        time.sleep(0.5)
    if not server_ready(port):
        srv.kill()
        raise RuntimeError(f"gencc serve --scheme {scheme} did not become ready")
    return srv


def real(a: argparse.Namespace, argv: list[str]) -> str:
    """`--real`: each scheme served by `gencc serve` in its own process, loaded from this one (see above)."""
    from deadlines import capacity

    from gencc.workloads import load as load_workload

    target = 2 * a.service_ms
    w = load_workload(a.model, progress=False)
    X = np.asarray(w.X_test[:N_INPUTS], dtype=np.float32)  # held-out inputs; the model on each, in this process
    reference = np.stack([np.asarray(w.f(X[i:i + 1]), dtype=np.float64).reshape(-1) for i in range(len(X))])
    bodies = [json.dumps({"input": x.tolist()}).encode() for x in X]
    answers, timing, per_draw, idle = [], [], [], []
    for scheme in a.real_schemes:
        port = free_port()
        srv = serve(a, scheme, port, target)
        try:
            asyncio.run(_drive(port, 0.3 * capacity(a), WARMUP_S, bodies, 10_000, target, 10.0))
            c0 = cpu_seconds(srv.pid)
            time.sleep(IDLE_S)
            idle_per_s = 1000 * (cpu_seconds(srv.pid) - c0) / IDLE_S
            idle.append(f"{scheme} {idle_per_s:.0f}")
            for load in a.real_loads:
                draws = []
                for seed in range(a.seeds):
                    d = measure_draw(srv.pid, lambda seed=seed, load=load, port=port: asyncio.run(
                        _drive(port, load * capacity(a), a.duration, bodies, seed, target, 10.0)))
                    d["judged"] = judge(d.pop("rows"), reference, target)
                    draws.append(d)
                lines = rows_md(scheme, load, point(draws, target, idle_per_s))
                answers.append(lines[0])
                timing.append(lines[1])
                per_draw += lines[2]
                print(lines[0], lines[1], *lines[2], sep="\n", flush=True)
        finally:
            srv.terminate()
            srv.wait(60)
    head = (f"A real `gencc serve` (threads), {machine()} {a.model}, W = {a.workers}, K = {a.K}, "
            f"{a.service_ms:g} ms service, slow x{a.X:g} {a.F:.0%} of the time, `--deadline-ms {target:g}` and "
            f"each request's `X-Deadline-Ms: {target:g}`; per point {a.seeds} Poisson arrival draws of "
            f"{a.duration:g} s from an HTTP client in another process, pooled; load as a fraction of uncoded's "
            f"capacity ({capacity(a):.0f} requests/s).")
    lines = [generated_by(SUITE, argv), "", head, "",
             "**Answers.** Inside target: a 200 the client received within the target, over all requests pooled; "
             "per draw: the lowest and highest of the draws' shares. 200 exact / degraded / 504 / other: shares "
             "of all requests, whenever received. Exact = model: exact answers equal to the model's output "
             "computed in the client's process on the same input (to float32 rounding), with the largest "
             "difference; degraded top-1: decoded answers whose top-1 is the model's.", "",
             "| scheme | load | requests | inside target | per draw | 200 exact | 200 degraded | 504 | other | "
             "exact = model | max diff | degraded top-1 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|", *answers, "",
             "**Timing and CPU.** Latest - target: the latest answer (200 or 504) against the target, "
             "client-side (from its send to its last byte received) and server-side (the arrival-to-answer "
             "time in the body of a 200 or a 504); 200s late: answers the server itself sent after the target; "
             "504 client ms: median / latest; unrun: 504s answered before any worker ran them (their deadline "
             "could not be met), of all 504s; client lag p99: how late the client sent against its schedule "
             "(its own scheduling on the shared machine); missed: 1 - inside; server CPU: the server process's "
             "user + system CPU time over the draws per request, and above its idle use (CPU ms per second "
             "idle: " + ", ".join(idle)
             + "); CPU wait: milliseconds per second its threads were runnable but waiting for a CPU (taken by "
             "other processes, this client's included).", "",
             "| scheme | load | latest - target, client (ms) | latest - target, server (ms) | 200s late | "
             "504 client ms | unrun 504s | client lag p99 (ms) | missed | server CPU ms / request | above idle | "
             "CPU wait (ms/s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|", *timing, "",
             "**Per draw.** Each draw's share inside, its latest answers against the target, the server's CPU "
             "use and CPU wait (ms per second of the draw) and the machine's 1-minute load average after it.", "",
             "| scheme | load | draw | requests | inside target | latest - target, client (ms) | "
             "latest - target, server (ms) | server CPU (ms/s) | CPU wait (ms/s) | load average |",
             "|---|---|---|---|---|---|---|---|---|---|", *per_draw]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The same run as `deadlines --real` (its options)."""
    import deadlines

    return deadlines.main(["--real", *(sys.argv[1:] if argv is None else argv)], prog=prog)


if __name__ == "__main__":
    sys.exit(main())
