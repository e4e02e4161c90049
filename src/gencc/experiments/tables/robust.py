"""The robust-decoding table: wrong results on the digits CNN, accuracy, recall and false alarms.

K = 10, S = 2 random stragglers, A in {1, 2, 3} corrupted workers chosen uniformly among the returned ones,
inputs ordered by `order_inputs` (chain). Every magnitude is in units of the standard deviation of the honest
results (see gencc.adversaries). Trial t draws its inputs, stragglers and adversaries from seed t, the same for
every scheme. Three parts, each its own CSV: `main` (robust GCC against the decode with the adversaries treated
as stragglers, ApproxIFER on BACC, BACC's own leave-one-out search), `honest` (false alarms on all-honest
results), `smart` (the Stealth adversary and colluding neighbours, against uncoded).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gencc.codes import BACC, GCC, Code
from gencc.codes.ordering import order_inputs
from gencc.faults import adversaries as adv
from gencc.runtime.metrics import rel_mse

from ..analysis import read_csv, write_csv
from ..markdown import command, table
from .options import Option, parse_overrides
from .output import table_path

PRESET = "robust"
K, S = 10, 2
WORKLOAD = "digits-cnn"
MODELS = ("signflip", "random", "noise", "offset")
AS = (1, 2, 3)
PARTS = ("main", "honest", "smart")
DEFAULTS = {"trials": 50, "honest_trials": 200, "N": (20, 40, 80)}
OPTIONS = {"trials": Option("trials per row of the main table (the smart part runs at most 30)"),
           "honest_trials": Option("all-honest trials per N"),
           "N": Option("worker counts, comma-separated (the smart part runs those >= 40)", minimum=K + 2 * 3 + S,
                       many=True)}
#: the target of the main table: robust rel_mse <= TARGET_FACTOR x (adversaries as stragglers) + TARGET_SLACK
TARGET_FACTOR, TARGET_SLACK = 2.0, 1e-4
DESCRIPTION = ("Robust decoding against wrong results on the digits CNN: K = 10, S = 2 random stragglers, A "
               "corrupted workers chosen uniformly among the returned ones (magnitudes in standard deviations of the "
               "honest results: sign flips, Gaussian random values of 3 sd, Gaussian noise of 1 sd, a constant "
               "offset of 1 sd; see `gencc.adversaries`). Inputs, stragglers and adversaries are shared by all "
               "schemes. `code.robust_decode(Y, returned, adversaries=A)`; 'adversaries as stragglers': the plain "
               "decode without the corrupted results (the best possible); target met: robust rel_mse <= "
               f"{TARGET_FACTOR:g} x that + {TARGET_SLACK:g}. ApproxIFER (AAAI 2022) is "
               "`BACC.robust_decode(..., method=\"approxifer\")`.")


def draws(w: Any, code: Code, trials: int) -> Iterator[tuple]:
    """Per trial: (ordered true outputs, every worker's result, returned workers, rng for the adversary)."""
    for t in range(trials):
        rng = np.random.default_rng(t)
        X, _ = w.sample(K, rng)
        X = X[order_inputs(X)]
        returned = np.sort(rng.choice(code.N, code.N - S, replace=False))
        yield w.f(X), w.f(code.encode(X)), returned, rng


def main_rows(w: Any, Ns: tuple[int, ...], trials: int) -> list[dict]:
    """Robust GCC, its best possible, ApproxIFER and BACC's LOO search per (N, A, adversary model)."""
    rows = []
    for N in Ns:
        gcc, bacc = GCC(K, N), BACC(K, N)
        data, bdata = list(draws(w, gcc, trials)), list(draws(w, bacc, trials))
        for A in AS:
            for name in MODELS:
                model = adv.get_adversary(name, A)
                m: dict[str, list] = {k: [] for k in ("r", "rx", "rec", "fa", "ra", "rb", "rbx")}
                for (Yt, Y, ret, rng), (Ytb, Yb, retb, _) in zip(data, bdata, strict=True):
                    seed = int(rng.integers(2**31))
                    Yc, bad = model.corrupt(Y[ret], ret, np.random.default_rng(seed), gcc)
                    Yh, fl = gcc.robust_decode(Yc, ret, adversaries=A)
                    keep = ~np.isin(ret, bad)
                    m["r"].append(rel_mse(Yh, Yt))
                    m["rx"].append(rel_mse(gcc.decode(Y[ret[keep]], ret[keep]), Yt))
                    m["rec"].append(np.isin(bad, fl).mean())
                    m["fa"].append(np.setdiff1d(fl, bad).size)
                    Ycb, badb = model.corrupt(Yb[retb], retb, np.random.default_rng(seed), bacc)
                    m["ra"].append(rel_mse(bacc.robust_decode(Ycb, retb, adversaries=A, method="approxifer")[0], Ytb))
                    m["rb"].append(rel_mse(bacc.robust_decode(Ycb, retb, adversaries=A)[0], Ytb))
                    kb = ~np.isin(retb, badb)
                    m["rbx"].append(rel_mse(bacc.decode(Yb[retb[kb]], retb[kb]), Ytb))
                mean = {k: float(np.mean(v)) for k, v in m.items()}
                rows.append({"N": N, "A": A, "adversary": name, "trials": trials, "robust_gcc": mean["r"],
                             "gcc_excluded": mean["rx"],
                             "target_met": mean["r"] <= TARGET_FACTOR * mean["rx"] + TARGET_SLACK,
                             "recall": mean["rec"], "honest_flagged": mean["fa"], "approxifer_bacc": mean["ra"],
                             "bacc_loo": mean["rb"], "bacc_excluded": mean["rbx"]})
    return rows


def honest_rows(w: Any, Ns: tuple[int, ...], trials: int) -> list[dict]:
    """Per N: the fraction of all-honest trials flagging anyone for A = 1, 2, 3, and robust / plain rel_mse."""
    rows = []
    for N in Ns:
        code = GCC(K, N)
        flags: dict[int, list[bool]] = {A: [] for A in AS}
        robust, plain = [], []
        for Yt, Y, ret, _ in draws(w, code, trials):
            plain.append(rel_mse(code.decode(Y[ret], ret), Yt))
            for A in AS:
                Yh, fl = code.robust_decode(Y[ret], ret, adversaries=A)
                flags[A].append(fl.size > 0)
                if A == AS[-1]:
                    robust.append(rel_mse(Yh, Yt))
        rows.append({"N": N, "trials": trials, **{f"flagged_A{A}": float(np.mean(flags[A])) for A in AS},
                     "robust_over_plain": float(np.mean(robust) / np.mean(plain))})
    return rows


def smart_rows(w: Any, Ns: tuple[int, ...], trials: int) -> list[dict]:
    """Stealth (the largest common offset robust GCC does not flag) against uncoded, and colluding bumps."""
    rows = []
    for N in Ns:
        code = GCC(K, N)
        for A in AS:
            m: dict[str, list] = {k: [] for k in ("mag", "r", "rx", "ru", "brec", "br", "brx")}
            for Yt, Y, ret, rng in draws(w, code, trials):
                Yc, bad = adv.Stealth(A).corrupt(Y[ret], ret, rng, code)
                pos = np.isin(ret, bad)
                m["mag"].append(np.abs(Yc[pos] - Y[ret][pos]).max() / adv.spread(Y[ret]))
                m["r"].append(rel_mse(code.robust_decode(Yc, ret, adversaries=A)[0], Yt))
                m["rx"].append(rel_mse(code.decode(Y[ret[~pos]], ret[~pos]), Yt))
                m["ru"].append(A * (m["mag"][-1] * adv.spread(Y[ret])) ** 2 / np.sum(Yt**2))
                Yb, badb = adv.SmoothBump(A).corrupt(Y[ret], ret, rng, code)
                Yh, fl = code.robust_decode(Yb, ret, adversaries=A)
                m["brec"].append(np.isin(badb, fl).mean())
                kb = ~np.isin(ret, badb)
                m["br"].append(rel_mse(Yh, Yt))
                m["brx"].append(rel_mse(code.decode(Y[ret[kb]], ret[kb]), Yt))
            mean = {k: float(np.mean(v)) for k, v in m.items()}
            rows.append({"N": N, "A": A, "trials": trials, "stealth_offset_sd": mean["mag"],
                         "stealth_robust_gcc": mean["r"], "stealth_excluded": mean["rx"],
                         "stealth_uncoded": mean["ru"], "bump_recall": mean["brec"], "bump_robust_gcc": mean["br"],
                         "bump_excluded": mean["brx"]})
    return rows


def run_table(trials: int, honest_trials: int, Ns: tuple[int, ...],
              log: Callable[[str], Any] | None = None) -> dict[str, list[dict]]:
    """The three parts' rows."""
    from gencc.workloads import load

    w = load(WORKLOAD, progress=False)
    big = tuple(n for n in Ns if n >= 40) or Ns
    out = {}
    for part, fn, ns, t in (("main", main_rows, Ns, trials), ("honest", honest_rows, Ns, honest_trials),
                            ("smart", smart_rows, big, min(trials, 30))):
        t0 = time.perf_counter()
        out[part] = fn(w, ns, t)
        if log:
            log(f"{part}: {time.perf_counter() - t0:.0f} s")
    return out


def _e(v: float) -> str:
    return f"{v:.2e}"


def markdown(parts: dict[str, list[dict]]) -> list[str]:
    """The three tables as markdown lines."""
    main, honest, smart = parts["main"], parts["honest"], parts["smart"]
    lines = [f"Robust GCC against the best possible and against ApproxIFER on BACC ({main[0]['trials']} trials per "
             "row):", ""]
    lines += table(["N", "A", "adversary", "robust GCC rel_mse", "adversaries as stragglers", "target met", "recall",
                    "honest flagged / trial", "ApproxIFER (BACC)", "BACC, LOO search",
                    "BACC, adversaries as stragglers"],
                   ([str(r["N"]), str(r["A"]), r["adversary"], _e(r["robust_gcc"]), _e(r["gcc_excluded"]),
                     "yes" if r["target_met"] else "NO", f"{r['recall']:.3f}", f"{r['honest_flagged']:.3f}",
                     _e(r["approxifer_bacc"]), _e(r["bacc_loo"]), _e(r["bacc_excluded"])] for r in main))
    lines += ["", f"False alarms: all-honest runs ({honest[0]['trials']} trials per N), the fraction of trials "
              "flagging anyone, and the robust decode's mean rel_mse (A = 3) over the plain decode's:", ""]
    lines += table(["N", *[f"A = {A}" for A in AS], "mean rel_mse robust / plain"],
                   ([str(r["N"]), *[f"{r[f'flagged_A{A}']:.3f}" for A in AS], f"{r['robust_over_plain']:.2f}"]
                    for r in honest))
    lines += ["", f"Smart adversaries ({smart[0]['trials']} trials per row). Stealth: the A neighbouring workers the "
              "decode leans on most add a common offset to one output coordinate, the largest robust GCC does not "
              "flag; uncoded: the same A workers each spoil their own answer by that offset (harm uncoded cannot "
              "even detect). Bump: A colluding neighbours add a smooth arch of height 1 sd.", ""]
    lines += table(["N", "A", "stealth offset (sd)", "robust GCC rel_mse", "adversaries as stragglers",
                    "uncoded, same offset", "bump: recall", "bump: rel_mse / as stragglers"],
                   ([str(r["N"]), str(r["A"]), f"{r['stealth_offset_sd']:.3f}", _e(r["stealth_robust_gcc"]),
                     _e(r["stealth_excluded"]), _e(r["stealth_uncoded"]), f"{r['bump_recall']:.3f}",
                     f"{_e(r['bump_robust_gcc'])} / {_e(r['bump_excluded'])}"] for r in smart))
    return lines


def reproduce(out: str | Path, overrides: Any = None, progress: bool = True) -> dict[str, Any]:
    """Compute the three parts into <out>/tables/robust-<part>.csv; `overrides`: trials=T, honest_trials=H,
    N=20,40,80."""
    opts = {**DEFAULTS, **parse_overrides(PRESET, overrides, OPTIONS)}
    t0 = time.perf_counter()
    parts = run_table(opts["trials"], opts["honest_trials"], tuple(opts["N"]), log=print if progress else None)
    paths = [write_csv(table_path(out, PRESET, p), rows) for p, rows in parts.items()]
    n = sum(len(r) for r in parts.values())
    return {"seconds": time.perf_counter() - t0, "rows": n, "paths": paths, "points": n}


def section(out: str | Path) -> list[str]:
    """The preset's part of docs/results.md (empty when its tables are absent)."""
    paths = {p: table_path(out, PRESET, p) for p in PARTS}
    if not all(p.exists() for p in paths.values()):
        return []
    return [DESCRIPTION, "", f"Command: `{command(PRESET)}`.", "",
            *markdown({p: read_csv(path) for p, path in paths.items()})]
