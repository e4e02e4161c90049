"""ParM (parity models) against GCC, BACC and replication at the same N on the digits CNN.

    python benchmarks/parm_table.py [--batches 20] [--trials 10] [--S 1 2]

K = 10, k = 2, so N = K + K / k = 15 for every scheme; S random stragglers, batches x trials draws. ParM runs
with the trained parity model (`load_parity`, trained once and cached) and, as a control, with F_P = f
(no training); inputs ordered by order_inputs (chain) unless the row says "unordered". Prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gencc
from gencc.workloads import load, load_parity

K, k = 10, 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--S", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    t0 = time.perf_counter()
    w = load("digits-cnn")
    F = load_parity("digits-cnn", k)
    N = gencc.ParM(K, k).N
    rows = [
        ("ParM, trained F_P", gencc.ParM(K, k, parity=F), True),
        ("ParM, trained F_P, unordered", gencc.ParM(K, k, parity=F), False),
        ("ParM, F_P = f (untrained)", gencc.ParM(K, k), True),
        ("GCC", gencc.GCC(K, N), True),
        ("BACC", gencc.BACC(K, N), True),
        ("replication", gencc.Replication(K, N), True),
    ]
    print(f"digits CNN, K={K}, N={N}, random stragglers, {args.batches} x {args.trials} draws; "
          f"parity model: held-out reconstruction rel_mse {F.info['test']['rel_mse']:.3f}, "
          f"agreement {F.info['test']['agreement']:.3f}, trained in {F.info['train_seconds']:.1f} s\n")
    print("| S | scheme | rel_mse | agreement | rel_acc | missing inputs per job |")
    print("|---|---|---|---|---|---|")
    for S in args.S:
        for label, code, order in rows:
            recs = []
            for b in range(args.batches):
                X, y = w.sample(K, np.random.default_rng(b))
                recs += gencc.simulate(w.f, X, code, gencc.FixedCount(S, "random"), trials=args.trials, seed=b,
                                       labels=y, order=order)
            s = gencc.summarize(recs)[0]
            print(f"| {S} | {label} | {s['rel_mse']:.2e} | {s['agreement']:.3f} | {s['rel_acc']:.3f} | "
                  f"{s['missing']:.2f} |")
    print(f"\n({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
