"""How GCC's defaults were chosen: rel_mse of candidate configurations against BACC on the digits CNN, and the
input orderings.

K = 10, S = 3, N in {15, 20, 40, 80}; random straggler sets (`batches` input sets x `trials` draws) and the worst
case (the search of docs/design.md section 2, one per input set); input set b is drawn from one generator
(seed 1) in order, its straggler draws from seed b. Every GCC row decodes by interpolation
(decoder="interpolate"), also at N = 15, where GCC's default uses its low-redundancy select decoder (measured by
the low-redundancy preset).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gencc.codes import BACC, GCC, Code
from gencc.faults.stragglers import FixedCount
from gencc.rkhs.kernels import Matern32, Matern52
from gencc.rkhs.points import chebyshev1, chebyshev2, equispaced, nested
from gencc.runtime.simulate import simulate

from ..analysis import group
from ..markdown import table
from .options import Option, parse_overrides
from .output import table_section, write_table

PRESET = "gcc-defaults"
K, S = 10, 3
WORKLOAD = "digits-cnn"
#: 8 input sets, not the 20 of the script this preset replaces (defaults_table.py, removed; last at commit 0ff7f7f:
#: `git show 0ff7f7f:benchmarks/defaults_table.py`): on the shared 2-core machine the 20-set grid ran well over
#: the ten-minute budget of a preset (`--set batches=20` runs it)
DEFAULTS = {"batches": 8, "trials": 10, "N": (15, 20, 40, 80)}
OPTIONS = {"batches": Option("input sets"), "trials": Option("random straggler draws per input set"),
           "N": Option("worker counts, comma-separated, each above K = 10", minimum=K + 1, many=True)}
ORDERINGS = ("chain", "spectral", "pca", "identity")
DESCRIPTION = ("How GCC's defaults were chosen, on the digits CNN: K = 10, S = 3; mean rel_mse over random "
               "straggler sets / the worst case (the search of docs/design.md section 2, one per input set). Every "
               "GCC row decodes by interpolation (`decoder=\"interpolate\"`), also at N = 15, where the default "
               "uses its low-redundancy select decoder (see the low-redundancy table). Configurations: kernel, "
               "decoder penalty lam, alpha / beta point designs (c1: Chebyshev first kind, c2: second kind, eq: "
               "equispaced, nested: the nearest worker moved onto each alpha). The second table compares the "
               "input orderings of `order_inputs` (chain: nearest-neighbour path + 2-opt; spectral: Fiedler "
               "vector; pca: first principal component; identity: as given). The default grid has 8 input sets, "
               "fewer than the 20 of the script it replaces (defaults_table.py, removed; last at commit 0ff7f7f), to "
               "keep the preset's run time on a shared 2-core machine near a ten-minute budget (the last run's "
               "time is in data/timings.csv); `--set batches=20` restores them.")


def candidates() -> dict[str, Callable[[int], Code]]:
    """Configuration label -> code factory taking N."""
    def gcc(**kw: Any) -> Callable[[int], Code]:
        return lambda N: GCC(K, N, decoder="interpolate", **kw)

    def nest(kernel: Any, alpha: str = "chebyshev1") -> Callable[[int], Code]:
        a = {"chebyshev1": chebyshev1, "equispaced": equispaced}[alpha]
        return lambda N: GCC(K, N, kernel=kernel, alpha=alpha, beta=nested(chebyshev2(N), a(K)),
                                   decoder="interpolate")

    return {
        "BACC (baseline)": lambda N: BACC(K, N),
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


def orderings() -> dict[str, tuple[Callable[[int], Code], str]]:
    """Row label -> (code factory, ordering) for the ordering comparison."""
    out = {}
    for scheme, make in (("BACC", lambda N: BACC(K, N)),
                         ("GCC default", lambda N: GCC(K, N, decoder="interpolate"))):
        for o in ORDERINGS:
            out[f"{scheme}, order={o}"] = (make, o)
    return out


def _cell(w: Any, code: Code, batches: list, trials: int, order: str) -> tuple[float, float]:
    rnd, wst = [], []
    for b, (X, _y) in enumerate(batches):
        rnd += [r["rel_mse"] for r in simulate(w.f, X, code, FixedCount(S), trials, b, order=order)]
        wst.append(simulate(w.f, X, code, FixedCount(S, "worst"), 1, b, order=order)[0]["rel_mse"])
    return float(np.mean(rnd)), float(np.mean(wst))


def run_table(batches: int, trials: int, Ns: tuple[int, ...], log: Callable[[str], Any] | None = None) -> list[dict]:
    """One row per (part, configuration, N): mean rel_mse over random straggler sets and over worst cases."""
    from gencc.workloads import load

    w = load(WORKLOAD, progress=False)
    rng = np.random.default_rng(1)
    inputs = [w.sample(K, rng) for _ in range(batches)]
    rows = []
    parts = [("configurations", {n: (f, "chain") for n, f in candidates().items()}), ("orderings", orderings())]
    for part, makers in parts:
        for label, (make, order) in makers.items():
            t0 = time.perf_counter()
            for N in Ns:
                rnd, wst = _cell(w, make(N), inputs, trials, order)
                rows.append({"part": part, "configuration": label, "K": K, "S": S, "N": N, "batches": batches,
                             "trials": trials, "random_rel_mse": rnd, "worst_rel_mse": wst})
            if log:
                log(f"{part}: {label}: {time.perf_counter() - t0:.0f} s")
    return rows


def markdown(rows: list[dict]) -> list[str]:
    """Both tables as markdown lines: `random / worst` mean rel_mse per N."""
    lines: list[str] = []
    for (part,), rs in group(rows, ("part",)).items():
        Ns = sorted({r["N"] for r in rs})
        by = {(r["configuration"], r["N"]): r for r in rs}
        labels = list(dict.fromkeys(r["configuration"] for r in rs))
        r0 = rs[0]
        lines += [f"{part.capitalize()}: mean rel_mse, random ({r0['batches']} input sets x {r0['trials']} draws) / "
                  f"worst case ({r0['batches']} input sets), K = {r0['K']}, S = {r0['S']}.", ""]
        lines += table(["configuration", *[f"N={N} random / worst" for N in Ns]],
                       ([lab, *[f"{by[lab, N]['random_rel_mse']:.2e} / {by[lab, N]['worst_rel_mse']:.2e}"
                                for N in Ns]] for lab in labels))
        lines.append("")
    return lines[:-1]


def reproduce(out: str | Path, overrides: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute both tables into <out>/tables/gcc-defaults.csv; `overrides`: batches=B, trials=T, N=15,20."""
    opts = {**DEFAULTS, **parse_overrides(PRESET, overrides, OPTIONS)}
    t0 = time.perf_counter()
    rows = run_table(opts["batches"], opts["trials"], tuple(opts["N"]), log=print if progress else None)
    return write_table(out, PRESET, rows, t0)


def section(out: str | Path) -> list[str]:
    """The preset's part of docs/results.md (empty when its table is absent)."""
    return table_section(out, PRESET, DESCRIPTION, markdown)
