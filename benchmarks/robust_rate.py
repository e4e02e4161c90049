"""rel_mse of robust GCC against N with A = round(N^a) adversaries, and its fitted slope next to (6/5)(a-1).

    python benchmarks/robust_rate.py [--N 20 40 80 160 320] [--a 0.25 0.5] [--seeds 10] [--trials 5]

The adversarial paper of the GCC line (arXiv 2502.08058) bounds the error of a smoothing-spline scheme with
O(N^a) adversaries by O(N^{(6/5)(a-1)}). Digits CNN, K = 10, S = 2 random stragglers, A sign-flipping workers
chosen at random among the returned, `gencc.simulate(..., adversaries=SignFlip(A))`; the slope is the least
squares fit of log mean rel_mse on log N with a 95% bootstrap interval (gencc.experiments.fit).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gencc
from gencc.adversaries import SignFlip
from gencc.experiments.fit import fit_slope
from gencc.workloads import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="+", default=[20, 40, 80, 160, 320])
    ap.add_argument("--a", type=float, nargs="+", default=[0.25, 0.5])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    w = load("digits-cnn", progress=False)
    print("| a | N | A | robust GCC rel_mse | adversaries as stragglers | recall | honest flagged / trial |")
    print("|---|---|---|---|---|---|---|")
    fits = []
    for a in args.a:
        means = []
        for N in args.N:
            A = max(1, int(round(N**a)))
            recs = []
            for s in range(args.seeds):
                X, y = w.sample(10, np.random.default_rng(s))
                recs += gencc.simulate(w.f, X, gencc.GCC(10, N), gencc.FixedCount(2), trials=args.trials, seed=s,
                                       adversaries=SignFlip(A))
            ok = [r for r in recs if r["decodable"]]
            m = float(np.mean([r["rel_mse"] for r in ok]))
            means.append(m)
            print(f"| {a} | {N} | {A} | {m:.2e} | {np.mean([r['rel_mse_excluded'] for r in ok]):.2e} | "
                  f"{np.mean([r['recall'] for r in ok]):.3f} | {np.mean([r['false_alarms'] for r in ok]):.3f} |",
                  flush=True)
        fit = fit_slope(np.array(args.N, dtype=float), np.array(means))
        fits.append((a, fit))
    print("\n| a | fitted slope of log rel_mse on log N [95% CI] | (6/5)(a-1) |")
    print("|---|---|---|")
    for a, f in fits:
        print(f"| {a} | {f.slope:.2f} [{f.lo:.2f}, {f.hi:.2f}] | {1.2 * (a - 1):.2f} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
