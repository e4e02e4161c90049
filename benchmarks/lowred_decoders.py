"""What was tried for GCC's untrained default at low redundancy (issue 10): decoders on GCC's own encoder, other
encoder designs, and SystematicGCC untrained, at N/K = 1.5 (K = 10, N = 15) and 1.25 (K = 8, N = 10).

    python benchmarks/lowred_decoders.py [--sets 100] [--workloads digits-cnn mnist1d-cnn]

Same scoring as benchmarks/lowred_table.py (gencc.experiments.lowred.evaluate): random S = 1, 2, 3 by the exact
expectation over every straggler set, worst adjacent pair per input set; mean rel_mse over test input sets (the
same sets for every row). Rows marked "(default)" are what `gencc.GCC(K, N)` does now.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gencc
from gencc.codes import gcc_select
from gencc.codes.base import Code
from gencc.experiments.lowred import COLUMNS, SETTINGS, WORKLOADS, evaluate, ordered_sets
from gencc.kernels import Matern32


class Variant(Code):
    """GCC's encoder with one of the select decoder's candidates fixed ("fixed": index, ridge mu), or the LOO
    choice among a subset of them ("select": indices)."""

    name = "variant"

    def __init__(self, K: int, N: int, mode: str, which: tuple[int, ...], mu: float = gcc_select.RIDGE):
        super().__init__(K, N)
        self.g = gencc.GCC(K, N, decoder="interpolate")
        self.alpha, self.beta, self.mode, self.which, self.mu = self.g.alpha, self.g.beta, mode, which, mu
        self.systematic = gcc_select.systematic_workers(self.alpha, self.beta)

    @property
    def min_results(self) -> int:
        return self.g.min_results

    @property
    def data_dependent(self) -> bool:
        return self.mode == "select"

    def _cache_key(self, returned, Y):
        return None if self.data_dependent else tuple(returned.tolist())

    def _encoding_matrix(self) -> np.ndarray:
        return self.g.encoding_matrix

    def _decoding_matrix(self, returned, Y):
        args = (self.beta[returned], self.alpha, self.g.kernel, self.encoding_matrix, returned, self.systematic)
        if self.mode == "fixed":
            if self.which == (2,):
                G = self.g.decoding_matrix(returned)
                return gcc_select.linear_reading(self.encoding_matrix, returned, self.systematic, G, self.mu)
            return gcc_select.candidate_decoders(*args)[self.which[0]]
        key = tuple(returned.tolist())
        cache = self.__dict__.setdefault("_sel", {})
        if key not in cache:
            cache[key] = gcc_select.selection_matrices(*args)
        Ds, Ls = cache[key]
        Ds, Ls = [Ds[i] for i in self.which], [Ls[i] for i in self.which] if Ls else []
        return Ds[gcc_select.choose(Ds, Ls, Y)]


def rows() -> list[tuple[str, callable]]:
    return [
        ("GCC, interpolating decoder (the default before)", lambda K, N: gencc.GCC(K, N, decoder="interpolate")),
        ("GCC, select decoder (default)", lambda K, N: gencc.GCC(K, N)),
        ("GCC encoder, short-prior decoder only", lambda K, N: Variant(K, N, "fixed", (1,))),
        ("GCC encoder, linear reading only, ridge 0.1", lambda K, N: Variant(K, N, "fixed", (2,))),
        ("GCC encoder, linear reading only, ridge 0.01", lambda K, N: Variant(K, N, "fixed", (2,), 0.01)),
        ("GCC encoder, linear reading only, ridge 1", lambda K, N: Variant(K, N, "fixed", (2,), 1.0)),
        ("GCC encoder, LOO choice: interpolate / short", lambda K, N: Variant(K, N, "select", (0, 1))),
        ("GCC encoder, LOO choice: interpolate / linear", lambda K, N: Variant(K, N, "select", (0, 2))),
        ("GCC, constant mean (encoder and decoder)",
         lambda K, N: gencc.GCC(K, N, kernel=Matern32(0.3, null_degree=0), decoder="interpolate")),
        ("GCC, length scale 0.15 (encoder and decoder)",
         lambda K, N: gencc.GCC(K, N, kernel=Matern32(0.15, null_degree=1), decoder="interpolate")),
        ("GCC, equispaced alpha / equispaced-nested beta",
         lambda K, N: gencc.GCC(K, N, alpha="equispaced", beta="equispaced-nested", decoder="interpolate")),
        ("SystematicGCC untrained, default rho 0.01", lambda K, N: gencc.SystematicGCC(K, N)),
        ("SystematicGCC untrained, rho 0.1", lambda K, N: gencc.SystematicGCC(K, N, rho=0.1)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sets", type=int, default=100)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    args = ap.parse_args()
    from gencc.workloads import load

    t0 = time.perf_counter()
    lines = ["| workload, K, N | configuration | S=1 | S=2 | S=3 | S=2, worst adjacent pair |",
             "|---|---|---|---|---|---|"]
    for wname in args.workloads:
        w = load(wname, progress=False)
        for K, N in SETTINGS:
            test = ordered_sets(w.X_test, K, args.sets, 0)
            for i, (label, make) in enumerate(rows()):
                res = evaluate(make(K, N), w.f, test)
                head = f"{wname.removesuffix('-cnn')}, {K}, {N}" if i == 0 else ""
                lines.append(f"| {head} | {label} | " + " | ".join(f"{res[c][0].mean():.4f}" for c in COLUMNS) + " |")
                print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
