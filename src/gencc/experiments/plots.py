"""Figures (matplotlib, Agg backend) with the CSV data behind each one.

`make_outputs(rows, out, prefix)` writes every figure and table that the rows support:
- `rate`: log-log rel_mse (Bernoulli: divided by log^3_{1/p} N) against N per scheme, fitted slopes with
  bootstrap intervals, and the theory line of slope -3;
- `vs-S`: rel_mse against S at fixed N, with fitted slopes and the S^3 theory line;
- `redundancy`: agreement and rel_acc against N/K for classifiers;
- `configs`: RMSE and RelAcc per (N, K, |F|) configuration and workload;
- `adversarial`: rows with adversaries, rel_mse against N with its slope beside (6/5)(a-1) (see adversarial.py);
- `fraction`: rel_mse against N at a fixed straggler fraction S/N and load K/N, GCC against BACC (see fraction.py).
Rows with adversaries feed only `adversarial`; the other kinds use the rows without.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import analysis as A
from . import fraction
from .adversarial import outputs as adversarial_outputs
from .drawing import color, finish, grid, log_axes, null_formatter, positive, save, slope_label, stem

KINDS = ("rate", "vs-S", "redundancy", "configs", "adversarial", "fraction")


def plot_rate(points: list[dict], fits: list[dict], path: Path, title: str = "") -> Path:
    """rel_mse (Bernoulli: normalised) against N, log-log, one panel per (workload, straggler)."""
    workloads = sorted({p["workload"] for p in points})
    stragglers = sorted({p["straggler"] for p in points})
    fig, axes = grid(len(workloads), len(stragglers))
    for i, w in enumerate(workloads):
        for j, st in enumerate(stragglers):
            ax = axes[i, j]
            ps = [p for p in points if p["workload"] == w and p["straggler"] == st]
            bern = st.startswith("bernoulli")
            col = "rel_mse_norm" if bern else "rel_mse"
            anchor = None
            for k, sch in enumerate(sorted({p["scheme"] for p in ps}, key=A.scheme_key)):
                q = positive([p for p in ps if p["scheme"] == sch], col, "N")
                if not q:
                    continue
                N = np.array([p["N"] for p in q], float)
                y = np.array([p[col] for p in q])
                lf = np.array([p["log_factor"] for p in q]) if bern else np.ones_like(y)
                lo = np.array([p["rel_mse_q10"] for p in q]) / lf
                hi = np.array([p["rel_mse_q90"] for p in q]) / lf
                c = color(sch, k)
                fit = next((f for f in fits if f["workload"] == w and f["straggler"] == st and f["scheme"] == sch),
                           None)
                label = slope_label(sch, fit)
                if fit:
                    ax.plot(N, np.exp(fit["intercept"]) * N ** fit["slope"], "--", color=c, lw=1)
                if sch.startswith("gcc"):
                    anchor = (N, y[0])
                ax.errorbar(N, y, yerr=[np.maximum(y - lo, 0), np.maximum(hi - y, 0)], fmt="o-", color=c, ms=3,
                            lw=1.2, capsize=2, label=label)
            if anchor is not None:  # the theory rate, through GCC's mean at the smallest N
                N, y0 = anchor
                ax.plot(N, y0 * (N / N[0]) ** A.THEORY_SLOPE, ":", color="k", lw=1.2, label="theory: slope -3")
            log_axes(ax, [p["N"] for p in ps])
            finish(ax, "N workers", "rel_mse / log³_{1/p}N" if bern else "rel_mse", f"{w}, {st}")
    return save(fig, path, title)


def plot_vs_s(points: list[dict], fits: list[dict], path: Path, title: str = "") -> Path:
    """rel_mse against S at fixed N, log-log, one panel per (workload, N, pattern)."""
    panels = sorted({(p["workload"], p["N"], p["pattern"]) for p in points})
    fig, axes = grid(1, len(panels))
    for j, (w, N, pat) in enumerate(panels):
        ax = axes[0, j]
        ps = [p for p in points if (p["workload"], p["N"], p["pattern"]) == (w, N, pat) and p["S"] > 0]
        for k, sch in enumerate(sorted({p["scheme"] for p in ps}, key=A.scheme_key)):
            q = positive([p for p in ps if p["scheme"] == sch], "rel_mse", "S")
            if not q:
                continue
            S = np.array([p["S"] for p in q], float)
            y = np.array([p["rel_mse"] for p in q])
            c = color(sch, k)
            fit = next((f for f in fits if (f["workload"], f["N"], f["pattern"], f["scheme"]) == (w, N, pat, sch)),
                       None)
            label = slope_label(sch, fit)
            ax.plot(S, y, "o-", color=c, ms=3, label=label)
            if sch.startswith("gcc"):
                ax.plot(S, y[0] * (S / S[0]) ** 3, ":", color="k", lw=1.2, label="theory: S³")
        log_axes(ax, [p["S"] for p in ps])
        finish(ax, "S stragglers", "rel_mse", f"{w}, N={N}, {pat}")
    return save(fig, path, title)


def plot_redundancy(table: list[dict], path: Path, title: str = "") -> Path:
    """agreement (top row) and rel_acc (bottom row) against N/K, one column per (workload, straggler)."""
    panels = sorted({(r["workload"], r["straggler"]) for r in table})
    fig, axes = grid(2, len(panels), w=3.6)
    for j, (w, st) in enumerate(panels):
        rs = [r for r in table if (r["workload"], r["straggler"]) == (w, st)]
        for i, metric in enumerate(("agreement", "rel_acc")):
            ax = axes[i, j]
            for k, sch in enumerate(sorted({r["scheme"] for r in rs}, key=A.scheme_key)):
                q = sorted((r for r in rs if r["scheme"] == sch), key=lambda r: r["ratio"])
                ax.plot([r["ratio"] for r in q], [r[metric] for r in q], "o-", color=color(sch, k), ms=3, label=sch)
            ratios = sorted({r["ratio"] for r in rs})
            ax.set_xscale("log", base=2)
            ax.set_xticks(ratios, [f"{x:g}" for x in ratios])
            ax.xaxis.set_minor_formatter(null_formatter())
            finish(ax, "redundancy N/K", metric, f"{w}, {st}", fontsize=9, which="major")
    return save(fig, path, title)


def _has_rate(rows: list[dict]) -> bool:
    return any(len(v) >= 3 for v in _ns_per(rows).values())


def _ns_per(rows: list[dict]) -> dict[tuple, set]:
    out: dict[tuple, set] = {}
    for r in rows:
        out.setdefault((r["workload"], r["K"], r["straggler"], r["scheme"]), set()).add(r["N"])
    return out


NEEDS = ("rate needs three or more N for one straggler model, vs-S three or more S at one N, redundancy "
         "classifier rows at two or more N/K, configs fixed-count stragglers, adversarial rows with adversaries at two "
         "or more N, fraction a percentage straggler spec at one K/N for three or more N")


def detect_kinds(rows: list[dict]) -> list[str]:
    """The figure kinds the rows support: rate (three or more N for some straggler model), vs-S (three or more
    S at one N), redundancy (classifier rows at two or more N/K), configs (fixed-count rows), adversarial (rows
    with adversaries at two or more N), fraction (a percentage straggler spec at one K/N for three or more N)."""
    adv = [r for r in rows if r.get("adversary")]
    rows = [r for r in rows if not r.get("adversary")]
    kinds = []
    if _has_rate(rows):
        kinds.append("rate")
    s_per: dict[tuple, set] = {}
    for r in rows:
        if r.get("S") is not None:
            s_per.setdefault((r["workload"], r["K"], r["N"], r["pattern"], r["scheme"]), set()).add(r["S"])
    if any(len(v) >= 3 for v in s_per.values()):
        kinds.append("vs-S")
    clf = [r for r in rows if r.get("agreement") is not None]
    if len({r["N"] / r["K"] for r in clf}) >= 2:
        kinds.append("redundancy")
    if any(r.get("S") is not None for r in rows):
        kinds.append("configs")
    n_per: dict[tuple, set] = {}
    for r in adv:
        n_per.setdefault((r["workload"], r["K"], r["straggler"], r["scheme"], r["adversary"]), set()).add(r["N"])
    if any(len(v) >= 2 for v in n_per.values()):
        kinds.append("adversarial")
    if fraction.supported(rows):
        kinds.append("fraction")
    return kinds


def make_outputs(rows: list[dict], out: str | Path, prefix: str, kinds: Sequence[str] | None = None,
                 n_boot: int = 2000) -> dict[str, Any]:
    """Write figures to out/figures, their data to out/data and tables to out/tables, named `prefix-...`.

    Returns the tables computed (keyed by name) and the paths written (under "paths").
    """
    out = Path(out)
    supported = detect_kinds(rows)
    kinds = list(kinds) if kinds else supported
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"unknown plot kind(s) {', '.join(bad)}; choose from {', '.join(KINDS)}")
    if not kinds:
        raise ValueError(f"the rows support no figure or table: {NEEDS}")
    unsupported = [k for k in kinds if k not in supported]
    if unsupported:
        raise ValueError(f"the rows do not support kind(s) {', '.join(unsupported)} (they support "
                         f"{', '.join(supported) or 'none'}); {NEEDS}")
    fig_dir, data_dir, tab_dir = out / "figures", out / "data", out / "tables"
    res: dict[str, Any] = {"paths": []}
    paths = res["paths"]
    if "adversarial" in kinds:
        adv = adversarial_outputs([r for r in rows if r.get("adversary")], out, prefix, n_boot=n_boot)
        paths += adv.pop("paths")
        res.update(adv)
    rows = [r for r in rows if not r.get("adversary")]
    if "rate" in kinds:
        multi = {k for k, v in _ns_per(rows).items() if len(v) >= 3}
        rr = [r for r in rows if (r["workload"], r["K"], r["straggler"], r["scheme"]) in multi]
        pts = A.rate_points(rr)
        fits = A.rate_fits(rr, n_boot=n_boot)
        ks = sorted({r["K"] for r in rr})
        tail = A.rate_fits(rr, min_ratio=8.0, n_boot=n_boot)
        for f in tail:
            f["range"] = "N>=8K"
        for f in fits:
            f["range"] = "all"
        cmp = A.compare(pts)
        res.update(rate_points=pts, rate_fits=fits, rate_fits_tail=tail, compare=cmp)
        paths += [A.write_csv(data_dir / f"{stem(prefix, 'rate')}-points.csv", pts),
                  A.write_csv(tab_dir / f"{stem(prefix, 'rate')}-slopes.csv", fits + tail),
                  A.write_csv(tab_dir / f"{stem(prefix, 'rate')}-gcc-vs-bacc.csv", cmp)]
        for K in ks:
            suffix = "" if len(ks) == 1 else f"-K{K}"
            pk = [p for p in pts if p["K"] == K]
            fams = sorted({A.family(p) for p in pk})
            for fam in fams:
                pf = [p for p in pk if A.family(p) == fam]
                name = f"{stem(prefix, 'rate')}{'-' + fam if len(fams) > 1 else ''}{suffix}.png"
                paths.append(plot_rate(pf, [f for f in fits if f["K"] == K], fig_dir / name,
                                       title=f"rel_mse against N, K={K}, {fam} stragglers"))
    if "vs-S" in kinds:
        pts = A.vs_s_points(rows)
        keep = {(p["workload"], p["N"], p["pattern"], p["scheme"]) for p in pts}
        counts = {k: sum(1 for p in pts if (p["workload"], p["N"], p["pattern"], p["scheme"]) == k) for k in keep}
        pts = [p for p in pts if counts[(p["workload"], p["N"], p["pattern"], p["scheme"])] >= 3]
        fits = A.vs_s_fits([r for r in rows if r.get("S") is not None
                            and counts.get((r["workload"], r["N"], r["pattern"], r["scheme"]), 0) >= 3],
                           n_boot=n_boot)
        res.update(vs_s_points=pts, vs_s_fits=fits)
        paths += [A.write_csv(data_dir / f"{stem(prefix, 'vs-S')}-points.csv", pts),
                  A.write_csv(tab_dir / f"{stem(prefix, 'vs-S')}-slopes.csv", fits),
                  plot_vs_s(pts, fits, fig_dir / f"{stem(prefix, 'vs-S')}.png", title="rel_mse against S at fixed N")]
    if "redundancy" in kinds:
        tab = A.redundancy(rows)
        res["redundancy"] = tab
        paths += [A.write_csv(tab_dir / f"{stem(prefix, 'redundancy')}.csv", tab),
                  plot_redundancy(tab, fig_dir / f"{stem(prefix, 'redundancy')}.png",
                                  title="agreement and rel_acc against redundancy N/K")]
    if "configs" in kinds:
        tab = A.configs(rows)
        res["configs"] = tab
        paths.append(A.write_csv(tab_dir / f"{prefix}-configs.csv", tab))
    if "fraction" in kinds:
        frac = fraction.outputs(rows, out, prefix)
        paths += frac.pop("paths")
        res.update(frac)
    return res
