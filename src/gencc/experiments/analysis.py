"""Tables from sweep rows: per-point summaries, fitted rates, scheme comparisons, redundancy and configurations.

Everything here is deterministic (the bootstrap has a fixed seed) and free of wall-clock columns, so the same
sweep gives byte-identical tables.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .fit import fit_slope

#: the paper's worst-case and Bernoulli rates: loss = O(N^THEORY_SLOPE) (after the log factor for Bernoulli)
THEORY_SLOPE = -3.0


def group(rows: Iterable[dict], keys: Sequence[str]) -> dict[tuple, list[dict]]:
    """Rows grouped by the values of `keys`, groups in sorted key order."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: tuple(_sortable(v) for v in kv[0])))


def _sortable(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and v is not None else (1, 0, str(v))


SCHEME_ORDER = ("gcc", "bacc", "replication", "lcc")


def scheme_key(label: str) -> tuple:
    """Sort key putting gcc first, then bacc, replication, lcc, then anything else by name."""
    base = label.split("[")[0]
    return (SCHEME_ORDER.index(base) if base in SCHEME_ORDER else len(SCHEME_ORDER), label)


def pick(labels: Iterable[str], scheme: str) -> str | None:
    """The label of `scheme` among `labels`: itself, or its only variant with options (`gcc[...]`)."""
    labels = list(labels)
    if scheme in labels:
        return scheme
    variants = [s for s in labels if s.split("[")[0] == scheme]
    return variants[0] if len(variants) == 1 else None


def log_factor(N: float, p: float | None) -> float:
    """log^3_{1/p}(N), the factor of the Bernoulli rate (1 for fixed-count stragglers)."""
    if p is None or p <= 0:
        return 1.0
    return (math.log(N) / math.log(1.0 / p)) ** 3


def family(r: dict) -> str:
    """`worst`, `random`, `block` or `bernoulli`: the straggler model's kind."""
    return str(r["straggler"]).split(":")[0]


def values(rs: list[dict], col: str) -> np.ndarray:
    """The finite values of `col` over the decodable rows."""
    v = np.array([r[col] for r in rs if r.get(col) is not None and r["decodable"]], dtype=float)
    return v[np.isfinite(v)]


def stat(v: np.ndarray, fn: Callable) -> float:
    """fn(v) as a float, NaN for no values."""
    return float(fn(v)) if v.size else float("nan")


def rate_points(rows: list[dict]) -> list[dict]:
    """Per (workload, scheme, K, straggler, N): mean, median and 10-90% spread of rel_mse over records,
    the Bernoulli-normalised mean (rel_mse / log^3_{1/p} N), the decodable fraction and the exact fraction."""
    out = []
    for (w, sch, K, st, N), rs in group(rows, ("workload", "scheme", "K", "straggler", "N")).items():
        v = values(rs, "rel_mse")
        p = rs[0]["p"]
        ex = [r["exact"] for r in rs if r.get("exact") is not None]
        out.append({
            "workload": w, "scheme": sch, "K": K, "straggler": st, "S": rs[0]["S"], "p": p, "N": N,
            "ratio": N / K, "records": len(rs), "decodable": float(np.mean([bool(r["decodable"]) for r in rs])),
            "exact": float(np.mean(ex)) if ex else None,
            "rel_mse": stat(v, np.mean), "rel_mse_median": stat(v, np.median),
            "rel_mse_q10": stat(v, lambda a: np.quantile(a, 0.1)),
            "rel_mse_q90": stat(v, lambda a: np.quantile(a, 0.9)),
            "log_factor": log_factor(N, p), "rel_mse_norm": stat(v, np.mean) / log_factor(N, p),
        })
    return out


def rate_fits(rows: list[dict], min_ratio: float = 0.0, n_boot: int = 2000) -> list[dict]:
    """Slope of log rel_mse (Bernoulli: divided by log^3_{1/p} N) against log N per (workload, straggler,
    scheme), over N >= min_ratio K, with a 95% bootstrap interval. Needs at least three N."""
    out = []
    for (w, K, st, sch), rs in group(rows, ("workload", "K", "straggler", "scheme")).items():
        rs = [r for r in rs if r["N"] >= min_ratio * K and r["decodable"] and r.get("rel_mse") is not None]
        Ns = sorted({r["N"] for r in rs})
        if len(Ns) < 3:
            continue
        x = np.array([r["N"] for r in rs], dtype=float)
        y = np.array([r["rel_mse"] / log_factor(r["N"], r["p"]) for r in rs], dtype=float)
        try:
            fit = fit_slope(x, y, n_boot=n_boot)
        except ValueError:
            continue
        out.append({
            "workload": w, "K": K, "straggler": st, "scheme": sch, "target": "rel_mse/log^3_{1/p}N"
            if family(rs[0]) == "bernoulli" else "rel_mse", "N_min": Ns[0], "N_max": Ns[-1], "points": fit.n_points,
            "records": fit.n_records, "slope": fit.slope, "lo": fit.lo, "hi": fit.hi, "intercept": fit.intercept,
            "bootstrap": fit.method, "theory": THEORY_SLOPE,
        })
    return out


def compare(points: list[dict], a: str = "gcc", b: str = "bacc") -> list[dict]:
    """Per (workload, straggler, N): mean rel_mse of schemes `a` and `b` and their ratio a / b."""
    out = []
    for (w, K, st, N), ps in group(points, ("workload", "K", "straggler", "N")).items():
        by = {p["scheme"]: p for p in ps}
        la, lb = pick(by, a), pick(by, b)
        if la is None or lb is None:
            continue
        ra, rb = by[la]["rel_mse"], by[lb]["rel_mse"]
        out.append({"workload": w, "K": K, "straggler": st, "N": N, "ratio_NK": N / K, f"{a}_rel_mse": ra,
                    f"{b}_rel_mse": rb, "ratio": ra / rb if rb > 0 else float("nan"),
                    "a_at_or_below_b": bool(ra <= rb)})
    return out


def redundancy(rows: list[dict]) -> list[dict]:
    """Per (workload, K, N, straggler, scheme) of classifier rows: mean agreement, rel_acc, rmse, missing inputs,
    returned workers and the decodable fraction."""
    out = []
    for (w, K, N, st, sch), rs in group(rows, ("workload", "K", "N", "straggler", "scheme")).items():
        if all(r.get("agreement") is None for r in rs):
            continue
        out.append({
            "workload": w, "K": K, "N": N, "ratio": N / K, "straggler": st, "S": rs[0]["S"], "scheme": sch,
            "F": float(np.mean([r["n_returned"] for r in rs])), "records": len(rs),
            "decodable": float(np.mean([bool(r["decodable"]) for r in rs])),
            "agreement": stat(values(rs, "agreement"), np.mean), "rel_acc": stat(values(rs, "rel_acc"), np.mean),
            "rmse": stat(values(rs, "rmse"), np.mean), "missing": stat(values(rs, "missing"), np.mean),
        })
    return out


def configs(rows: list[dict]) -> list[dict]:
    """RMSE and RelAcc per workload and (N, K, |F|) configuration (fixed-count stragglers), one column pair
    per scheme."""
    fixed = [r for r in rows if r.get("S") is not None]
    out = []
    schemes = sorted({r["scheme"] for r in fixed}, key=scheme_key)
    for (w, K, N, st), rs in group(fixed, ("workload", "K", "N", "straggler")).items():
        row: dict[str, Any] = {"workload": w, "N": N, "K": K, "F": N - rs[0]["S"], "straggler": st}
        by = group(rs, ("scheme",))
        for s in schemes:
            sr = by.get((s,), [])
            row[f"{s}_rmse"] = stat(values(sr, "rmse"), np.mean)
            row[f"{s}_rel_acc"] = stat(values(sr, "rel_acc"), np.mean)
        out.append(row)
    return out


def vs_s_points(rows: list[dict]) -> list[dict]:
    """Per (workload, scheme, K, N, pattern, S) of fixed-count rows: mean and spread of rel_mse."""
    out = []
    fixed = [r for r in rows if r.get("S") is not None]
    for (w, sch, K, N, pat, S), rs in group(fixed, ("workload", "scheme", "K", "N", "pattern", "S")).items():
        v = values(rs, "rel_mse")
        ex = [r["exact"] for r in rs if r.get("exact") is not None]
        out.append({"workload": w, "scheme": sch, "K": K, "N": N, "pattern": pat, "S": S, "records": len(rs),
                    "rel_mse": stat(v, np.mean), "rel_mse_q10": stat(v, lambda a: np.quantile(a, 0.1)),
                    "rel_mse_q90": stat(v, lambda a: np.quantile(a, 0.9)),
                    "exact": float(np.mean(ex)) if ex else None})
    return out


def vs_s_fits(rows: list[dict], n_boot: int = 2000) -> list[dict]:
    """Slope of log rel_mse against log S at fixed N per (workload, K, N, pattern, scheme) (theory: +3)."""
    out = []
    fixed = [r for r in rows if r.get("S") is not None and r["S"] > 0 and r["decodable"]]
    for (w, K, N, pat, sch), rs in group(fixed, ("workload", "K", "N", "pattern", "scheme")).items():
        if len({r["S"] for r in rs}) < 3:
            continue
        try:
            fit = fit_slope(np.array([r["S"] for r in rs], float), np.array([r["rel_mse"] for r in rs], float),
                            n_boot=n_boot)
        except ValueError:
            continue
        out.append({"workload": w, "K": K, "N": N, "pattern": pat, "scheme": sch, "points": fit.n_points,
                    "slope": fit.slope, "lo": fit.lo, "hi": fit.hi, "intercept": fit.intercept,
                    "bootstrap": fit.method, "theory": 3.0})
    return out


# ----- writing ----------------------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def write_csv(path: str | Path, rows: list[dict]) -> Path:
    """Rows to CSV (columns in first-seen order, floats at full precision)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols: list[str] = []
    for r in rows:
        cols.extend(c for c in r if c not in cols)
    with path.open("w", newline="") as fh:
        wr = csv.writer(fh, lineterminator="\n")
        wr.writerow(cols)
        for r in rows:
            wr.writerow([_cell(r.get(c)) for c in cols])
    return path


def read_csv(path: str | Path) -> list[dict]:
    """A table written by `write_csv`, numbers parsed back."""
    out = []
    with Path(path).open(newline="") as fh:
        for raw in csv.DictReader(fh):
            out.append({k: _unparse(v) for k, v in raw.items()})
    return out


def _unparse(s: str) -> Any:
    if s == "":
        return None
    if s in ("True", "False"):
        return s == "True"
    for t in (int, float):
        try:
            return t(s)
        except ValueError:
            pass
    return s


def fmt(v: Any, digits: int = 3) -> str:
    """A number for a markdown table."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "n/a"
        return f"{v:.{digits}g}"
    return str(v)

