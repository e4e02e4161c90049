"""The ParM table: parity models against GCC, BACC and replication at the same N on the digits CNN.

K = 10, k = 2, so N = K + K / k = 15 for every scheme; S random stragglers, `batches` input sets x `trials`
straggler draws each (input set b drawn from seed b, its draws from seed b, the same for every scheme). ParM runs
with the trained parity model (`gencc.workloads.load_parity`, trained once and cached) and, as a control, with
F_P = f (no training); inputs ordered by `order_inputs` (chain) unless the row says "unordered".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gencc.codes import BACC, GCC, Code, ParM, Replication
from gencc.faults.stragglers import FixedCount
from gencc.runtime.simulate import simulate

from ..analysis import fmt
from ..markdown import table
from .options import Option, parse_overrides
from .output import table_section, write_table

PRESET = "parm"
K, k = 10, 2
WORKLOAD = "digits-cnn"
DEFAULTS = {"batches": 20, "trials": 10, "S": (1, 2, 3)}
OPTIONS = {"batches": Option("input sets"), "trials": Option("straggler draws per input set"),
           "S": Option("numbers of random stragglers, comma-separated", many=True)}
DESCRIPTION = ("ParM (parity models, SOSP 2019) against GCC, BACC and replication at the same N on the digits CNN: "
               f"K = {K}, k = {k}, N = K + K / k = 15 for every scheme, S uniformly random stragglers. ParM uses the "
               "parity model of `gencc.workloads.load_parity` (trained once, cached) and, as a control, F_P = f "
               "(untrained). Inputs ordered by `order_inputs` (chain) unless the row says unordered; every scheme "
               "sees the same inputs and straggler sets. ParM recovers one lost input per group of k, so with more "
               "stragglers some inputs get no estimate (the last column; they count as zero vectors in rel_mse).")


def schemes(parity: Any) -> list[tuple[str, Code, bool]]:
    """(label, code, ordered) for every row of the table."""
    N = ParM(K, k).N
    return [
        ("ParM, trained F_P", ParM(K, k, parity=parity), True),
        ("ParM, trained F_P, unordered", ParM(K, k, parity=parity), False),
        ("ParM, F_P = f (untrained)", ParM(K, k), True),
        ("GCC", GCC(K, N), True),
        ("BACC", BACC(K, N), True),
        ("replication", Replication(K, N), True),
    ]


def _mean(recs: list[dict], key: str) -> float:
    v = np.array([r[key] for r in recs if r.get("decodable") and r.get(key) is not None], dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def run_table(batches: int, trials: int, Ss: tuple[int, ...], log: Callable[[str], Any] | None = None) -> list[dict]:
    """One row per (S, scheme): mean rel_mse, agreement, rel_acc and inputs without an estimate per job."""
    from gencc.workloads import load, load_parity

    w = load(WORKLOAD, progress=False)
    parity = load_parity(WORKLOAD, k, progress=False)
    held_out = parity.info["test"]
    inputs = [w.sample(K, np.random.default_rng(b)) for b in range(batches)]
    rows = []
    for S in Ss:
        for label, code, order in schemes(parity):
            t0 = time.perf_counter()
            recs: list[dict] = []
            for b, (X, y) in enumerate(inputs):
                recs += simulate(w.f, X, code, FixedCount(S, "random"), trials=trials, seed=b, labels=y,
                                       order=order)
            rows.append({"S": S, "scheme": label, "K": K, "N": code.N, "batches": batches, "trials": trials,
                         "rel_mse": _mean(recs, "rel_mse"), "agreement": _mean(recs, "agreement"),
                         "rel_acc": _mean(recs, "rel_acc"), "missing": _mean(recs, "missing"),
                         "parity_rel_mse": float(held_out["rel_mse"]),
                         "parity_agreement": float(held_out["agreement"])})
            if log:
                log(f"S={S} {label}: {time.perf_counter() - t0:.0f} s")
    return rows


def markdown(rows: list[dict]) -> list[str]:
    """The table as markdown lines, with the parity model's held-out figures above it."""
    r0 = rows[0]
    head = [f"{r0['batches']} input sets x {r0['trials']} straggler draws per row; the parity model's held-out "
            f"reconstruction: rel_mse {fmt(r0['parity_rel_mse'])}, agreement {fmt(r0['parity_agreement'])}.", ""]
    return head + table(["S", "scheme", "rel_mse", "agreement", "rel_acc", "inputs without an estimate per job"],
                        ([str(r["S"]), r["scheme"], f"{r['rel_mse']:.2e}", f"{r['agreement']:.3f}",
                          f"{r['rel_acc']:.3f}", f"{r['missing']:.2f}"] for r in rows))


def reproduce(out: str | Path, overrides: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute the table into <out>/tables/parm.csv; `overrides`: batches=B, trials=T, S=1,2,3."""
    opts = {**DEFAULTS, **parse_overrides(PRESET, overrides, OPTIONS)}
    t0 = time.perf_counter()
    rows = run_table(opts["batches"], opts["trials"], tuple(opts["S"]), log=print if progress else None)
    return write_table(out, PRESET, rows, t0)


def section(out: str | Path) -> list[str]:
    """The preset's part of docs/results.md (empty when its table is absent)."""
    return table_section(out, PRESET, DESCRIPTION, markdown)
