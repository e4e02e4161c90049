"""How good must a parity model be for SystematicGCC + parity to reach a target? (issue 10, mnist1d at N/K = 1.25)

    python benchmarks/parity_needed.py [--workload mnist1d-cnn] [--K 8] [--N 10] [--sets 200]

The low-redundancy table's SystematicGCC + parity (`SystematicGCC.calibrated` on training inputs, with the
workload's cached parity model) scored on the same test input sets, but with every coded worker's result moved
toward the exact group mean of f: y_c = mean f + a (y_c - mean f). a = 1 is the trained parity model as it is,
a = 0 a perfect one; the error's variance scales by a^2, and so does the decoder's rho (calibrated at a = 1).
Printed: mean rel_mse at S = 1, 2, 3 (exact expectation over straggler sets) and S = 2, 3 as a multiple of the
interpolating GCC on the same inputs (the issue's goal: at most 0.7x). Not a scheme anyone can run: a yardstick.
"""

from __future__ import annotations

import argparse
from itertools import combinations
from math import ceil

import numpy as np

import gencc
from gencc.experiments import lowred as L
from gencc.workloads import load, load_parity


def _mean_rel(code: gencc.Code, Y: np.ndarray, T: np.ndarray, S: int) -> float:
    N = code.N
    tot = np.zeros(len(Y))
    sets = list(combinations(range(N), S))
    for lost in sets:
        ret = np.setdiff1d(np.arange(N), lost)
        tot += L._scores(L._decoders(code, ret, Y), Y, T, ret)[0]
    return float((tot / len(sets)).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", default="mnist1d-cnn", choices=list(L.WORKLOADS))
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--N", type=int, default=10)
    ap.add_argument("--sets", type=int, default=200)
    args = ap.parse_args()
    if args.sets < 1:
        ap.error("need --sets >= 1")
    try:
        K, N = L.check_setting(args.K, args.N)
    except ValueError as e:
        ap.error(str(e))
    w = load(args.workload, progress=False)
    parity = load_parity(args.workload, ceil(K / (N - K)), progress=False)
    test = L.ordered_sets(w.X_test, K, args.sets, 0)  # the table's scored input sets and calibration sets
    calib = L.ordered_sets(w.X_train, K, L.CALIBRATION_SETS, 10_000)
    code = gencc.SystematicGCC.calibrated(K, N, w.f, calib, parity=parity)
    Y, T = L._results(code, w.f, test)
    Y, T = Y.reshape(*Y.shape[:2], -1), T.reshape(*T.shape[:2], -1)
    E = code.encoding_matrix
    coded = np.flatnonzero((E != 0).sum(axis=1) > 1)
    exact = np.einsum("nk,bkm->bnm", E, T)
    gcc = gencc.GCC(K, N, decoder="interpolate")
    Yg, Tg = L._results(gcc, w.f, test)
    Yg, Tg = Yg.reshape(*Yg.shape[:2], -1), Tg.reshape(*Tg.shape[:2], -1)
    ref = {S: _mean_rel(gcc, Yg, Tg, S) for S in (2, 3)}
    print(f"{args.workload}, K = {K}, N = {N}, {args.sets} input sets; parity k = {parity.k} "
          f"({parity.weights_path.name}); calibrated rho {code.rho:.3g}; interpolating GCC S=2 {ref[2]:.4f}, "
          f"S=3 {ref[3]:.4f}")
    print("| a (parity error scale) | S=1 | S=2 | S=3 |")
    print("|---|---|---|---|")
    for a in (1.0, 0.9, 0.8, 0.7, 0.6, 0.4, 0.0):
        Ya = Y.copy()
        Ya[:, coded] = exact[:, coded] + a * (Y[:, coded] - exact[:, coded])
        c = gencc.SystematicGCC(K, N, rho=max(code.rho * a * a, 1e-6), kernel=code.kernel, parity=parity)
        r = [_mean_rel(c, Ya, T, S) for S in (1, 2, 3)]
        print(f"| {a:g} | {r[0]:.4f} | {r[1]:.4f} ({r[1] / ref[2]:.2f}x) | {r[2]:.4f} ({r[2] / ref[3]:.2f}x) |",
              flush=True)


if __name__ == "__main__":
    main()
