"""Sweeps with adversaries (workers returning wrong but finite results): specs, the rate against N, its figure.

A spec names an adversary model of gencc.adversaries and how many workers lie: `signflip:2` (A = 2 at every
N) or `signflip:N^0.5` (A = round(N^a), at least 1), with an optional scale in standard deviations of the
honest results (`offset:N^0.25:2`). The adversarial paper of the GCC line (arXiv 2502.08058) bounds the error
of a smoothing-spline scheme with A = O(N^a) adversaries by O(N^{(6/5)(a-1)}); `points` and `fits` put the
measured rel_mse and its fitted slope against N next to that rate (a fixed A is a = 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..faults.adversaries import MODELS, Adversary, get_adversary
from . import analysis as A
from .drawing import color, finish, grid, log_axes, positive, save, slope_label, stem
from .fit import fit_slope
from .markdown import table


def parse_adversary(spec: str, N: int) -> Adversary:
    """An adversary model from its text `model:A[:scale]` or `model:N^a[:scale]` (A = round(N^a), at least 1;
    0 <= a < 1), e.g. `signflip:2`, `signflip:N^0.5`, `offset:N^0.25:2`. Models: gencc.adversaries.MODELS."""
    parts = str(spec).strip().split(":")
    hint = (f"bad adversary spec {spec!r}; use model:A or model:N^a with an optional :scale, e.g. signflip:2, "
            f"signflip:N^0.5, offset:N^0.25:2 (models: {', '.join(MODELS)})")
    if len(parts) not in (2, 3) or parts[0] not in MODELS:
        raise ValueError(hint)
    try:
        a = exponent(spec)
        if a is not None:
            if not 0 <= a < 1:
                raise ValueError
            count = max(1, int(round(N**a)))
        else:
            count = int(parts[1])
        scale = float(parts[2]) if len(parts) == 3 else None
        return get_adversary(parts[0], count, scale)
    except ValueError:
        raise ValueError(hint) from None


def exponent(spec: str) -> float | None:
    """The a of `model:N^a`; None for a fixed count."""
    count = str(spec).split(":")[1].replace(" ", "") if ":" in str(spec) else ""
    return float(count[2:]) if count[:2] in ("N^", "n^") else None


def theory_slope(spec: str) -> float:
    """(6/5)(a - 1), the rate exponent of arXiv 2502.08058 for A = O(N^a) adversaries (a = 0 for a fixed A)."""
    return 1.2 * ((exponent(spec) or 0.0) - 1.0)


def points(rows: list[dict]) -> list[dict]:
    """Per (workload, scheme, K, straggler, adversary, N): A, mean and 10-90% spread of rel_mse, the mean with
    the adversaries treated as stragglers (the best possible), recall, honest workers flagged per draw."""
    out = []
    keys = ("workload", "scheme", "K", "straggler", "adversary", "N")
    for (w, sch, K, st, adv, N), rs in A.group(rows, keys).items():
        v = A.values(rs, "rel_mse")
        rec = A.values(rs, "recall")
        out.append({
            "workload": w, "scheme": sch, "K": K, "straggler": st, "adversary": adv, "a": exponent(adv), "N": N,
            "A": rs[0]["A"], "records": len(rs), "decodable": float(np.mean([bool(r["decodable"]) for r in rs])),
            "rel_mse": A.stat(v, np.mean), "rel_mse_q10": A.stat(v, lambda x: np.quantile(x, 0.1)),
            "rel_mse_q90": A.stat(v, lambda x: np.quantile(x, 0.9)),
            "rel_mse_excluded": A.stat(A.values(rs, "rel_mse_excluded"), np.mean),
            "recall": A.stat(rec, np.mean), "false_alarms": A.stat(A.values(rs, "false_alarms"), np.mean),
        })
    return out


def fits(rows: list[dict], n_boot: int = 2000) -> list[dict]:
    """Slope of log mean rel_mse against log N per (workload, scheme, K, straggler, adversary) with a 95%
    bootstrap interval, beside the theory (6/5)(a-1); also the slope with the adversaries excluded."""
    out = []
    for (w, sch, K, st, adv), rs in A.group(rows, ("workload", "scheme", "K", "straggler", "adversary")).items():
        ok = [r for r in rs if r["decodable"] and r.get("rel_mse") is not None]
        if len({r["N"] for r in ok}) < 2:
            continue
        x = np.array([r["N"] for r in ok], dtype=float)
        fit = fit_slope(x, np.array([r["rel_mse"] for r in ok], dtype=float), n_boot=n_boot)
        ex = [r.get("rel_mse_excluded") for r in ok]
        ex_fit = None
        if all(e is not None and np.isfinite(e) for e in ex):
            ex_fit = fit_slope(x, np.array(ex, dtype=float), n_boot=n_boot)
        out.append({
            "workload": w, "scheme": sch, "K": K, "straggler": st, "adversary": adv, "a": exponent(adv),
            "N_min": int(x.min()), "N_max": int(x.max()), "points": fit.n_points, "records": fit.n_records,
            "slope": fit.slope, "lo": fit.lo, "hi": fit.hi, "intercept": fit.intercept, "bootstrap": fit.method,
            "theory": theory_slope(adv), "slope_excluded": ex_fit.slope if ex_fit else None,
        })
    return out


def plot(pts: list[dict], fts: list[dict], path: Path, title: str = "") -> Path:
    """Mean rel_mse against N, log-log, one line per adversary spec with its fitted slope, the best possible
    (adversaries excluded) as crosses, and the theory slope (6/5)(a-1) through the first point."""
    panels = sorted({(p["workload"], p["scheme"], p["straggler"]) for p in pts})
    fig, axes = grid(1, len(panels), w=5.0, h=3.8)
    for j, (w, sch, st) in enumerate(panels):
        ax = axes[0, j]
        ps = [p for p in pts if (p["workload"], p["scheme"], p["straggler"]) == (w, sch, st)]
        for k, adv in enumerate(sorted({p["adversary"] for p in ps})):
            q = positive([p for p in ps if p["adversary"] == adv], "rel_mse", "N")
            if not q:
                continue
            N = np.array([p["N"] for p in q], float)
            y = np.array([p["rel_mse"] for p in q])
            c = color("", k)
            fit = next((f for f in fts if (f["workload"], f["scheme"], f["straggler"], f["adversary"])
                        == (w, sch, st, adv)), None)
            label = slope_label(adv, fit)
            # means only: most draws decode exactly (rel_mse ~ 1e-30), so quantile bars span 20 decades
            ax.plot(N, y, "o-", color=c, ms=4, lw=1.2, label=label)
            if fit:
                ax.plot(N, np.exp(fit["intercept"]) * N ** fit["slope"], "--", color=c, lw=1)
            ax.plot(N, y[0] * (N / N[0]) ** theory_slope(adv), ":", color=c, lw=1.2,
                    label=f"theory (6/5)(a-1) = {theory_slope(adv):.2f}")
            ex = np.array([p["rel_mse_excluded"] for p in q], float)
            if np.all(np.isfinite(ex) & (ex > 0)):
                ax.plot(N, ex, "x", color=c, alpha=0.5, ms=5, label=f"{adv}: adversaries as stragglers")
        log_axes(ax, [p["N"] for p in ps])
        finish(ax, "N workers", "rel_mse", f"{w}, {sch}, {st}", fontsize=9)
    return save(fig, path, title)


def outputs(rows: list[dict], out: Path, prefix: str, n_boot: int = 2000) -> dict[str, Any]:
    """The points CSV (data/), the slopes table (tables/) and the figure (figures/) of adversarial rows."""
    pts, fts = points(rows), fits(rows, n_boot=n_boot)
    name = stem(prefix, "adversarial")
    paths = [A.write_csv(out / "data" / f"{name}-points.csv", pts),
             A.write_csv(out / "tables" / f"{name}-slopes.csv", fts),
             plot(pts, fts, out / "figures" / f"{name}.png", title="rel_mse against N with A adversaries")]
    return {"adversarial_points": pts, "adversarial_fits": fts, "paths": paths}


def section(out: Path, name: str) -> list[str]:
    """results.md lines for the adversarial tables of preset `name` (none when it wrote none)."""
    tpath = out / "tables" / f"{stem(name, 'adversarial')}-slopes.csv"
    if not tpath.exists():
        return []
    fts = A.read_csv(tpath)
    pts = A.read_csv(out / "data" / f"{stem(name, 'adversarial')}-points.csv")
    lines = ["rel_mse of the robust decode (`code.robust_decode`) against N with A adversaries, fitted slope of "
             "log mean rel_mse against log N (95% bootstrap interval in brackets) next to the rate "
             "(6/5)(a-1) of arXiv 2502.08058 for A = O(N^a); 'excluded': the decode with the adversaries treated "
             "as stragglers (the best possible).", ""]
    lines += table(["workload", "scheme", "stragglers", "adversaries", "slope", "theory (6/5)(a-1)",
                    "slope, excluded", "N"],
                   ([f["workload"], f["scheme"], f["straggler"], f["adversary"],
                     f"{f['slope']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}]", f"{f['theory']:.2f}",
                     A.fmt(f["slope_excluded"]), f"{f['N_min']}..{f['N_max']}"] for f in fts))
    lines += ["", *table(["adversaries", "N", "A", "rel_mse", "excluded", "recall", "honest flagged / draw",
                          "decodable"],
                         ([p["adversary"], str(p["N"]), str(p["A"]), A.fmt(p["rel_mse"]),
                           A.fmt(p["rel_mse_excluded"]), A.fmt(p["recall"]), A.fmt(p["false_alarms"]),
                           A.fmt(p["decodable"])] for p in pts))]
    return lines
