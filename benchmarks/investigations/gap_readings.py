"""Answered: no pick among fixed readings of the results takes GCC's worst case below BACC's (docs/design.md section 3).

How far a pick among fixed readings of the results could take GCC's worst case: per cell of the
fixed-fraction preset, the worst case of GCC's default, of BACC, of each candidate reading alone, and of an
oracle that takes, per straggler pattern, the candidate closest to f's own outputs.

The oracle is no decoder (it reads the true outputs): it bounds every result-aware pick among the same candidates
(a leave-one-out pick, a pick per gap), so a cell where the oracle stays above BACC is out of reach of any such
pick. The inputs and the worst-case search are the preset's (`gencc.experiments.sweep.run_point`: the same input
sets, `simulate` with `FixedCount(S, "worst")`: exact enumeration up to 5,000 straggler sets).

Candidates, each a fixed linear map per pattern: `default` (GCC's D_F), `fit` (the interpolating fit without the
gap rule), `berrut` (Berrut's rational reading of the whole pattern around the results' least-squares trend),
`bridge` (every gap of one or more data points bridged), `linear` (the select decoder's linear reading, its ridge
toward `fit`: `gencc.codes.gcc_low_redundancy.linear_reading`).

    python benchmarks/investigations/gap_readings.py
    python benchmarks/investigations/gap_readings.py --cells digits-cnn,5,20,worst:20% --candidates default,berrut
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gencc
from gencc import GCC
from gencc.codes import gcc_low_redundancy as low_redundancy
from gencc.codes.berrut import berrut_weights
from gencc.codes.gaps import bridge_gaps
from gencc.experiments.sweep import parse_straggler, stable_seed
from gencc.experiments.toy_workloads import get_workload
from gencc.rkhs.smoothing import smoother_weights
from gencc.runtime.simulate import apply_batch

#: the fixed-fraction preset's cells where GCC's worst rel_mse was above BACC's: workload, K, N, stragglers
CELLS = (("digits-cnn", 5, 20, "worst:20%"), ("digits-cnn", 10, 20, "worst:10%"), ("digits-cnn", 20, 40, "worst:5%"),
         ("digits-cnn", 60, 120, "worst:5%"), ("mnist1d-cnn", 5, 20, "worst:10%"))
CANDIDATES = ("default", "fit", "berrut", "bridge", "linear")


def readings(code: GCC, srt: np.ndarray, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The candidates' D (K x n) for sorted returned workers `srt` of a nested-design GCC."""
    t, a, ns = code.beta[srt], code.alpha, code.kernel.null_space
    out: dict[str, np.ndarray] = {}
    fit = smoother_weights(t, a, code.kernel, 0.0)
    for name in names:
        if name == "default":
            out[name] = GCC._fit_decoder(code, srt, None)[0]
        elif name == "fit":
            out[name] = fit
        elif name == "berrut":
            R, Pt = berrut_weights(t, a), ns(t)
            out[name] = R + (ns(a) - R @ Pt) @ np.linalg.pinv(Pt)
        elif name == "bridge":
            out[name] = bridge_gaps(fit, t, a, (1, 1), null_space=ns)
        elif name == "linear":
            out[name] = low_redundancy.linear_reading(code.encoding_matrix, srt, code.systematic, fit)
        else:
            raise ValueError(f"unknown candidate {name!r}; choose from {', '.join(CANDIDATES)}")
    return out


class Reading(GCC):
    """GCC's encoder with a decoder that reads each pattern by `pick(code, srt, Y)` (a D): the candidates alone
    and the oracle. `truth` (K x m, in the order of the ordered inputs) is f's own outputs, for the oracle."""

    pick = None
    truth: np.ndarray | None = None

    @property
    def data_dependent(self) -> bool:
        return True

    def _fit_decoder(self, returned: np.ndarray, Y: np.ndarray | None) -> tuple[np.ndarray, float]:
        return type(self).pick(self, returned, Y), 0.0


def reading_code(K: int, N: int, names: tuple[str, ...], oracle: bool) -> Reading:
    """A `Reading` code: the one candidate of `names`, or (oracle) per pattern the candidate closest to truth."""
    def pick(code: Reading, srt: np.ndarray, Y: np.ndarray) -> np.ndarray:
        C = readings(code, srt, names)
        if not oracle:
            return C[names[0]]
        errs = {n: float(np.sum((D @ Y - code.truth) ** 2)) for n, D in C.items()}
        return C[min(errs, key=errs.get)]
    cls = type("Reading", (Reading,), {"pick": staticmethod(pick)})
    return cls(K, N)


def cell(workload: str, K: int, N: int, stragglers: str, seeds: list[int], names: tuple[str, ...]
         ) -> dict[str, tuple[float, float]]:
    """{scheme: (mean worst rel_mse, mean agreement at that pattern)} over the input sets `seeds`."""
    w = get_workload(workload)
    model = parse_straggler(stragglers, N)
    schemes = ["gcc", "bacc", *names, "oracle"]
    acc: dict[str, list[tuple[float, float]]] = {s: [] for s in schemes}
    for seed in seeds:
        X, y = w.sample(K, np.random.default_rng(stable_seed("inputs", workload, K, seed)))
        clf = bool(getattr(w, "classifier", False))
        truth = np.asarray(apply_batch(w.f, np.asarray(X)[gencc.order_inputs(np.asarray(X))], None), dtype=float)
        for s in schemes:
            if s == "gcc":
                code = GCC(K, N)
            elif s == "bacc":
                code = gencc.BACC(K, N)
            else:
                code = reading_code(K, N, names if s == "oracle" else (s,), s == "oracle")
                code.truth = truth.reshape(K, -1)
            rec = gencc.simulate(w.f, X, code, model, trials=1, seed=0, labels=y if clf else None, classifier=clf)[0]
            acc[s].append((rec["rel_mse"], rec.get("agreement", float("nan"))))
    return {s: tuple(np.mean(v, axis=0)) for s, v in acc.items()}


def parse_cell(ap: argparse.ArgumentParser, text: str) -> tuple[str, int, int, str]:
    """A --cells entry `workload,K,N,worst:S` checked before any work (argparse's exit 2 and one message)."""
    from gencc.experiments.toy_workloads import TOYS
    from gencc.workloads import WORKLOADS

    parts = text.split(",")
    try:
        wl, K, N, st = parts[0], int(parts[1]), int(parts[2]), parts[3]
        if len(parts) != 4:
            raise ValueError
    except (IndexError, ValueError):
        ap.error(f"a cell is workload,K,N,worst:S (e.g. digits-cnn,5,20,worst:4), got {text!r}")
    if wl not in TOYS and wl not in WORKLOADS:
        ap.error(f"unknown workload {wl!r} in cell {text!r}; available: {', '.join([*WORKLOADS, *TOYS])}")
    if not 1 <= K < N:
        ap.error(f"a cell needs 1 <= K < N, got K={K}, N={N} in {text!r}")
    try:
        parse_straggler(st, N)
    except ValueError as e:
        ap.error(f"cell {text!r}: {e}")
    return wl, K, N, st


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="*", default=None,
                    help="workload,K,N,worst:S cells (default: the five the preset left above BACC)")
    ap.add_argument("--candidates", default=",".join(CANDIDATES),
                    help=f"comma-separated readings (default {','.join(CANDIDATES)})")
    ap.add_argument("--seeds", default="0,1,2", help="input sets, as the preset's seeds (default 0,1,2)")
    args = ap.parse_args()
    cells = [parse_cell(ap, c) for c in args.cells] if args.cells else CELLS
    names = tuple(n.strip() for n in args.candidates.split(",") if n.strip())
    bad = [n for n in names if n not in CANDIDATES]
    if bad:
        ap.error(f"unknown candidate {bad[0]!r}; choose from {', '.join(CANDIDATES)}")
    if any(not c[3].startswith("worst:") for c in cells):
        ap.error("every cell's stragglers must be a worst-case spec, worst:S or worst:P%")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    print(f"worst rel_mse / agreement, mean over input sets {seeds}; oracle: per pattern the closest of "
          f"{', '.join(names)}")
    print("| workload | K, N, stragglers | " + " | ".join(["gcc", "bacc", *names, "oracle"]) + " | seconds |")
    print("|---|---|" + "---|" * (len(names) + 4))
    for wl, K, N, st in cells:
        t0 = time.perf_counter()
        res = cell(wl, K, N, st, seeds, names)
        print(f"| {wl} | {K}, {N}, {st} | " + " | ".join(f"{v[0]:.4g} / {v[1]:.3f}" for v in res.values())
              + f" | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
