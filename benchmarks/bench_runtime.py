"""Runtime: what a job through `gencc.run` costs on top of calling f, and the tail it buys under stragglers.

- per-job overhead: `gencc.run` on the thread backend with no injected latency (uncoded on K workers, GCC on N
  with the first `wait_for`), median latency per job, vs calling f directly on the job's K inputs;
- tail latency: p99 per job with injected bimodal latency (each task slow x10 with probability 0.05 over a
  healthy `--base-ms`), GCC and replication at N = 2K vs uncoded on K workers (the floor: what users run today).

f is a small numpy MLP (`--f mlp`, default) or the digits CNN (`--f digits-cnn`, needs torch; trained once).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from measure import Figure, median

import gencc
from gencc.runtime import LocalExecutor

SUITE = "runtime"
K, N, WAIT_FOR = 8, 16, 12


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jobs", type=int, default=100, help="jobs per scheme (default 100)")
    ap.add_argument("--f", choices=("mlp", "digits-cnn"), default="mlp", help="the function computed (default mlp)")
    ap.add_argument("--base-ms", type=float, default=5.0, help="injected delay of a healthy task, ms (default 5)")


def _function(name: str):
    """(f, inputs sampler) for `name`."""
    if name == "digits-cnn":
        from gencc.workloads import load

        w = load("digits-cnn", progress=False)
        return w.f, lambda rng: w.sample(K, rng)[0]
    rng = np.random.default_rng(0)
    W1, W2 = rng.normal(size=(64, 256)) / 8, rng.normal(size=(256, 10)) / 16

    def mlp(X: np.ndarray) -> np.ndarray:
        return np.tanh(np.asarray(X).reshape(len(X), -1) @ W1) @ W2

    mlp.batched = True  # type: ignore[attr-defined]
    return mlp, lambda rng: rng.normal(size=(K, 64))


def _latencies(f, jobs: list[np.ndarray], code: gencc.Code, executor: LocalExecutor, wait_for: int | None,
               latency: gencc.LatencyModel | None, seed: int) -> list[float]:
    out = []
    for j, X in enumerate(jobs):
        r = gencc.run(f, X, code, executor, wait_for=wait_for, latency=latency, seed=np.random.default_rng([seed, j]))
        out.append(r.latency)
    return out


def run(args: argparse.Namespace) -> list[Figure]:
    f, sample = _function(args.f)
    rng = np.random.default_rng(1)
    jobs = [sample(rng) for _ in range(args.jobs)]
    uncoded, gcc, rep = gencc.Replication(K, K), gencc.GCC(K, N), gencc.Replication(K, N)
    figs = []
    ex = LocalExecutor()
    try:
        _latencies(f, jobs[:5], gcc, ex, WAIT_FOR, None, 0)  # warm-up: threads started, D_F cached
        for label, code, wf in (("uncoded", uncoded, None), (f"GCC, N={N}, first {WAIT_FOR}", gcc, WAIT_FOR)):
            lat, direct = [], []
            for j, X in enumerate(jobs):  # interleaved with the direct call, job by job
                lat += _latencies(f, [X], code, ex, wf, None, j)
                t = time.perf_counter()
                f(X)
                direct.append(time.perf_counter() - t)
            figs.append(Figure(SUITE, f"per-job latency, no injected delay, {label} ({args.f}, K={K})",
                               1e3 * median(lat), 1e3 * median(direct), "f(X) called directly"))
        model = gencc.Bimodal(p=0.05, factor=10.0, base=args.base_ms / 1e3)
        p99 = {}
        for label, code, wf in (("uncoded", uncoded, None), ("GCC", gcc, WAIT_FOR), ("replication", rep, None)):
            p99[label] = 1e3 * float(np.percentile(_latencies(f, jobs, code, ex, wf, model, 7), 99))
        for label in ("GCC", "replication"):
            what = f"N={N}, first {WAIT_FOR}" if label == "GCC" else f"N={N}, first copy of each input"
            figs.append(Figure(SUITE, f"p99 per job, bimodal latency (5% x10, base {args.base_ms:g} ms), {label} "
                                      f"({what})", p99[label], p99["uncoded"], f"uncoded on K={K} workers"))
    finally:
        ex.close()
    return figs
