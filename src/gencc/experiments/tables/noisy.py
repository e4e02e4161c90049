"""The noisy-results table and figure (LeTCC's second regime): rel_mse against the relative noise level.

Every worker returns its clean result plus Gaussian noise of `level` times that result's rms
(`gencc.experiments.noise`); S = 10% of N uniformly random stragglers. Schemes: GCC's default (`gencc.GCC(K, N)`,
lam_dec = 0), GCC with lam_dec chosen per straggler pattern by GCV and by leave-one-out, and BACC. Input set b is
drawn from the test inputs with seed b; its noise and straggler draws come from seed b too, the same for every
scheme (paired comparisons).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gencc.codes import BACC, GCC, Code
from gencc.faults.stragglers import FixedCount

from .. import analysis as A
from ..drawing import color, finish, grid, save
from ..markdown import table
from ..noise import noisy_trials
from .options import Option, parse_overrides
from .output import table_section, write_table

PRESET = "noisy"
WORKLOADS = ("digits-cnn", "mnist1d-cnn")
#: (K, N) settings: redundancy 4 at small K and 2 at K = 50
SETTINGS = ((10, 40), (50, 100))
LEVELS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
#: the straggler fraction (random stragglers)
FRACTION = 0.1
#: the table's columns: (label, GCC options or None for BACC), in table order
VARIANTS = (("gcc", {}), ("gcc[lam_dec=gcv]", {"lam_dec": "gcv"}), ("gcc[lam_dec=loo]", {"lam_dec": "loo"}),
           ("bacc", None))
#: the noise levels at which the table checks that the default GCC's mean rel_mse is at or below BACC's
BAR_LEVELS = (0.05, 0.2)
DEFAULTS = {"batches": 3, "trials": 5, "workloads": WORKLOADS}
OPTIONS = {"batches": Option("input sets per setting"), "trials": Option("noise and straggler draws per input set"),
           "workloads": Option("trained workloads", choices=WORKLOADS)}
DESCRIPTION = ("Noisy results (LeTCC's second regime): every worker returns f(x) plus Gaussian noise of a relative "
               "level (noise sd = level x the rms of that worker's clean result, `gencc.experiments.noise`), "
               f"S = {FRACTION:g} N uniformly random stragglers, on the trained digits and mnist1d CNNs at (K, N) in "
               f"{', '.join(f'({k}, {n})' for k, n in SETTINGS)}. Schemes: GCC's default (`gencc.GCC(K, N)`, "
               "lam_dec = 0), GCC with lam_dec chosen per straggler pattern by GCV and by leave-one-out, and BACC; "
               "mean rel_mse over input sets and draws (every scheme sees the same inputs, noise and stragglers).")


def _code(K: int, N: int, opts: dict | None) -> Code:
    return BACC(K, N) if opts is None else GCC(K, N, **opts)


def run_table(workloads: tuple[str, ...], batches: int, trials: int,
              log: Callable[[str], Any] | None = None) -> list[dict]:
    """One row per (workload, K, N, level, scheme): mean rel_mse, agreement and RelAcc over batches x trials."""
    from gencc.workloads import load

    rows = []
    for name in workloads:
        w = load(name, progress=False)
        X_test, y_test = np.asarray(w.X_test), np.asarray(w.y_test)
        for K, N in SETTINGS:
            S = max(1, int(round(FRACTION * N)))
            sets = [np.random.default_rng(b).choice(len(X_test), K, replace=False) for b in range(batches)]
            for level in LEVELS:
                t0 = time.perf_counter()
                for label, opts in VARIANTS:
                    code = _code(K, N, opts)
                    recs = []
                    for b, idx in enumerate(sets):
                        recs += noisy_trials(w.f, X_test[idx], code, FixedCount(S, "random"), level,
                                             trials=trials, seed=b, labels=y_test[idx])
                    ok = [r for r in recs if r["decodable"]]
                    rows.append({"workload": name, "K": K, "N": N, "S": S, "level": level, "scheme": label,
                                 "batches": batches, "trials": trials,
                                 "rel_mse": float(np.mean([r["rel_mse"] for r in ok])),
                                 "agreement": float(np.mean([r["agreement"] for r in ok])),
                                 "rel_acc": float(np.nanmean([r["rel_acc"] for r in ok]))})
                if log:
                    log(f"{name} K={K} N={N} level={level}: {time.perf_counter() - t0:.0f} s")
    return rows


def plot(rows: list[dict], path: Path) -> Path:
    """rel_mse against the noise level (symlog x, log y), one panel per (workload, K, N), a line per scheme."""
    panels = sorted({(r["workload"], r["K"], r["N"]) for r in rows})
    fig, axes = grid(1, len(panels), w=4.2, h=3.4)
    for j, (w, K, N) in enumerate(panels):
        ax = axes[0, j]
        rs = [r for r in rows if (r["workload"], r["K"], r["N"]) == (w, K, N)]
        for k, (label, _) in enumerate(VARIANTS):
            q = sorted((r for r in rs if r["scheme"] == label), key=lambda r: r["level"])
            style = "o-" if label in ("gcc", "bacc") else "^--"
            c = color(label, k) if "[" not in label else f"C{k + 3}"
            ax.plot([r["level"] for r in q], [r["rel_mse"] for r in q], style, color=c, ms=3, lw=1.1, label=label)
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_yscale("log")
        finish(ax, "relative noise level", "rel_mse", f"{w}, K={K}, N={N}, S={rs[0]['S']}", fontsize=9)
    return save(fig, path, "rel_mse against the relative noise level, random stragglers")


def markdown(rows: list[dict]) -> list[str]:
    """The check of GCC's default against BACC at BAR_LEVELS (mean rel_mse at or below BACC's) and the table (mean
    rel_mse per level, one column per scheme)."""
    labels = [lab for lab, _ in VARIANTS]
    lines = []
    checks = [(r, by) for (w, K, N, lv), g in A.group(rows, ("workload", "K", "N", "level")).items()
              for by in [{x["scheme"]: x for x in g}] for r in [by["gcc"]] if lv in BAR_LEVELS]
    below = [(r, by) for r, by in checks if r["rel_mse"] <= by["bacc"]["rel_mse"]]
    lines.append(f"GCC's default is at or below BACC at noise levels {' and '.join(f'{v:g}' for v in BAR_LEVELS)} in "
                 f"{len(below)} of {len(checks)} (workload, K, N, level) cells"
                 + ("" if len(below) == len(checks) else "; above it at " + ", ".join(
                     f"{r['workload']} K={r['K']} N={r['N']} level {r['level']:g}" for r, by in checks
                     if (r, by) not in below)) + ". Its rel_mse relative to BACC's there: "
                 + ", ".join(f"{r['rel_mse'] / by['bacc']['rel_mse']:.2f}" for r, by in checks) + ".")
    r0 = rows[0]
    lines += ["", f"{r0['batches']} input sets x {r0['trials']} draws per cell; mean rel_mse (mean agreement with "
              "argmax f in parentheses):", ""]
    body = []
    for (w, K, N, lv), g in A.group(rows, ("workload", "K", "N", "level")).items():
        by = {x["scheme"]: x for x in g}
        body.append([w, str(K), str(N), f"{lv:g}",
                     *[f"{by[lab]['rel_mse']:.3g} ({by[lab]['agreement']:.3f})" if lab in by else ""
                       for lab in labels]])
    return lines + table(["workload", "K", "N", "noise level", *labels], body)


def reproduce(out: str | Path, overrides: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute the table into <out>/tables/noisy.csv and its figure into <out>/figures/noisy.png; `overrides`:
    batches=B, trials=T, workloads=digits-cnn."""
    opts = {**DEFAULTS, **parse_overrides(PRESET, overrides, OPTIONS)}
    t0 = time.perf_counter()
    rows = run_table(tuple(opts["workloads"]), opts["batches"], opts["trials"], log=print if progress else None)
    res = write_table(out, PRESET, rows, t0)
    res["paths"].append(plot(rows, Path(out) / "figures" / f"{PRESET}.png"))
    return res


def section(out: str | Path) -> list[str]:
    """The preset's part of docs/results.md (empty when its table is absent); the figure is figures/noisy.png."""
    return table_section(out, PRESET, DESCRIPTION, markdown)
