"""Coded prediction serving at equal resources: real runs (thread pool), the simulator validated on them, scale-out.

    python benchmarks/bench_serving.py real  --out results/serving   # W=12, K=8, digits CNN, every scheme
    python benchmarks/bench_serving.py sim   --out results/serving   # W=12 curves, and replays of measured points
    python benchmarks/bench_serving.py scale --out results/serving   # W=100 and W=1000, 10%..90% load
    python benchmarks/bench_serving.py plot --inputs a.json b.json --png fig.png   # one figure from saved runs

Load is a fraction of uncoded capacity W / E[task time], E[task time] = S (1 - F + F X) for service S, slow
fraction F, slow factor X. Every scheme gets the same W workers. Persistent stragglers: each worker is slow
(x X) about F of the time, in exponential periods of mean `--mean-slow-s`. `real` also saves the measured
normal-state task times, which `sim` and `scale` draw service times from (the validation compares the two).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gencc.engine import VirtualWorkers as SimEnv  # noqa: E402
from gencc.faults import PersistentStragglers, ServiceTimes  # noqa: E402
from gencc.serving import Service, freeze_heap, make_dispatcher, simulate_load  # noqa: E402
from gencc.serving.load import summary  # noqa: E402
from gencc.serving.parity import calibrate_sgcc, coded_workers, parity_k  # noqa: E402
from gencc.serving.sim import poisson_arrivals  # noqa: E402

SCHEMES = ["uncoded", "replication", "hedged", "parm", "parm-hedge", "bacc", "gcc", "gcc-hedge", "sgcc",
           "sgcc-parity"]


def capacity(W: int, s: float, F: float, X: float) -> float:
    return W / (s * (1 - F + F * X))


def stats(lat_ms: np.ndarray, status: np.ndarray, degraded: np.ndarray, tasks: float) -> dict:
    ok = status == 200
    out = summary(lat_ms[ok]) if ok.any() else {}
    out.update(n=int(len(status)), ok=int(ok.sum()), status={int(k): int(v) for k, v in
                                                             zip(*np.unique(status, return_counts=True), strict=True)},
               degraded=float(degraded[ok].mean()) if ok.any() else 0.0, tasks_per_request=float(tasks))
    return out


def variants(schemes: list[str], parm_ks: list[int]) -> list[tuple[str, str, int]]:
    """(row name, scheme, parm k): ParM schemes once per k in `parm_ks` (named "parm-k3" etc. for k != 2)."""
    out = []
    for s in schemes:
        for k in (parm_ks if s.startswith("parm") else [2]):
            out.append((s if k == 2 else f"{s}-k{k}", s, k))
    return out


def real_point(a, scheme: str, load: float, w, seed: int, parm_k: int = 2
               ) -> tuple[dict, list[list[float]], dict]:
    """One measured point: its summary row, the normal-state task times with the busy-worker count at each
    task's start ([seconds, count] pairs), and what replays it in the simulator: the requests' arrival times on
    the pool's clock and the pool's own delays (`Pool.lags`)."""
    svc = Service.build("digits-cnn", scheme, a.workers, a.K, service_ms=a.service_ms, slow_fraction=a.F,
                        slow_factor=a.X, mean_slow_s=a.mean_slow_s, max_wait_ms=a.max_wait_ms, seed=seed,
                        max_pending=100_000, parm_k=parm_k)
    freeze_heap()  # as `gencc serve` does after start-up
    rate = load * capacity(a.workers, a.service_ms / 1000 + a.compute_ms / 1000, a.F, a.X)
    times = poisson_arrivals(rate, a.duration, np.random.default_rng([seed, 7]))
    idx = np.random.default_rng([seed, 8]).integers(len(w.X_test), size=len(times))
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    futs = []
    for t, i in zip(times, idx, strict=True):
        d = t - (time.perf_counter() - t0)
        if d > 0:
            time.sleep(d)
        futs.append(svc.submit(w.X_test[i]))
    reqs = [f.result(timeout=120) for f in futs]
    svc.close()
    lat = np.array([r.latency for r in reqs]) * 1000
    st = np.array([r.status for r in reqs])
    deg = np.array([r.degraded for r in reqs])
    ex = list(svc.pool.executed)
    res = stats(lat, st, deg, len(ex) / max(len(reqs), 1))
    res.update(scheme=scheme, load=load, rate=rate, backend="local", seed=seed,
               latency_ms=np.round(np.sort(lat[st == 200]), 2).tolist(),
               loadavg=[round(load_before, 2), round(os.getloadavg()[0], 2)])
    dk = [k for k, r in enumerate(reqs) if r.status == 200 and r.degraded]
    if dk:
        truth = np.argmax(w.f(w.X_test[idx[dk]]), axis=1)
        got = np.argmax(np.stack([reqs[k].output for k in dk]), axis=1)
        res["degraded_agreement"] = float(np.mean(truth == got))
    samples = [[round(t.t_end - t.t_start, 6), t.busy, round(t.t_start, 6)] for t in ex if t.ok and not t.slow]
    res["lag_ms"] = {k: [round(float(np.percentile(v, q)) * 1000, 2) for q in (50, 99)] for k, v in
                     svc.pool.lags.items() if v}
    replay = {"arrivals": [round(r.t_arrival, 6) for r in reqs], "service": samples,
              "lags": {k: np.round(np.asarray(v), 6).tolist() for k, v in svc.pool.lags.items() if v}}
    return res, samples, replay


_parities: dict[int, object] = {}


def parity_model(k: int):
    """The digits CNN's parity model for k (loaded once; trained and cached by gencc.workloads on first use)."""
    if k not in _parities:
        from gencc.workloads import load_parity

        _parities[k] = load_parity("digits-cnn", k, progress=False)
    return _parities[k]


def sim_point(a, scheme: str, load: float, W: int, service: ServiceTimes, duration: float, seed: int,
              rate: float | None = None, w=None, parm_k: int = 2, arrivals: list[float] | None = None,
              lags: dict | None = None) -> dict:
    """One simulated point; with workload `w` the models really run (outputs, decodes and agreement are real).
    `arrivals` replays a measured run's arrival times (with its straggler seed: the same slow periods)."""
    pk = parity_k(scheme, a.K, W, parm_k)
    parity = None if pk is None else parity_model(pk)
    cal = None
    if w is not None and scheme.startswith("sgcc-parity"):  # prior fitted on training inputs only
        cal = calibrate_sgcc(w, a.K, coded_workers(a.K, W), parity)
    fns = None if w is None else {"f": w.f, **({"parity": parity} if parity is not None else {})}
    env = SimEnv(W, service, PersistentStragglers(W, a.F, a.X, a.mean_slow_s, seed=seed), functions=fns, seed=seed,
                 lags=lags)
    rate = rate or load * capacity(W, service.mean_s, a.F, a.X)
    K = a.K
    X = None if w is None else w.X_test[np.random.default_rng([seed, 8]).integers(len(w.X_test), size=100_000)]
    reqs = simulate_load(lambda e: make_dispatcher(scheme, e, K=K, max_wait=a.max_wait_ms / 1000, seed=seed,
                                                   request_timeout=120.0, parity=parity, parm_k=parm_k,
                                                   calibration=cal), env, rate, duration,
                         inputs=X, seed=seed, drain=300, arrivals=arrivals)
    lat = np.array([r.latency for r in reqs]) * 1000
    res = stats(lat, np.array([r.status for r in reqs]), np.array([r.degraded for r in reqs]),
                len(env.executed) / max(len(reqs), 1))
    res.update(scheme=scheme, load=load, rate=rate, W=W, backend="sim")
    dk = [r for r in reqs if r.status == 200 and r.degraded]
    if w is not None and dk:
        truth = np.argmax(w.f(np.stack([r.x for r in dk])), axis=1)
        res["degraded_agreement"] = float(np.mean(truth == np.argmax(np.stack([r.output for r in dk]), axis=1)))
    return res


def table(rows: list[dict], title: str) -> str:
    base = {(r.get("W"), r["load"]): r for r in rows if r["scheme"] == "uncoded"}
    lines = [f"\n{title}", "| W | load | scheme | p50 ms | p99 ms | p99.9 ms | gap / uncoded | p50 / uncoded | "
             "degraded | agreement | tasks/req |", "|" + "---|" * 11]
    for r in rows:
        u = base.get((r.get("W"), r["load"]))
        if not r.get("p50"):
            continue
        gr = r["gap"] / u["gap"] if u and u.get("gap") else float("nan")
        pr = r["p50"] / u["p50"] if u and u.get("p50") else float("nan")
        ag = r.get("degraded_agreement")
        lines.append(f"| {r.get('W', '')} | {r['load']:.2f} | {r['scheme']} | {r['p50']:.1f} | {r['p99']:.1f} | "
                     f"{r['p999']:.1f} | {gr:.2f} | {pr:.2f} | {r['degraded']:.3f} | "
                     f"{'' if ag is None else f'{ag:.3f}'} | {r['tasks_per_request']:.2f} |")
    return "\n".join(lines)


def figure(rows: list[dict], path: Path, title: str) -> None:
    """p50 (dashed) and p99.9 (solid) against load, one panel per W, one colour per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r.get("W", 0) for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.2), squeeze=False)
    for ax, W in zip(axes[0], sizes, strict=True):
        for i, s in enumerate(dict.fromkeys(r["scheme"] for r in rows)):
            pts = sorted((r["load"], r["p50"], r["p999"]) for r in rows if r["scheme"] == s and r.get("W", 0) == W
                         and r.get("p50"))
            if pts:
                x, p50, p999 = zip(*pts, strict=True)
                ax.plot(x, p999, marker="o", color=f"C{i}", label=s)
                ax.plot(x, p50, ls="--", color=f"C{i}", alpha=0.6)
        ax.set_yscale("log")
        ax.set_xlabel("offered load (fraction of uncoded capacity)")
        ax.set_ylabel("ms (solid p99.9, dashed p50)")
        ax.set_title(f"{title}, W = {W}" if W else title)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_service(out: Path, a, conditional: bool) -> ServiceTimes:
    """Service times measured by `real` ([seconds, busy workers] pairs): conditional on the busy-worker count
    (the 2-core machine's CPU sharing, for `sim` at the measured W), or pooled (`scale`: a big cluster does not
    share 2 cores); the injected model when nothing was measured."""
    smp = out / "service_samples.json"
    if not smp.exists():
        return ServiceTimes((a.service_ms + a.compute_ms) / 1000)
    data = np.asarray(json.loads(smp.read_text()), dtype=float)
    if data.ndim == 1:  # an older file: durations only
        return ServiceTimes(samples=data)
    return ServiceTimes(samples=data[:, 0], busy=data[:, 1].astype(int) if conditional else None)  # [:, 2]: start


def p99_interval(n: int) -> tuple[int, int]:
    """Ranks (1-based, sorted latencies) bracketing the true p99 with 95% confidence (binomial order statistics)."""
    from scipy.stats import binom

    return max(int(binom.ppf(0.025, n, 0.99)), 1), min(int(binom.ppf(0.975, n, 0.99)) + 1, n)


def validate(a, out: Path, meas: dict, long_rows: list[dict], service: ServiceTimes) -> list[dict]:
    """Every measured point replayed in the simulator with its arrival times and straggler seed (the same slow
    periods): "plain" draws service times from all measured samples (by busy workers); "calibrated" draws them
    from that point's own samples started within 50 ms of the simulated task (so a machine-wide stall stays
    where it happened) and adds the real pool's own delays measured in that point (`Pool.lags`).
    Also the long independent runs; simulated / measured p50 and p99, and the measured p99's 95% interval."""
    cal_file = out / "replay.json"
    cal = json.loads(cal_file.read_text()) if cal_file.exists() else {}
    longs = {(r["scheme"], r["load"]): r for r in long_rows}
    res = []
    for (s, ld), m in meas.items():
        c = cal.get(f"{s}@{ld}")
        if not m.get("p50") or c is None or s not in a.schemes:
            continue
        seed, arr = m.get("seed", a.seed), c["arrivals"]
        plain = sim_point(a, s, ld, a.workers, service, 0.0, seed, m["rate"], arrivals=arr)
        own = np.asarray(c["service"], dtype=float)
        calib = sim_point(a, s, ld, a.workers, ServiceTimes(samples=own[:, 0], starts=own[:, 2]), 0.0, seed,
                          m["rate"], arrivals=arr, lags=c["lags"])
        lat = np.sort(np.asarray(m["latency_ms"]))
        lo, hi = p99_interval(lat.size)
        lg = longs.get((s, ld), {})
        res.append(dict(scheme=s, load=ld, n=m["ok"], loadavg=m.get("loadavg"), lag_ms=m.get("lag_ms"),
                        real_p50=m["p50"], real_p99=m["p99"], real_p99_lo=float(lat[lo - 1]),
                        real_p99_hi=float(lat[hi - 1]), plain_p50=plain["p50"], plain_p99=plain["p99"],
                        cal_p50=calib["p50"], cal_p99=calib["p99"], long_p50=lg.get("p50"), long_p99=lg.get("p99")))
    if not res:
        return res
    how = "by busy workers" if service.conditional else "pooled"
    print(f"\nvalidation: simulated / measured (plain replay: all measured service times, {how}; calibrated: the "
          "point's own service times and pool delays; long: independent runs of --duration)")
    print("| load | scheme | machine load | n | p50 | p99 (95% interval) | post lag p50/p99 ms | plain p50 | "
          "plain p99 | calibrated p50 | calibrated p99 | long p50 | long p99 |\n" + "|---" * 13 + "|")
    ok = {"plain": 0, "cal": 0}
    for v in sorted(res, key=lambda v: (v["load"], a.schemes.index(v["scheme"]))):
        r = {k: (v[f"{k}_p50"] / v["real_p50"], v[f"{k}_p99"] / v["real_p99"]) for k in ("plain", "cal", "long")
             if v[f"{k}_p50"]}
        for k in ok:
            ok[k] += all(abs(x - 1) <= 0.2 for x in r[k])
        cells = " | ".join(f"{r[k][0]:.2f} | {r[k][1]:.2f}" if k in r else " | " for k in ("plain", "cal", "long"))
        post = (v["lag_ms"] or {}).get("post", ["", ""])
        print(f"| {v['load']:.2f} | {v['scheme']} | {v['loadavg'][0]:.1f}-{v['loadavg'][1]:.1f} | {v['n']} | "
              f"{v['real_p50']:.1f} | {v['real_p99']:.1f} ({v['real_p99_lo']:.0f}-{v['real_p99_hi']:.0f}) | "
              f"{post[0]} / {post[1]} | {cells} |")
    print(f"within 20% on p50 and p99: plain replay {ok['plain']} of {len(res)} points, calibrated {ok['cal']}")
    (out / "validation.json").write_text(json.dumps(res, indent=1))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["real", "sim", "scale", "plot"])
    ap.add_argument("--inputs", nargs="+", default=[], help="plot: saved real/sim/scale JSON files")
    ap.add_argument("--png", default="serving.png", help="plot: the figure to write")
    ap.add_argument("--out", default="results/serving")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--service-ms", type=float, default=40.0)
    ap.add_argument("--compute-ms", type=float, default=2.0, help="expected model compute per task (capacity)")
    ap.add_argument("--F", type=float, default=0.1, help="slow fraction")
    ap.add_argument("--X", type=float, default=10.0, help="slow factor")
    ap.add_argument("--mean-slow-s", type=float, default=1.0)
    ap.add_argument("--max-wait-ms", type=float, default=50.0)
    ap.add_argument("--loads", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.6])
    ap.add_argument("--schemes", nargs="+", default=SCHEMES)
    ap.add_argument("--parm-k", type=int, nargs="+", default=[2],
                    help="ParM schemes: run once per k (rows named parm-k3, parm-k4 for k != 2)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals per point")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="scale: worker counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--agreement", action="store_true",
                    help="sim/scale: run the digits CNN (and ParM's parity model) so decoded answers are real and "
                         "their agreement with f is measured (slower)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.mode == "plot":
        rows = [r for f in a.inputs for r in json.loads(Path(f).read_text())["rows"]]
        figure(rows, Path(a.png), f"simulated, K={a.K}, {a.F:.0%} slow x{a.X:g}")
        print(f"figure: {a.png}")
        return
    if a.mode == "real":
        import torch

        from gencc.workloads import load

        torch.set_num_threads(1)
        w = load("digits-cnn", progress=False)
        rows, samples, replay = [], [], {}
        for ld in a.loads:
            for name, s, k in variants(a.schemes, a.parm_k):
                r, smp, rep = real_point(a, s, ld, w, a.seed, k)
                r["scheme"] = name
                rows.append(r)
                samples += smp
                replay[f"{name}@{ld}"] = rep
                print(json.dumps({k: r[k] for k in ("scheme", "load", "n", "p50", "p99", "p999", "degraded",
                                                    "loadavg", "lag_ms")}), flush=True)
        if (out / "real.json").exists():  # points measured earlier and not rerun now are kept
            done = {(r["scheme"], r["load"]) for r in rows}
            rows = [r for r in json.loads((out / "real.json").read_text())["rows"]
                    if (r["scheme"], r["load"]) not in done] + rows
            samples += json.loads((out / "service_samples.json").read_text())[: 200_000]
            if (out / "replay.json").exists():
                replay = {**json.loads((out / "replay.json").read_text()), **replay}
        (out / "real.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
        (out / "service_samples.json").write_text(json.dumps(samples))
        (out / "replay.json").write_text(json.dumps(replay))
        print(table(rows, f"real: W={a.workers}, K={a.K}, service {a.service_ms} ms, F={a.F}, X={a.X}"))
        figure(rows, out / "real.png", f"measured, W={a.workers}, K={a.K}")
        return
    service = load_service(out, a, conditional=a.mode == "sim")
    print(f"service times: {'measured' if (out / 'service_samples.json').exists() else 'model'}, mean "
          f"{service.mean_s * 1000:.1f} ms" + (f", by busy workers 1..: {np.round(service.bucket_means() * 1000, 1)}"
                                              if service.conditional else ""))
    rows = []
    wl = None
    if a.agreement:
        import torch

        from gencc.workloads import load

        torch.set_num_threads(1)
        wl = load("digits-cnn", progress=False)
    real = out / "real.json"
    meas = {(r["scheme"], r["load"]): r for r in json.loads(real.read_text())["rows"]} if real.exists() else {}
    sizes = [a.workers] if a.mode == "sim" else a.sizes
    for W in sizes:
        for ld in a.loads:
            for name, s, k in variants(a.schemes, a.parm_k):
                m = meas.get((name, ld)) if a.mode == "sim" else None  # the measured point's own arrival rate
                r = sim_point(a, s, ld, W, service, a.duration, a.seed, m["rate"] if m else None, wl, k)
                r["scheme"] = name
                rows.append(r)
                print(json.dumps({k: r.get(k) for k in ("W", "scheme", "load", "n", "p50", "p99", "p999", "degraded",
                                                        "degraded_agreement")}),
                      flush=True)
    (out / f"{a.mode}.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
    print(table(rows, f"{a.mode}: K={a.K}, F={a.F}, X={a.X}, {a.duration} s simulated per point"))
    figure(rows, out / f"{a.mode}.png", f"simulated, K={a.K}, {a.F:.0%} slow x{a.X:g}")
    print(f"figure: {out / f'{a.mode}.png'}")
    if a.mode == "sim" and meas:
        validate(a, out, meas, rows, service)


if __name__ == "__main__":
    main()
