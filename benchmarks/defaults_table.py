"""How GCC's defaults were chosen: rel_mse of candidate configurations against BACC on the digits CNN.

    python benchmarks/defaults_table.py [--batches 20] [--trials 10]

K = 10, S = 3, N in {15, 20, 40, 80}; random straggler sets (batches x trials draws) and the worst case (the
search of docs/design.md section 2, one per batch); inputs ordered by order_inputs (chain). Prints a markdown table.
Every GCC row decodes by interpolation (decoder="interpolate"), also at N = 15, where GCC's default now uses its
low-redundancy select decoder (measured by benchmarks/lowred_table.py and lowred_decoders.py).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gencc
from gencc.kernels import Matern32, Matern52
from gencc.points import chebyshev1, chebyshev2, equispaced, nested
from gencc.workloads import load

K, S, NS = 10, 3, (15, 20, 40, 80)


def candidates() -> dict:
    def gcc(**kw):
        return lambda N: gencc.GCC(K, N, decoder="interpolate", **kw)

    def nest(kernel, alpha="chebyshev1"):
        a = {"chebyshev1": chebyshev1, "equispaced": equispaced}[alpha]
        return lambda N: gencc.GCC(K, N, kernel=kernel, alpha=alpha, beta=nested(chebyshev2(N), a(K)),
                                   decoder="interpolate")

    return {
        "BACC (baseline)": lambda N: gencc.BACC(K, N),
        "cubic, lam_dec=1e-6, c1/c2": gcc(kernel="cubic", lam_dec=1e-6, beta="chebyshev2"),
        "cubic, lam_dec=1e-4, c1/c2": gcc(kernel="cubic", lam_dec=1e-4, beta="chebyshev2"),
        "cubic, lam=0, c1/c2": gcc(kernel="cubic", beta="chebyshev2"),
        "cubic, lam_dec=gcv, c1/c2": gcc(kernel="cubic", lam_dec="gcv", beta="chebyshev2"),
        "cubic, lam=0, eq/c2": gcc(kernel="cubic", alpha="equispaced", beta="chebyshev2"),
        "cubic, lam=0, eq/eq": gcc(kernel="cubic", alpha="equispaced", beta="equispaced"),
        "sobolev1, lam=0, eq/c2": gcc(kernel="sobolev1", alpha="equispaced", beta="chebyshev2"),
        "cubic, lam=0, c1/c2-nested": nest("cubic"),
        "matern52 l=0.2, lam=0, c1/c2-nested": nest(Matern52(0.2, null_degree=1)),
        "matern32 l=0.3, lam=0, c1/c2-nested (default)": gcc(),
        "matern32 l=0.3, lam=0, eq/c2-nested": nest(Matern32(0.3, null_degree=1), "equispaced"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--orderings", action="store_true", help="compare order_inputs methods instead")
    args = ap.parse_args()
    w = load("digits-cnn", progress=False)
    rng = np.random.default_rng(1)
    batches = [w.sample(K, rng) for _ in range(args.batches)]
    print(f"digits-cnn (test accuracy {w.test_accuracy:.3f}), K={K}, S={S}: mean rel_mse, random "
          f"({args.batches}x{args.trials} draws) / worst case ({args.batches} inputs sets)\n")
    print("| configuration | " + " | ".join(f"N={N} random / worst" for N in NS) + " |")
    print("|---|" + "---|" * len(NS))
    rows = candidates().items()
    if args.orderings:
        rows = [(f"{scheme}, order={o}", (make, o)) for scheme, make in
                (("BACC", lambda N: gencc.BACC(K, N)),
                 ("GCC default", lambda N: gencc.GCC(K, N, decoder="interpolate")))
                for o in ("chain", "spectral", "pca", "identity")]
    for name, make in rows:
        make, order = make if isinstance(make, tuple) else (make, "chain")
        t = time.time()
        cells = []
        for N in NS:
            code = make(N)
            rnd, wst = [], []
            for b, (X, _y) in enumerate(batches):
                rnd += [r["rel_mse"] for r in
                        gencc.simulate(w.f, X, code, gencc.FixedCount(S), args.trials, b, order=order)]
                wst.append(gencc.simulate(w.f, X, code, gencc.FixedCount(S, "worst"), 1, b, order=order)[0]["rel_mse"])
            cells.append(f"{np.mean(rnd):.2e} / {np.mean(wst):.2e}")
        print(f"| {name} | " + " | ".join(cells) + f" |  <!-- {time.time() - t:.0f}s -->", flush=True)


if __name__ == "__main__":
    main()
