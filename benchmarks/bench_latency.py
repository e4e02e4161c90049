"""Tail latency of coded computing against what engineers use today, on real workers.

The digits CNN, K = 8 inputs per job. Uncoded on 8 workers; replication, hedged requests, BACC and GCC on 16
(coded: wait for the first 12). Injected latency per worker: bimodal (slow with probability 0.05, 10x) and
shifted exponential, on top of the real compute (healthy delay --base-ms, default 20 ms: a small CNN
service's queueing plus network time; at a few ms the fixed cost of 16 tasks on 2 cores dominates).
Prints p50 / p99 / p99.9 latency, agreement and rel_mse against f(X) per scheme, the targets, and the
per-job overhead with no injected latency.

    python benchmarks/bench_latency.py --backend both --jobs 300

The Ray run always happens inside its own loopback-only network namespace (`unshare -n`), with
RAY_AUTH_MODE and RAY_USAGE_STATS_ENABLED set explicitly and a private temp dir.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread per worker: workers run in parallel

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import gencc  # noqa: E402
from gencc import metrics  # noqa: E402
from gencc.runtime import Hedged, LocalExecutor, RayExecutor, Replicated, Uncoded, run  # noqa: E402
from gencc.testing.isolation import in_loopback_namespace, run_in_loopback  # noqa: E402

BASE = 0.02  # seconds: the injected delay of a healthy worker (--base-ms)


def scenarios(base: float = BASE) -> dict[str, gencc.LatencyModel]:
    return {
        "bimodal": gencc.Bimodal(p=0.05, factor=10.0, base=base),
        "shifted-exp": gencc.ShiftedExponential(shift=base, rate=1.0 / base),
    }


def schemes(K: int, N: int, wait_for: int, hedge_delay: float) -> dict[str, tuple]:
    """name -> (scheme, wait_for)."""
    return {
        "uncoded": (Uncoded(K), None),
        "replication": (Replicated(K, N), None),
        "hedged": (Hedged(K, N, hedge_delay=hedge_delay), None),
        "bacc": (gencc.BACC(K, N), wait_for),
        "gcc": (gencc.GCC(K, N), wait_for),
    }


def measure(f, executor, jobs_X, truths, scheme, wait_for, latency, seed) -> dict:
    lat, agr, rel, enc_dec, missing = [], [], [], [], 0
    for j, (X, Y) in enumerate(zip(jobs_X, truths, strict=True)):
        r = run(f, X, scheme, executor, wait_for=wait_for, latency=latency, seed=np.random.default_rng([seed, j]),
                timeout=60)
        lat.append(r.latency)
        agr.append(metrics.agreement(r.outputs, Y))
        rel.append(metrics.rel_mse(r.outputs, Y))
        enc_dec.append(r.timings["encode"] + r.timings["decode"])
        missing += int(r.missing.size)
    a = np.array(lat) * 1e3
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "p99.9": float(np.percentile(a, 99.9)), "mean": float(a.mean()), "agreement": float(np.mean(agr)),
            "rel_mse": float(np.mean(rel)), "enc_dec_ms": float(np.mean(enc_dec) * 1e3), "missing": missing}


def bench(backend: str, n_jobs: int, K: int, N: int, wait_for: int, seed: int, actors: int,
          hedge_quantile: float, base: float = BASE) -> dict:
    from gencc.workloads import load

    w = load("digits-cnn", progress=False)
    rng = np.random.default_rng(seed)
    jobs_X = [w.sample(K, rng)[0] for _ in range(n_jobs)]
    f_ref = w.factory()
    truths = [f_ref(X) for X in jobs_X]
    if backend == "ray":
        ex = RayExecutor(factory=w.factory, num_actors=actors)
        t0 = time.perf_counter()
        ex.start(None, N)
        print(f"[ray] {actors} actors up in {time.perf_counter() - t0:.1f} s (f built on each actor)", flush=True)
        f = None
    else:
        ex, f = LocalExecutor(), w.f
    out: dict = {"backend": backend, "base_ms": base * 1e3, "jobs": n_jobs, "K": K, "N": N, "wait_for": wait_for,
                 "results": {}}
    try:
        # overhead with no injected latency (warm-up first)
        for name, sch, wf in (("uncoded", Uncoded(K), None), ("gcc", gencc.GCC(K, N), wait_for)):
            measure(f, ex, jobs_X[:5], truths[:5], sch, wf, None, seed)
            out["results"][f"none/{name}"] = measure(f, ex, jobs_X, truths, sch, wf, None, seed)
            print(f"[{backend}] none/{name}: {fmt(out['results'][f'none/{name}'])}", flush=True)
        for sname, model in scenarios(base).items():
            hd = float(np.quantile(model.sample(200_000, np.random.default_rng(1)), hedge_quantile))
            out[f"hedge_delay_ms/{sname}"] = hd * 1e3
            for name, (sch, wf) in schemes(K, N, wait_for, hd).items():
                res = measure(f, ex, jobs_X, truths, sch, wf, model, seed + 1)
                out["results"][f"{sname}/{name}"] = res
                print(f"[{backend}] {sname}/{name}: {fmt(res)}", flush=True)
    finally:
        ex.close()
    return out


def fmt(r: dict) -> str:
    return (f"p50 {r['p50']:7.2f} ms  p99 {r['p99']:7.2f} ms  p99.9 {r['p99.9']:7.2f} ms  "
            f"agreement {r['agreement']:.3f}  rel_mse {r['rel_mse']:.2e}  enc+dec {r['enc_dec_ms']:.3f} ms")


def report(out: dict) -> None:
    b, R = out["backend"], out["results"]
    print(f"\n== {b}: digits CNN, K={out['K']}, jobs={out['jobs']}, base delay {out['base_ms']:.0f} ms; "
          "uncoded on K workers, the rest on "
          f"N={out['N']} (coded: first {out['wait_for']}) ==")
    print(f"{'latency/scheme':26s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99.9 ms':>9s} {'agree':>6s} {'rel_mse':>9s}")
    for k, r in R.items():
        print(f"{k:26s} {r['p50']:8.2f} {r['p99']:8.2f} {r['p99.9']:9.2f} {r['agreement']:6.3f} {r['rel_mse']:9.2e}")
    for s in scenarios():
        if f"{s}/gcc" not in R:
            continue
        g, u, h = R[f"{s}/gcc"], R[f"{s}/uncoded"], R[f"{s}/hedged"]
        checks = [
            (f"GCC p99 / uncoded p99 = {g['p99'] / u['p99']:.2f} (target <= 0.3)", g["p99"] <= 0.3 * u["p99"]),
            (f"GCC p99 {g['p99']:.2f} ms vs hedged p99 {h['p99']:.2f} ms (target GCC <= hedged; hedge after "
             f"{out[f'hedge_delay_ms/{s}']:.2f} ms)", g["p99"] <= h["p99"]),
            (f"GCC agreement {g['agreement']:.3f} (target >= 0.95)", g["agreement"] >= 0.95),
            (f"GCC encode+decode {g['enc_dec_ms']:.3f} ms = {100 * g['enc_dec_ms'] / g['p50']:.1f}% of p50 "
             "(target <= 5%)", g["enc_dec_ms"] <= 0.05 * g["p50"]),
        ]
        print(f"-- {b} / {s}:")
        for text, ok in checks:
            print(f"   [{'met' if ok else 'MISSED'}] {text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("local", "ray", "both"), default="both")
    ap.add_argument("--jobs", type=int, default=300, help="jobs per scheme and latency model")
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--wait-for", type=int, default=12)
    ap.add_argument("--actors", type=int, default=8, help="Ray actors (logical worker n runs on actor n %% actors)")
    ap.add_argument("--hedge-quantile", type=float, default=0.9, help="hedge after this quantile of the latency")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-ms", type=float, default=BASE * 1e3, help="injected delay of a healthy worker, ms")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--quiet", action="store_true", help="no final report (used by the namespaced Ray run)")
    a = ap.parse_args()
    if a.jobs < 1:
        ap.error("--jobs must be positive")
    outs = []
    if a.backend in ("local", "both"):
        outs.append(bench("local", a.jobs, a.K, a.N, a.wait_for, a.seed, a.actors, a.hedge_quantile, a.base_ms / 1e3))
    if a.backend in ("ray", "both"):
        if in_loopback_namespace():
            outs.append(bench("ray", a.jobs, a.K, a.N, a.wait_for, a.seed, a.actors, a.hedge_quantile, a.base_ms / 1e3))
        else:  # re-execute the Ray part inside its own loopback-only network namespace
            path = os.path.join(tempfile.mkdtemp(prefix="gencc-bench-"), "ray.json")
            argv = [sys.executable, os.path.abspath(__file__), "--backend", "ray", "--json", path, "--jobs",
                    str(a.jobs), "--K", str(a.K), "--N", str(a.N), "--wait-for", str(a.wait_for), "--actors",
                    str(a.actors), "--hedge-quantile", str(a.hedge_quantile), "--seed", str(a.seed), "--quiet",
                    "--base-ms", str(a.base_ms)]
            p = run_in_loopback(argv, timeout=3600)
            if p.returncode != 0:
                sys.exit(f"the Ray benchmark failed (exit {p.returncode})")
            with open(path) as fh:
                outs.append(json.load(fh))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(outs[0] if len(outs) == 1 else outs, fh, indent=1)
    if a.quiet:
        return
    for o in outs:
        report(o)
    if len(outs) == 2:
        L, R = outs[0]["results"], outs[1]["results"]
        print("\n== RayExecutor overhead against LocalExecutor, no injected latency, per job ==")
        for k in ("none/uncoded", "none/gcc"):
            print(f"{k:14s} local p50 {L[k]['p50']:6.2f} ms mean {L[k]['mean']:6.2f} ms | "
                  f"ray p50 {R[k]['p50']:6.2f} ms mean {R[k]['mean']:6.2f} ms | "
                  f"overhead p50 {R[k]['p50'] - L[k]['p50']:+.2f} ms, "
                  f"mean {R[k]['mean'] - L[k]['mean']:+.2f} ms")


if __name__ == "__main__":
    main()
