"""Serving with the plain and the packed parity model side by side (issue 10's packed queries, in the simulator).

    python benchmarks/serving_packed.py [--duration 60] [--load 0.3] [--schemes sgcc-parity parm]

The digits CNN, W = 12 workers, K = 8 (sgcc-parity: pairs on N = 12 slots; parm: k = 2), 42 ms tasks, 10% of
workers slow x10 (persistent), Poisson arrivals at `load` of capacity for `duration` seconds of virtual time, the
same arrivals and inputs for every row. Per scheme and parity model: requests, decoded (degraded) answers, their
top-1 agreement with f and rel_mse, and p99 latency. The simulator charges service times, not the parity model's
own compute, so the packed model's extra compute per coded task (1.03-1.30x f's multiply-accumulates,
`benchmarks/packed_cost.py`) is not in p99.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from gencc.engine import VirtualWorkers as SimEnv
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import make_dispatcher, simulate_load
from gencc.serving.parity import calibrate_sgcc, coded_workers
from gencc.workloads import load, load_parity


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--load", type=float, default=0.3)
    ap.add_argument("--schemes", nargs="+", default=["sgcc-parity", "parm"], choices=["sgcc-parity", "parm"])
    args = ap.parse_args()
    if not args.duration > 0 or not 0 < args.load < 1:
        ap.error("need --duration > 0 and 0 < --load < 1")
    torch.set_num_threads(1)  # one request per call: extra threads only contend
    w = load("digits-cnn", progress=False)
    W, K, s = 12, 8, 0.042
    X = w.X_test[np.random.default_rng(8).integers(len(w.X_test), size=int(args.duration * W / s) + 1000)]
    print("| scheme | parity model | requests | decoded answers | agreement | rel_mse | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for scheme in args.schemes:
        for packed in (False, True):
            F = load_parity("digits-cnn", 2, progress=False, packed=packed)
            cal = calibrate_sgcc(w, K, coded_workers(K, W), F) if scheme == "sgcc-parity" else None
            e = SimEnv(W, ServiceTimes(s), PersistentStragglers(W, 0.1, 10.0, 1.0, seed=0),
                       functions={"f": w.f, "parity": F})
            reqs = simulate_load(lambda env, sc=scheme, F=F, cal=cal: make_dispatcher(
                sc, env, K=K, parm_k=2, max_wait=0.05, parity=F, calibration=cal, request_timeout=120.0),
                e, args.load * W / (s * 1.9), args.duration, inputs=X, drain=60)
            dk = [r for r in reqs if r.status == 200 and r.degraded]
            T = w.f(np.stack([r.x for r in dk]))
            out = np.stack([r.output for r in dk])
            agree = float(np.mean(T.argmax(axis=1) == out.argmax(axis=1)))
            rel = float(((out - T) ** 2).sum() / (T**2).sum())
            p99 = 1e3 * float(np.quantile([r.latency for r in reqs if r.status == 200], 0.99))
            print(f"| {scheme} | {'packed' if packed else 'plain (sum)'} | {len(reqs)} | {len(dk)} | {agree:.3f} | "
                  f"{rel:.4f} | {p99:.1f} |", flush=True)


if __name__ == "__main__":
    main()
