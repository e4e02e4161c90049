"""Can GCC's served (decoded) answers agree better with f, cheaply? GCC variants in the serving simulator with the
real digits CNN: the same dispatcher as `gcc` (W = 12, K = 8, N = 12, persistent stragglers 10% x10), other
kernels / length scales, no input ordering, a decoder penalty chosen by GCV, and decodes that wait for every coded
result (no deadline). Prints agreement of decoded answers with f's top-1, fraction decoded and tails.

    python benchmarks/serving_gcc_variants.py --samples results/i8/service_samples.json --duration 60 --loads 0.3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import gencc  # noqa: E402
from gencc.engine import VirtualWorkers as SimEnv  # noqa: E402
from gencc.faults import PersistentStragglers, ServiceTimes  # noqa: E402
from gencc.kernels import Matern32  # noqa: E402
from gencc.serving import CodedDispatcher as Coded  # noqa: E402
from gencc.serving import simulate_load  # noqa: E402

VARIANTS = {  # name: (code factory, Coded options)
    "default (Matern 3/2, ell 0.3)": (lambda: gencc.GCC(8, 12), {}),
    "no ordering": (lambda: gencc.GCC(8, 12), {"order": False}),
    "lam_dec by GCV": (lambda: gencc.GCC(8, 12, lam_dec="gcv"), {}),
    "ell 0.15": (lambda: gencc.GCC(8, 12, kernel=Matern32(0.15, null_degree=1)), {}),
    "ell 0.6": (lambda: gencc.GCC(8, 12, kernel=Matern32(0.6, null_degree=1)), {}),
    "ell 2.0": (lambda: gencc.GCC(8, 12, kernel=Matern32(2.0, null_degree=1)), {}),
    "cubic spline": (lambda: gencc.GCC(8, 12, kernel="cubic"), {}),
    "wait for every coded result": (lambda: gencc.GCC(8, 12), {"decode_wait": 10.0}),
    "ell 0.6, wait for every coded result": (lambda: gencc.GCC(8, 12, kernel=Matern32(0.6, null_degree=1)),
                                             {"decode_wait": 10.0}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", default="", help="measured service_samples.json (bench_serving.py real); "
                                                  "default: 42 ms per task")
    ap.add_argument("--duration", type=float, default=60.0, help="simulated seconds of arrivals per point")
    ap.add_argument("--loads", type=float, nargs="+", default=[0.3])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import torch

    from gencc.workloads import load

    torch.set_num_threads(1)
    w = load("digits-cnn", progress=False)
    if a.samples:  # durations, or [seconds, busy workers, start] rows (bench_serving.py real): by busy workers,
        data = np.asarray(json.loads(Path(a.samples).read_text()), dtype=float)  # as bench_serving.py sim draws
        svc = ServiceTimes(samples=data) if data.ndim == 1 else \
            ServiceTimes(samples=data[:, 0], busy=data[:, 1].astype(int))
    else:
        svc = ServiceTimes(0.042)
    W, F, X = 12, 0.1, 10.0
    print("| load | GCC variant | agreement | degraded | p50 ms | p99 ms | p99.9 ms | tasks/req |")
    print("|---|---|---|---|---|---|---|---|")
    for ld in a.loads:
        rate = ld * W / (svc.mean_s * (1 - F + F * X))
        for name, (make, kw) in VARIANTS.items():
            inputs = w.X_test[np.random.default_rng([a.seed, 8]).integers(len(w.X_test), size=100_000)]
            env = SimEnv(W, svc, PersistentStragglers(W, F, X, 1.0, seed=a.seed), functions={"f": w.f}, seed=a.seed)
            reqs = simulate_load(lambda e, make=make, kw=kw: Coded(e, make(), max_wait=0.05, request_timeout=120.0,
                                                                   seed=a.seed, **kw),
                                 env, rate, a.duration, inputs=inputs, seed=a.seed, drain=300)
            dk = [r for r in reqs if r.status == 200 and r.degraded]
            truth = np.argmax(w.f(np.stack([r.x for r in dk])), axis=1)
            agree = float(np.mean(truth == np.argmax(np.stack([r.output for r in dk]), axis=1)))
            lat = np.array([r.latency for r in reqs if r.status == 200]) * 1000
            p50, p99, p999 = np.percentile(lat, [50, 99, 99.9])
            print(f"| {ld:.1f} | {name} | {agree:.3f} | {len(dk) / len(reqs):.3f} | {p50:.1f} | {p99:.1f} | "
                  f"{p999:.1f} | {len(env.executed) / len(reqs):.2f} |", flush=True)


if __name__ == "__main__":
    main()
