"""The low-redundancy table: every scheme at N/K = 1.5 and 1.25 on trained classifiers, S = 1..3 uniformly
random stragglers and the worst adjacent pair of workers. GCC's default there is its select decoder
(`decoder="select"`); the interpolating decoder it had before keeps a row of its own, for comparison.

Random stragglers are scored by their exact expectation: for each input set every one of the C(N, S) straggler
sets is decoded (D_F is cached per set, so this costs little), and the per-set mean is averaged over input sets
with a 95% confidence interval over input sets (1.96 standard errors). "Worst adjacent pair": per input set
the largest loss over the N - 1 pairs of neighbouring workers (n, n + 1) in the code's worker order, averaged
over input sets. Inputs are ordered by `order_inputs` (chain) as `simulate` does; inputs with no estimate
(ParM) count as zero vectors, as in `simulate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from itertools import combinations
from math import ceil
from pathlib import Path
from typing import Any

import numpy as np

from gencc.codes import BACC, GCC, Code, ParM, Replication, SystematicGCC, calibrate_rho
from gencc.codes.ordering import order_inputs
from gencc.model import apply_batch

from .options import Option, parse_overrides
from .output import table_section, write_table

#: the (K, N) pairs measured: N/K = 1.5 and 1.25
SETTINGS = ((10, 15), (8, 10))
WORKLOADS = ("digits-cnn", "mnist1d-cnn")
#: input sets from the training inputs used to calibrate rho (never the scored test inputs)
CALIBRATION_SETS = 50


def ordered_sets(X_pool: np.ndarray, K: int, count: int, seed: int) -> list[np.ndarray]:
    """`count` sets of K distinct inputs drawn from X_pool (set b from seed + b), each in chain order."""
    out = []
    for b in range(count):
        idx = np.random.default_rng(seed + b).choice(len(X_pool), size=K, replace=False)
        X = X_pool[idx]
        out.append(X[order_inputs(X)])
    return out


def check_setting(K: int, N: int) -> tuple[int, int]:
    """(K, N) of a low-redundancy setting, or ValueError: SystematicGCC's range K < N <= 2K, K >= 2."""
    if not 2 <= K < N <= 2 * K:
        raise ValueError(f"a low-redundancy setting needs 2 <= K < N <= 2K (e.g. K = 8, N = 10), got K={K}, N={N}")
    return K, N


def _decoders(code: Code, returned: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """D_F (K, n), or one per input set (B, K, n) for a code whose decoder depends on the results."""
    if not code.data_dependent:
        return code.decoding_matrix(returned)
    return np.stack([code.decoding_matrix(returned, Yb[returned]) for Yb in Y])


def _scores(D: np.ndarray, Y: np.ndarray, T: np.ndarray, returned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Yh = np.einsum("kf,bfm->bkm" if D.ndim == 2 else "bkf,bfm->bkm", D, Y[:, returned])
    rel = ((Yh - T) ** 2).sum(axis=(1, 2)) / (T**2).sum(axis=(1, 2))
    agr = (Yh.argmax(axis=2) == T.argmax(axis=2)).mean(axis=1)
    return rel, agr


def _results(code: Code, f: Callable, sets: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every worker's result (B, N, m) and the truth (B, K, m), with one call per distinct worker function
    over all input sets (a torch model is far faster on one large batch than on many small ones)."""
    B = len(sets)
    Xt = [code.encode(X) for X in sets]
    fns = [code.worker_function(f, n) for n in range(code.N)]
    rows: dict[int, list[int]] = {}
    for n, fn in enumerate(fns):
        rows.setdefault(id(fn), []).append(n)
    parts = {}
    for key, ns in rows.items():
        Z = np.stack([np.stack([np.asarray(x[n]) for n in ns]) for x in Xt])  # x: an array or a list (packed)
        Z = Z.reshape(B * len(ns), *Z.shape[2:])
        parts[key] = apply_batch(fns[ns[0]], Z).reshape(B, len(ns), -1)
    Y = np.empty((B, code.N, next(iter(parts.values())).shape[2]))
    for key, ns in rows.items():
        Y[:, ns] = parts[key]
    X = np.stack(sets)
    T = apply_batch(f, X.reshape(B * code.K, *X.shape[2:])).reshape(B, code.K, -1)
    return Y, T


def evaluate(code: Code, f: Callable, sets: list[np.ndarray], Ss: Iterable[int] = (1, 2, 3)) -> dict:
    """{column: (rel_mse per input set, agreement per input set)} for columns S=1.., and "adjacent"."""
    Y, T = _results(code, f, sets)
    Y, T = Y.reshape(*Y.shape[:2], -1), T.reshape(*T.shape[:2], -1)
    N = code.N
    out = {}
    for S in Ss:
        rel, agr = np.zeros(len(sets)), np.zeros(len(sets))
        count = 0
        for lost in combinations(range(N), S):
            ret = np.setdiff1d(np.arange(N), lost)
            r, a = _scores(_decoders(code, ret, Y), Y, T, ret)
            rel += r
            agr += a
            count += 1
        out[f"S={S}"] = (rel / count, agr / count)
    pairs = [_scores(_decoders(code, ret, Y), Y, T, ret)
             for ret in (np.setdiff1d(np.arange(N), [n, n + 1]) for n in range(N - 1))]
    rels = np.stack([p[0] for p in pairs], axis=1)
    agrs = np.stack([p[1] for p in pairs], axis=1)
    worst = rels.argmax(axis=1)
    out["adjacent"] = (rels.max(axis=1), agrs[np.arange(len(sets)), worst])
    return out


def _ci(v: np.ndarray) -> float:
    return float(1.96 * v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def schemes(workload: str, K: int, N: int, f: Callable, calib: list[np.ndarray],
            extra: bool = False) -> list[tuple[str, Code, dict]]:
    """(label, code, facts) for every scheme of the table at (K, N); facts hold SystematicGCC's calibrated rho
    and length scale (`SystematicGCC.calibrated` on `calib`, training inputs) and the parity training seconds."""
    from gencc.workloads import load_parity

    k = ceil(K / (N - K))
    parity = load_parity(workload, k, progress=False)
    train_s = float(parity.info["train_seconds"])
    out: list[tuple[str, Code, dict]] = [
        ("GCC (default)", GCC(K, N), {}),
        ("GCC, interpolating decoder (the default before)", GCC(K, N, decoder="interpolate"), {}),
        ("BACC", BACC(K, N), {}),
        ("replication", Replication(K, N), {}),
        (f"ParM k={k} (trained parity)", ParM(K, k, parity=parity), {"train_s": train_s}),
    ]
    packed = load_parity(workload, k, progress=False, packed=True)
    packed_s = float(packed.info["train_seconds"])
    out.append((f"ParM k={k}, packed parity (k inputs per query)", ParM(K, k, parity=packed),
                {"train_s": packed_s}))
    for label, par, tr in (("SystematicGCC (untrained)", None, None), ("SystematicGCC + parity", parity, train_s),
                           ("SystematicGCC + packed parity", packed, packed_s)):
        code = SystematicGCC.calibrated(K, N, f, calib, parity=par)
        facts = {"rho": code.rho, "ell": code.kernel.length_scale}
        out.append((label, code, facts if tr is None else {**facts, "train_s": tr}))
    if extra:
        base = out[-3][1]
        for r in (base.rho / 10, base.rho * 10):
            out.append((f"SystematicGCC (untrained), rho x {r / base.rho:g}",
                        SystematicGCC(K, N, rho=r, kernel=base.kernel),
                        {"rho": r, "ell": base.kernel.length_scale}))
        fixed = SystematicGCC(K, N)  # GCC's length scale 0.3, rho calibrated
        rho = calibrate_rho(fixed, f, calib)
        out.append(("SystematicGCC (untrained), length scale 0.3", SystematicGCC(K, N, rho=rho),
                    {"rho": rho, "ell": 0.3}))
    return out


def run_table(sets: int = 200, workloads: Iterable[str] = WORKLOADS, settings: Iterable[tuple[int, int]] = SETTINGS,
              seed: int = 0, extra: bool = False, log: Callable[[str], Any] | None = None) -> list[dict]:
    """Rows (one per workload, setting, scheme) with rel_mse, its CI and agreement per column."""
    from gencc.workloads import load

    rows = []
    for wname in workloads:
        w = load(wname, progress=False)
        for K, N in settings:
            t0 = time.perf_counter()
            test = ordered_sets(w.X_test, K, sets, seed)
            calib = ordered_sets(w.X_train, K, CALIBRATION_SETS, seed + 10_000)
            for label, code, facts in schemes(wname, K, N, w.f, calib, extra):
                res = evaluate(code, w.f, test)
                row: dict[str, Any] = {"workload": wname, "K": K, "N": N, "scheme": label, **facts}
                for col, (rel, agr) in res.items():
                    row[f"{col} rel_mse"] = float(rel.mean())
                    row[f"{col} rel_mse_ci"] = _ci(rel)
                    row[f"{col} agreement"] = float(agr.mean())
                rows.append(row)
            if log:
                log(f"{wname} K={K} N={N}: {time.perf_counter() - t0:.0f} s")
    return rows


COLUMNS = ("S=1", "S=2", "S=3", "adjacent")


def markdown(rows: list[dict]) -> list[str]:
    """The table as markdown lines: rel_mse ± CI (agreement) per column, one block per workload and setting."""
    lines = ["| workload | K, N | scheme | S=1 | S=2 | S=3 | S=2, worst adjacent pair | rho, length scale | "
             "training s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[f'{c} rel_mse']:.4f} ± {r[f'{c} rel_mse_ci']:.4f} ({r[f'{c} agreement']:.3f})" for c in COLUMNS]
        rho = f"{r['rho']:.2g}, {r['ell']:g}" if r.get("rho") is not None else ""
        tr = f"{r['train_s']:.0f}" if r.get("train_s") is not None else ""
        lines.append(f"| {r['workload']} | {r['K']}, {r['N']} | {r['scheme']} | " + " | ".join(cells)
                     + f" | {rho} | {tr} |")
    return lines


# ----- the `low-redundancy` preset of `gencc reproduce` ----------------------------------------------------
PRESET = "low-redundancy"
DESCRIPTION = ("Low redundancy (N/K close to 1): every scheme at N/K = 1.5 (K = 10, N = 15) and 1.25 (K = 8, N = 10) "
               "on the digits CNN and mnist1d, S = 1, 2, 3 uniformly random stragglers (exact expectation over every "
               "straggler set) and the worst adjacent pair of workers; mean rel_mse over input sets ± 95% CI "
               "(agreement in parentheses). ParM and SystematicGCC + parity use the parity model of "
               "`gencc.workloads.load_parity` (trained once, cached; training seconds as measured when it was "
               "trained); the packed rows its packed model (`load_parity(..., packed=True)`: each parity query is "
               "the group's k inputs stacked, so a coded worker receives k inputs instead of one); "
               "SystematicGCC's prior length scale and rho are calibrated on training inputs "
               "(`SystematicGCC.calibrated`).")
DEFAULT_SETS = 200


def preset_args(overrides: Any) -> tuple[int, tuple[str, ...]]:
    """(input sets, workloads) of the preset from `overrides` (key=value strings or a dict), or ValueError."""
    opts = parse_overrides(PRESET, overrides, {
        "sets": Option("input sets per setting; confidence intervals need two", minimum=2),
        "workloads": Option("workloads", choices=WORKLOADS)})
    return opts.get("sets", DEFAULT_SETS), opts.get("workloads", WORKLOADS)


def reproduce(out: str | Path, overrides: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute the table into <out>/tables/low-redundancy.csv; `overrides`: sets=N, workloads=a,b."""
    sets, workloads = preset_args(overrides)
    t0 = time.perf_counter()
    rows = run_table(sets=sets, workloads=workloads, log=print if progress else None)
    for r in rows:
        r["sets"] = sets
    return write_table(out, PRESET, rows, t0)


def section(out: str | Path) -> list[str]:
    """The preset's part of docs/results.md (empty when its table is absent)."""
    return table_section(out, PRESET, DESCRIPTION, markdown,
                         note=lambda rows: f"{rows[0]['sets']} sets of test inputs per setting.")
