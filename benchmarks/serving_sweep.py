"""Where coding pays: a load sweep of every scheme at equal W, in the simulator and on the real worker pool.

    python benchmarks/run.py serving-sweep sim  --out results/sweep/sim.json      # virtual time (machine-independent)
    python benchmarks/run.py serving-sweep real --out results/sweep/real.json     # real threads + the sim's prediction
    python benchmarks/run.py serving-sweep policies --out results/sweep/pol.json  # load-adaptive variants compared
    python benchmarks/run.py serving-sweep report --inputs a.json b.json --md table.md --png figure.png

Setting: W = 12 workers, K = 8, 50 ms service, each worker slow x10 about 10% of the time (exponential
periods, mean 1 s); load is a fraction of uncoded's capacity W / E[task time] = W / (S (1 - F + F X)), about
126 requests per second. Every scheme gets the same W and, per seed, the same arrivals and slow periods.
"-full" after an eager coded scheme (gcc-full, sgcc-full) is that scheme without load-adaptive redundancy (every
coded task sent whatever the queues; `gencc.serving.Redundancy`). Per point: p50, p99, p99.9 and the gap p99.9 -
p50 (ms), the gap against uncoded's at the same load, and tasks run per request.

The simulator runs no model by default (`--gate sent`: every decode is sent, as with the gate off); `--gate held`
runs a stand-in model with a gate that holds every decode, which is what the calibrated gate does for gcc and
bacc on digits-cnn (`docs/guides/serving.md`). `real` serves digits-cnn in process on the thread pool (gate off
unless `--gate on`), then predicts each point in the simulator from that run's own arrivals, slow periods and
measured normal-state task times (by the number of busy workers); the table shows the prediction beside each
measured figure. Real latencies depend on the machine: the table's header gives the load average.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from measure import machine

from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.loadgen import poisson_arrivals
from gencc.serving import (
    DEFAULT_REDUNDANCY,
    SCHEMES,
    Gate,
    Redundancy,
    Service,
    freeze_heap,
    make_dispatcher,
    simulate_load,
)
from gencc.workloads import load as load_workload

SIM_SCHEMES = ["uncoded", "hedged", "gcc-full", "gcc", "sgcc-full", "sgcc", "gcc-hedge"]
REAL_SCHEMES = ["uncoded", "hedged", "gcc", "sgcc", "gcc-hedge"]
LOADS = [0.1, 0.3, 0.57, 0.76, 0.95, 1.1, 1.2]
REAL_LOADS = [0.1, 0.3, 0.57, 0.76, 0.95]
#: the variants `policies` compares: name -> Redundancy (None: every coded task)
POLICIES = {"full": None, "idle+late": Redundancy(0), "idle+late-coded": Redundancy(0, "coded"),
            "idle+late-copy": Redundancy(0, "copy"), "idle": Redundancy(0, "off"), "queue<=1+late": Redundancy(1),
            "queue<=2+late": Redundancy(2)}


def capacity(a: argparse.Namespace) -> float:
    return a.workers / (a.service_ms / 1000 * (1 - a.F + a.F * a.X))


def split(name: str) -> tuple[str, Redundancy | None]:
    """(scheme, redundancy) of a sweep name: "-full" drops the load-adaptive policy."""
    if name.endswith("-full"):
        return name.removesuffix("-full"), None
    return name, DEFAULT_REDUNDANCY


class StandIn:
    """A fixed random tanh layer (16 -> 10), for decodes the gate can judge when the simulator runs no real model."""

    batched = True

    def __init__(self):
        rng = np.random.default_rng(0)
        self.A = rng.normal(size=(16, 10))

    def __call__(self, Z):
        return np.tanh(np.asarray(Z, dtype=float).reshape(len(Z), -1) @ self.A)


def summarize(lat_ms: np.ndarray, tasks: int, n: int) -> dict:
    p50, p99, p999 = (float(v) for v in np.percentile(lat_ms, [50, 99, 99.9]))
    return {"p50": p50, "p99": p99, "p999": p999, "gap": p999 - p50, "tasks": tasks / max(n, 1), "n": int(n)}


def sim_run(name: str, a: argparse.Namespace, rate: float, seed: int, gate: str, service: ServiceTimes | None = None,
            arrivals: np.ndarray | None = None, redundancy: Redundancy | None | str = "name"
            ) -> tuple[np.ndarray, int, int]:
    """One simulated run: (latencies of answered requests in ms, tasks run, requests)."""
    scheme, red = split(name)
    if redundancy != "name":
        red = redundancy
    held = gate == "held" and scheme not in ("uncoded", "hedged", "replication")
    env = VirtualWorkers(a.workers, service or ServiceTimes(a.service_ms / 1000),
                         PersistentStragglers(a.workers, a.F, a.X, a.mean_slow_s, seed=seed), seed=seed,
                         functions={"f": StandIn()} if held else None)
    kw = {} if scheme in ("uncoded", "hedged", "replication") else {
        "redundancy": red, "gate": Gate(math.inf) if held else None, "max_wait": a.max_wait_ms / 1000}
    X = np.random.default_rng([seed, 9]).normal(size=(1000, 16)).astype(np.float32) if held else None
    reqs = simulate_load(lambda e: make_dispatcher(scheme, e, K=a.K, seed=seed, request_timeout=120.0, **kw), env,
                         rate, a.duration, inputs=X, seed=seed, drain=300.0, arrivals=arrivals)
    if any(r.status != 200 for r in reqs):
        raise RuntimeError(f"{name}: {sum(r.status != 200 for r in reqs)} requests not answered 200")
    return np.array([r.latency for r in reqs]) * 1000, len(env.executed), len(reqs)


def sim_point(name: str, load: float, a: argparse.Namespace, redundancy: Redundancy | None | str = "name") -> dict:
    lat, tasks, n = [], 0, 0
    for seed in range(a.seeds):
        got = sim_run(name, a, load * capacity(a), seed, a.gate, redundancy=redundancy)
        lat.append(got[0])
        tasks, n = tasks + got[1], n + got[2]
    return {"source": "sim", "scheme": name, "load": load, "gate": a.gate, **summarize(np.concatenate(lat), tasks, n)}


def real_point(name: str, load: float, a: argparse.Namespace, w) -> dict:
    """One point on real threads (digits-cnn in process), and the simulator's prediction of it."""

    if name not in SCHEMES:
        raise SystemExit(f"real: unknown scheme {name!r} (the -full variants are simulator-only)")
    seed = a.seed
    svc = Service.build(w, name, a.workers, a.K, service_ms=a.service_ms, slow_fraction=a.F, slow_factor=a.X,
                        mean_slow_s=a.mean_slow_s, max_wait_ms=a.max_wait_ms, seed=seed, max_pending=100_000,
                        gate=a.gate, request_timeout=120.0)
    if a.gate == "on":
        svc.gate.ready.wait()
    freeze_heap()
    rate = load * capacity(a)
    times = poisson_arrivals(rate, a.duration, np.random.default_rng([seed, 7]))
    X = w.X_test[np.random.default_rng([seed, 8]).integers(len(w.X_test), size=len(times))]
    before = os.getloadavg()[0]
    t0 = time.perf_counter()
    futs = []
    for t, x in zip(times, X, strict=True):
        d = t - (time.perf_counter() - t0)
        if d > 0:
            time.sleep(d)
        futs.append(svc.submit(x))
    reqs = [f.result(timeout=300) for f in futs]
    svc.close()
    ex = list(svc.pool.executed)  # the latest tasks (`Workers.executed` keeps a bounded record); counts: all
    lat = np.array([r.latency for r in reqs if r.status == 200]) * 1000
    row = {"source": "real", "scheme": name, "load": load, "gate": a.gate,
           **summarize(lat, sum(svc.pool.counts.values()), len(reqs)),
           "loadavg": [round(before, 2), round(os.getloadavg()[0], 2)]}
    normal = [(t.t_end - t.t_start, t.busy) for t in ex if t.ok and not t.slow]
    service = ServiceTimes(samples=[d for d, _ in normal], busy=[b for _, b in normal])
    arr = np.array(sorted(r.t_arrival for r in reqs))
    arr -= min(arr[0], 0.0)
    pred = sim_run(name, a, rate, seed, "sent" if a.gate == "off" else "held", service, arrivals=arr)
    row["sim"] = summarize(pred[0], pred[1], pred[2])
    row["service_ms"] = round(service.mean_s * 1000, 2)
    return row


def fmt(v: float) -> str:
    return f"{v:,.0f}"


def table(rows: list[dict]) -> str:
    """Markdown: per load, one line per scheme; real rows show the simulator's prediction in parentheses."""
    out = []
    base = {(r["source"], r["load"]): r for r in rows if r["scheme"] == "uncoded"}
    real = any(r["source"] == "real" for r in rows)
    if real:
        la = [r["loadavg"][0] for r in rows if "loadavg" in r]
        out.append(f"Measured on real threads (simulator's prediction in parentheses); load average before each "
                   f"point {min(la):.1f} to {max(la):.1f} on {os.cpu_count()} CPUs.\n")
    out.append("| load | scheme | p50 (ms) | p99 (ms) | p99.9 (ms) | p99.9 - p50 (ms) | gap / uncoded's "
               "| tasks / request |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["source"], r["load"])):
        b = base.get((r["source"], r["load"]))
        rel = f"{r['gap'] / b['gap']:.2f}" if b and b["gap"] > 0 else ""

        def cell(k: str, r: dict = r) -> str:
            return f"{fmt(r[k])} ({fmt(r['sim'][k])})" if "sim" in r else fmt(r[k])

        out.append(f"| {r['load']:g} | {r['scheme']} | {cell('p50')} | {cell('p99')} | {cell('p999')} | "
                   f"{cell('gap')} | {rel} | {r['tasks']:.2f} |")
    return "\n".join(out) + "\n"


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    names = list(dict.fromkeys(r["scheme"] for r in rows))
    colors = dict(zip(names, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3, strict=False))
    for ax, key, title in ((axes[0], "p999", "p99.9"), (axes[1], "p50", "p50")):
        for src, style in (("sim", "-o"), ("real", "--s")):
            for n in names:
                pts = sorted((r["load"], r[key]) for r in rows if r["scheme"] == n and r["source"] == src)
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, color=colors[n], ms=4,
                            label=f"{n} ({'measured' if src == 'real' else 'simulated'})")
        ax.set_xlabel("offered load (fraction of uncoded's capacity W / E[task time])")
        ax.set_ylabel(f"{title} latency (ms)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    fig.suptitle("W = 12, K = 8, 50 ms service, 10% of the time slow x10 (gcc, sgcc: load-adaptive; -full: every "
                 "coded task)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("sim", "real", "policies", "report"))
    ap.add_argument("--out", type=Path, help="JSON rows to write (sim, real, policies)")
    ap.add_argument("--inputs", type=Path, nargs="+", help="report: JSON files of earlier runs")
    ap.add_argument("--md", type=Path, help="report: the markdown table")
    ap.add_argument("--png", type=Path, help="report: the figure")
    ap.add_argument("--schemes", nargs="+", help=f"sim default {' '.join(SIM_SCHEMES)}; real {' '.join(REAL_SCHEMES)}")
    ap.add_argument("--loads", type=float, nargs="+",
                    help=f"fractions of uncoded's capacity (sim {LOADS}, real {REAL_LOADS})")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per point and seed")
    ap.add_argument("--seeds", type=int, default=3, help="sim: runs pooled per point (other arrivals, slow periods)")
    ap.add_argument("--seed", type=int, default=0, help="real: the run's seed")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--service-ms", type=float, default=50.0)
    ap.add_argument("--F", type=float, default=0.1, help="slow fraction")
    ap.add_argument("--X", type=float, default=10.0, help="slow factor")
    ap.add_argument("--mean-slow-s", type=float, default=1.0)
    ap.add_argument("--max-wait-ms", type=float, default=50.0)
    ap.add_argument("--gate", default=None, help="sim / policies: sent (default) or held; real: off (default) or on")
    a = ap.parse_args(argv)
    if a.mode == "report":
        if not a.inputs or not (a.md or a.png):
            ap.error("report needs --inputs and --md and/or --png")
        rows = [r for p in a.inputs for r in json.loads(p.read_text())]
        if a.md:
            a.md.parent.mkdir(parents=True, exist_ok=True)
            a.md.write_text(table(rows))
        if a.png:
            figure(rows, a.png)
        print(table(rows))
        return 0
    if a.out is None:
        ap.error(f"{a.mode} needs --out FILE.json")
    gates = ("off", "on") if a.mode == "real" else ("sent", "held")
    a.loads = a.loads or (REAL_LOADS if a.mode == "real" else LOADS)
    a.gate = a.gate or gates[0]
    if a.gate not in gates:
        ap.error(f"--gate for {a.mode} must be one of {', '.join(gates)}, got {a.gate!r}")
    if not all(0 < x < 3 for x in a.loads) or not a.duration > 0 or a.seeds < 1 or a.workers < a.K:
        ap.error("--loads must lie in (0, 3), --duration be positive, --seeds at least 1, --workers at least --K")
    known = SCHEMES if a.mode == "real" else [*SCHEMES, *(f"{n}-full" for n in SCHEMES)]
    bad = [n for n in a.schemes or [] if n not in known or (a.mode == "policies" and n.endswith("-full"))]
    if bad:
        ap.error(f"unknown scheme {bad[0]!r} for {a.mode}; choose among {', '.join(known)}")
    print(machine(), flush=True)
    rows = []
    if a.mode == "policies":
        for load in a.loads:
            for scheme in a.schemes or ["gcc", "sgcc"]:
                for pol, red in POLICIES.items():
                    label = f"{scheme} {pol}" + (", gate holds" if a.gate == "held" else "")
                    rows.append({**sim_point(scheme, load, a, redundancy=red), "scheme": label})
                    print(rows[-1], flush=True)
    elif a.mode == "sim":
        for load in a.loads:
            for name in a.schemes or SIM_SCHEMES:
                rows.append(sim_point(name, load, a))
                print(rows[-1], flush=True)
    else:
        w = load_workload("digits-cnn", progress=False)
        for load in a.loads:
            for name in a.schemes or REAL_SCHEMES:
                rows.append(real_point(name, load, a, w))
                print(rows[-1], flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
