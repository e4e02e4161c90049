"""Sweeps at a fixed straggler fraction and load: S = rho N and K = N / r as N grows.

The rate presets hold S fixed while N grows, so they never reach a regime where a fifth of the workers is missing;
a user sweeping S meets it at once. Rows whose straggler spec is a percentage (`worst:10%`, `random:20%`) at a
fixed K / N (`SweepSpec.K_frac`) give, per (workload, K / N, straggler, N), the mean rel_mse, agreement and RelAcc
of each scheme (`points`), GCC against BACC (`compare`), and a figure of rel_mse against N: one panel per
(workload, K / N) and pattern (worst, random), one line per scheme and rho.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import analysis as A
from .drawing import color, finish, grid, log_axes, positive, save, stem
from .markdown import table

KIND = "fraction"
#: rho's line style in the figure, in the order of the rhos present
STYLES = ("o-", "s--", "^:", "d-.")
#: the agreement check's slack: GCC's worst-case agreement should be at least BACC's minus this
AGREEMENT_SLACK = 0.02
#: the patterns whose rel_mse the figure and the rel_mse table show (worst-agreement's set is chosen for its
#: agreement: its rel_mse is not a worst case)
LOSS_PATTERNS = ("worst", "random")
#: how the section names each pattern's straggler sets
PATTERN_NOTES = {"worst": " (at each scheme's worst-case pattern, the one of largest rel_mse)",
                 "worst-agreement": " (at each scheme's own straggler set of least agreement, found by the same "
                                    "search: the worst case of agreement)"}


def rho(straggler: str) -> float | None:
    """The straggler fraction of a percentage spec (`worst:10%` -> 0.1), None for any other spec."""
    arg = str(straggler).partition(":")[2]
    if not arg.endswith("%"):
        return None
    try:
        return float(arg[:-1]) / 100.0
    except ValueError:
        return None


def load(r: dict) -> float:
    """K / N of a row, rounded to 3 decimals (so K = round(frac N) groups by its fraction)."""
    return round(r["K"] / r["N"], 3)


def _groups(rows: list[dict]) -> dict[tuple, set]:
    """(workload, scheme, straggler, K / N) -> the N values among rows with a percentage straggler spec."""
    out: dict[tuple, set] = {}
    for r in rows:
        if rho(r["straggler"]) is not None and r.get("S") is not None:
            out.setdefault((r["workload"], r["scheme"], r["straggler"], load(r)), set()).add(r["N"])
    return out


def supported(rows: list[dict]) -> bool:
    """Whether the rows hold a fixed-fraction series: a percentage straggler spec at one K / N for three or more N."""
    return any(len(v) >= 3 for v in _groups(rows).values())


def points(rows: list[dict]) -> list[dict]:
    """Per (workload, K / N, straggler, N, scheme) of the fixed-fraction series: mean rel_mse (with its 10-90%
    spread over records), mean agreement and RelAcc (classifiers), S, and the exact fraction of worst cases."""
    keep = {k for k, v in _groups(rows).items() if len(v) >= 3}
    rs = [dict(r, K_over_N=load(r)) for r in rows
          if (r["workload"], r["scheme"], r["straggler"], load(r)) in keep if rho(r["straggler"]) is not None]
    out = []
    for (w, kn, st, N, sch), g in A.group(rs, ("workload", "K_over_N", "straggler", "N", "scheme")).items():
        v = A.values(g, "rel_mse")
        ex = [r["exact"] for r in g if r.get("exact") is not None]
        out.append({"workload": w, "K_over_N": kn, "straggler": st, "pattern": g[0]["pattern"],
                    "rho": rho(st), "N": N, "K": g[0]["K"], "S": g[0]["S"], "scheme": sch, "records": len(g),
                    "decodable": float(np.mean([bool(r["decodable"]) for r in g])),
                    "rel_mse": A.stat(v, np.mean), "rel_mse_q10": A.stat(v, lambda a: np.quantile(a, 0.1)),
                    "rel_mse_q90": A.stat(v, lambda a: np.quantile(a, 0.9)),
                    "agreement": A.stat(A.values(g, "agreement"), np.mean),
                    "rel_acc": A.stat(A.values(g, "rel_acc"), np.mean),
                    "exact": float(np.mean(ex)) if ex else None})
    return out


def compare(pts: list[dict], a: str = "gcc", b: str = "bacc") -> list[dict]:
    """Per (workload, K / N, straggler, N): mean rel_mse and agreement of schemes `a` and `b`, their rel_mse ratio,
    and the two checks of `a` against `b` (rel_mse at or below b's; agreement at least b's minus
    AGREEMENT_SLACK)."""
    out = []
    for (w, kn, st, N), ps in A.group(pts, ("workload", "K_over_N", "straggler", "N")).items():
        by = {p["scheme"]: p for p in ps}
        la, lb = A.pick(by, a), A.pick(by, b)
        if la is None or lb is None:
            continue
        pa, pb = by[la], by[lb]
        agr_ok = None
        if np.isfinite(pa["agreement"]) and np.isfinite(pb["agreement"]):
            agr_ok = bool(pa["agreement"] >= pb["agreement"] - AGREEMENT_SLACK)
        out.append({"workload": w, "K_over_N": kn, "straggler": st, "pattern": pa["pattern"], "rho": pa["rho"],
                    "N": N, "K": pa["K"], "S": pa["S"], f"{a}_rel_mse": pa["rel_mse"], f"{b}_rel_mse": pb["rel_mse"],
                    "ratio": pa["rel_mse"] / pb["rel_mse"] if pb["rel_mse"] > 0 else float("nan"),
                    f"{a}_agreement": pa["agreement"], f"{b}_agreement": pb["agreement"],
                    "a_at_or_below_b": bool(pa["rel_mse"] <= pb["rel_mse"]), "agreement_ok": agr_ok})
    return out


def plot(pts: list[dict], path: Path, title: str = "") -> Path:
    """rel_mse against N, log-log: a row of panels per (workload, K / N), a column per pattern; colour = scheme,
    line style = rho."""
    pts = [p for p in pts if p["pattern"] in LOSS_PATTERNS]
    rows_ = sorted({(p["workload"], p["K_over_N"]) for p in pts})
    pats = sorted({p["pattern"] for p in pts}, key=lambda s: (s != "worst", s))
    rhos = sorted({p["rho"] for p in pts})
    fig, axes = grid(len(rows_), len(pats), w=4.6, h=3.5)
    for i, (w, kn) in enumerate(rows_):
        for j, pat in enumerate(pats):
            ax = axes[i, j]
            ps = [p for p in pts if (p["workload"], p["K_over_N"], p["pattern"]) == (w, kn, pat)]
            for k, sch in enumerate(sorted({p["scheme"] for p in ps}, key=A.scheme_key)):
                for m, r in enumerate(rhos):
                    q = positive([p for p in ps if p["scheme"] == sch and p["rho"] == r], "rel_mse", "N")
                    if q:
                        ax.plot([p["N"] for p in q], [p["rel_mse"] for p in q], STYLES[m % len(STYLES)],
                                color=color(sch, k), ms=3, lw=1.1, label=f"{sch}, S/N={r:g}")
            log_axes(ax, [p["N"] for p in ps])
            finish(ax, "N workers", "rel_mse", f"{w}, K/N={kn:g}, {pat}", fontsize=9)
    return save(fig, path, title)


def outputs(rows: list[dict], out: Path, prefix: str) -> dict[str, Any]:
    """The points CSV (data/), the GCC-against-BACC table (tables/) and the figure (figures/)."""
    pts = points(rows)
    cmp = compare(pts)
    name = _stem(prefix)
    paths = [A.write_csv(out / "data" / f"{name}-points.csv", pts),
             A.write_csv(out / "tables" / f"{name}-gcc-vs-bacc.csv", cmp),
             plot(pts, out / "figures" / f"{name}.png", title="rel_mse against N at fixed S/N and K/N")]
    return {"fraction_points": pts, "fraction_compare": cmp, "paths": paths}


def _stem(prefix: str) -> str:
    """The file stem of the fraction outputs: the prefix when it already names the kind (fixed-fraction)."""
    return prefix if KIND in prefix else stem(prefix, KIND)


def _count(cs: list[dict], key: str) -> str:
    known = [c for c in cs if c[key] is not None]
    return f"{sum(1 for c in known if c[key])} of {len(known)}"


def section(out: Path, name: str) -> list[str]:
    """results.md lines for the fixed-fraction tables of preset `name` (none when it wrote none)."""
    path = out / "tables" / f"{_stem(name)}-gcc-vs-bacc.csv"
    if not path.exists():
        return []
    cmp = A.read_csv(path)
    lines = ["Mean rel_mse of GCC / BACC per N at a fixed straggler fraction S/N and load K/N (worst: the "
             "worst case per input set, every contiguous block of S workers among the candidates of the search; "
             "worst-agreement: the same search for the set of least top-1 agreement; random: uniformly random "
             "straggler sets), averaged over input sets and draws.", ""]
    for pat, cs in A.group(cmp, ("pattern",)).items():
        agr = (f"mean agreement at least BACC's - {AGREEMENT_SLACK:g} at {_count(cs, 'agreement_ok')} grid points"
               + PATTERN_NOTES.get(pat[0], ""))
        if pat[0] not in LOSS_PATTERNS:
            lines.append(f"- {pat[0]}: GCC's {agr}.")
            continue
        worse = [c for c in cs if not c["a_at_or_below_b"]]
        lines.append(f"- {pat[0]}: GCC's mean rel_mse at or below BACC's at {_count(cs, 'a_at_or_below_b')} "
                     "grid points" + ("" if not worse else "; above it at " + ", ".join(
                         f"{c['workload']} K/N={c['K_over_N']:g} {c['straggler']} N={c['N']} (x{c['ratio']:.3g})"
                         for c in worse))
                     + f"; {agr}.")
    loss_cmp = [c for c in cmp if c["pattern"] in LOSS_PATTERNS]
    Ns = sorted({c["N"] for c in cmp})
    lines += ["", *table(["workload", "K/N", "stragglers", *[f"N={n}" for n in Ns]],
                         ([w, A.fmt(kn), st, *[f"{A.fmt(by[n]['gcc_rel_mse'], 2)} / {A.fmt(by[n]['bacc_rel_mse'], 2)}"
                                               if n in by else "" for n in Ns]]
                          for (w, kn, st), cs in A.group(loss_cmp, ("workload", "K_over_N", "straggler")).items()
                          for by in [{c["N"]: c for c in cs}]))]
    agr = [c for c in cmp if isinstance(c.get("gcc_agreement"), float) and np.isfinite(c["gcc_agreement"])]
    if agr:
        lines += ["", "Mean agreement with argmax f, GCC / BACC (worst: at each scheme's own pattern of largest "
                  "rel_mse; worst-agreement: at each scheme's own pattern of least agreement, the worst case of "
                  "agreement):", "",
                  *table(["workload", "K/N", "stragglers", *[f"N={n}" for n in Ns]],
                         ([w, A.fmt(kn), st, *[f"{by[n]['gcc_agreement']:.3f} / {by[n]['bacc_agreement']:.3f}"
                                               if n in by else "" for n in Ns]]
                          for (w, kn, st), cs in A.group(agr, ("workload", "K_over_N", "straggler")).items()
                          for by in [{c["N"]: c for c in cs}]))]
    return lines
