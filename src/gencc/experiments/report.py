"""docs/results.md and docs/generated/<preset>.md: markdown built from the tables every preset wrote.

Every table goes through `markdown.table`; every number comes from a CSV under tables/ or data/, so the report
is a pure function of those files (and of timings.csv for the "Last run" lines of results.md). Each preset's
section is also written alone to generated/<preset>.md (without the run time and the figures), for the guides
to include.
"""

from __future__ import annotations

from pathlib import Path

from . import adversarial, fraction
from . import analysis as A
from .drawing import stem
from .markdown import TIMING_PREFIX, command, table, write_generated
from .presets import PRESETS, preset_spec
from .tables import TABLES


def _ci(r: dict | None) -> str:
    return f"{r['slope']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]" if r else ""


def _rate_section(out: Path, name: str) -> list[str]:
    tab, rate = out / "tables", stem(name, "rate")
    if not (tab / f"{rate}-slopes.csv").exists():
        return []
    fits = A.read_csv(tab / f"{rate}-slopes.csv")
    pts = A.read_csv(out / "data" / f"{rate}-points.csv")
    cmp = A.read_csv(tab / f"{rate}-gcc-vs-bacc.csv") if (tab / f"{rate}-gcc-vs-bacc.csv").exists() else []
    worst = "worst" in name
    lines = ["Fitted slope of log(loss) against log N (least squares on the logs of the per-N means; 95% "
             "bootstrap interval in brackets; loss = rel_mse" + ("" if worst else ", divided by log³_{1/p} N")
             + "). Theory for GCC: -3.", ""]
    head = ["workload", "stragglers", "GCC slope (all N)", "BACC slope (all N)", "GCC slope (N ≥ 8K)",
            "BACC slope (N ≥ 8K)", "GCC ≤ -3 (all N)", "points", "exact worst case" if worst else "decodable"]
    rows = []
    for (w, st), fs in A.group(fits, ("workload", "straggler")).items():
        get = {(f["scheme"], f["range"]): f for f in fs}
        g, b = get.get(("gcc", "all")), get.get(("bacc", "all"))
        gp = [p for p in pts if p["workload"] == w and p["straggler"] == st and p["scheme"] == "gcc"]
        if worst:
            ex = [p["exact"] for p in gp if p.get("exact") is not None]
            ex_txt = f"{sum(1 for e in ex if e == 1.0)}/{len(ex)} N values" if ex else ""
        else:
            ex_txt = f"{min(p['decodable'] for p in gp):.3f} (min over N)" if gp else ""
        rows.append([w, st, _ci(g), _ci(b), _ci(get.get(("gcc", "N>=8K"))), _ci(get.get(("bacc", "N>=8K"))),
                     A.fmt(g["slope"] <= -3.0) if g else "", str(g["points"] if g else ""), ex_txt])
    lines += table(head, rows)
    if cmp:
        Ns = sorted({c["N"] for c in cmp})
        below = sum(1 for c in cmp if c["a_at_or_below_b"])
        big = [c for c in cmp if c["ratio_NK"] >= 8]
        tenth = sum(1 for c in big if c["ratio"] <= 0.1)
        lines += ["", f"GCC's mean rel_mse at or below BACC's at {below} of {len(cmp)} grid points; at most a tenth "
                  f"of BACC's at {tenth} of {len(big)} grid points with N ≥ 8K. Ratio GCC / BACC of mean rel_mse "
                  "per N:", ""]
        lines += table(["workload", "stragglers", *[f"N={n}" for n in Ns]],
                       ([w, st, *[A.fmt({c["N"]: c["ratio"] for c in cs}.get(n), 2) for n in Ns]]
                        for (w, st), cs in A.group(cmp, ("workload", "straggler")).items()))
    return lines


def _vs_s_section(out: Path, name: str) -> list[str]:
    path = out / "tables" / f"{stem(name, 'vs-S')}-slopes.csv"
    if not path.exists():
        return []
    fits = A.read_csv(path)
    lines = ["Fitted slope of log rel_mse against log S at fixed N, 95% bootstrap interval in brackets. The GCC "
             "bound O(S^3 N^-3) grows like S^3 at fixed N; a slope is a description of the measured growth, not a "
             "test of the bound (which caps the loss, not its growth rate).", ""]
    rows = []
    for (w, N, pat), fs in A.group(fits, ("workload", "N", "pattern")).items():
        get = {f["scheme"]: f for f in fs}
        rows.append([w, str(N), pat, _ci(get.get("gcc")), _ci(get.get("bacc"))])
    lines += table(["workload", "N", "pattern", "GCC slope", "BACC slope"], rows)
    pts_path = out / "data" / f"{stem(name, 'vs-S')}-points.csv"
    if pts_path.exists():
        pts = A.read_csv(pts_path)
        Ss = sorted({p["S"] for p in pts})
        rows = []
        for (w,), ps in A.group(pts, ("workload",)).items():
            by = {(p["scheme"], p["S"]): p["rel_mse"] for p in ps}
            rows.append([w, *[f"{A.fmt(by.get(('gcc', s)), 2)} / {A.fmt(by.get(('bacc', s)), 2)}" for s in Ss]])
        lines += ["", "Mean rel_mse per S (GCC / BACC):", "", *table(["workload", *[f"S={s}" for s in Ss]], rows)]
    return lines


def _redundancy_section(out: Path, name: str) -> list[str]:
    path = out / "tables" / f"{stem(name, 'redundancy')}.csv"
    if not path.exists():
        return []
    tab = A.read_csv(path)
    schemes = sorted({r["scheme"] for r in tab}, key=A.scheme_key)
    head = ["workload", "stragglers", "N/K", "N", "K", "mean F", *[f"{s} agreement" for s in schemes],
            *[f"{s} RelAcc" for s in schemes]]
    rows = []
    for (w, st, ratio), rs in A.group(tab, ("workload", "straggler", "ratio")).items():
        by, r0 = {r["scheme"]: r for r in rs}, rs[0]
        rows.append([w, st, A.fmt(ratio), str(r0["N"]), str(r0["K"]), A.fmt(r0["F"]),
                     *[A.fmt(by[s]["agreement"]) if s in by else "" for s in schemes],
                     *[A.fmt(by[s]["rel_acc"]) if s in by else "" for s in schemes]])
    return ["Agreement with argmax f and RelAcc (mean over draws and seeds), schemes at equal N:", "",
            *table(head, rows)]


def _configs_section(out: Path, name: str) -> list[str]:
    path = out / "tables" / f"{name}-configs.csv"
    if name != "redundancy" or not path.exists():
        return []
    tab = A.read_csv(path)
    schemes = sorted({c.rsplit("_", 2)[0] for r in tab for c in r if c.endswith("_rmse")}, key=A.scheme_key)
    head = ["workload", "N", "K", "|F|", "stragglers", *[f"{s} RMSE" for s in schemes],
            *[f"{s} RelAcc" for s in schemes]]
    rows = ([r["workload"], str(r["N"]), str(r["K"]), str(r["F"]), r["straggler"],
             *[A.fmt(r.get(f"{s}_rmse")) for s in schemes], *[A.fmt(r.get(f"{s}_rel_acc")) for s in schemes]]
            for r in tab)
    return ["RMSE of the decoded logits and RelAcc per (N, K, |F|) configuration:", "", *table(head, rows)]


def _points_list(cs: list[dict]) -> str:
    return ", ".join(f"{c['workload']} {c['straggler']} N={c['N']} (x{c['ratio']:.3g})" for c in cs)


def _claims(out: Path) -> list[str]:
    """The headline checks, measured: GCC's fitted slopes against -3, and GCC against BACC per grid point."""
    lines: list[str] = []
    for name in ("rate-worst", "rate-bernoulli"):
        rate = stem(name, "rate")
        sp, cp = out / "tables" / f"{rate}-slopes.csv", out / "tables" / f"{rate}-gcc-vs-bacc.csv"
        if not sp.exists():
            continue
        gcc = [f for f in A.read_csv(sp) if f["range"] == "all" and f["scheme"] == "gcc"]
        ok = [f for f in gcc if f["slope"] <= -3.0]
        what = "rel_mse / log³_{1/p} N" if "bernoulli" in name else "rel_mse"
        lines.append(f"- {name}: GCC's fitted slope of log {what} against log N (all N) is at or below -3 in "
                     f"{len(ok)} of {len(gcc)} (workload, stragglers) cases"
                     + ("" if len(ok) == len(gcc) else "; not in: " + ", ".join(
                         f"{f['workload']} {f['straggler']} ({f['slope']:.2f})" for f in gcc if f not in ok)) + ".")
        if cp.exists():
            cmp = A.read_csv(cp)
            worse = [c for c in cmp if not c["a_at_or_below_b"]]
            big = [c for c in cmp if c["ratio_NK"] >= 8]
            not_tenth = [c for c in big if not c["ratio"] <= 0.1]
            lines.append(f"- {name}: GCC's mean rel_mse is at or below BACC's at {len(cmp) - len(worse)} of {len(cmp)} "
                         "grid points" + (f"; above it at {_points_list(worse)}" if worse else "")
                         + f". For N ≥ 8K it is at most a tenth of BACC's at {len(big) - len(not_tenth)} of {len(big)}"
                         + (f"; not at {_points_list(not_tenth)}" if not_tenth else "") + ".")
    return ["## Claims, as measured", "", *lines, ""] if lines else []


def _grid_line(name: str) -> str:
    spec = preset_spec(name)
    return (f"Command: `{command(name, jobs=2)}`. Default grid: workloads "
            f"{', '.join(spec.workloads)}; schemes {', '.join(spec.schemes)}; "
            + (f"K {list(spec.K)}; " if spec.K else "")
            + (f"N = K x {list(spec.ratios)}" if spec.ratios else f"N {list(spec.N)}")
            + (f"; K = N x {list(spec.K_frac)}" if spec.K_frac else "")
            + f"; stragglers {', '.join(spec.stragglers)}"
            + (f"; adversaries {', '.join(spec.adversaries)}" if spec.adversaries else "")
            + f"; seeds {len(spec.seeds)}; trials {spec.trials}.")


def _sweep_tables(out: Path, name: str) -> list[str]:
    lines: list[str] = []
    for section in (_rate_section, _vs_s_section, _redundancy_section, _configs_section, adversarial.section,
                    fraction.section):
        sec = section(out, name)
        if sec:
            lines += [*sec, ""]
    return lines


def write_results(out: str | Path) -> Path:
    """out/results.md from the tables of every preset present under `out`, and out/generated/<preset>.md."""
    out = Path(out)
    tpath = out / "data" / "timings.csv"
    timings = {r["preset"]: r for r in A.read_csv(tpath)} if tpath.exists() else {}
    lines = ["# Results", "", "Generated by `gencc reproduce` from the sweeps in `data/sweeps/`; do not edit by hand. "
             "Every number below is measured; figures are in `figures/`, the data behind them in `data/`, and the "
             "tables in `tables/`.", "", *_claims(out)]
    for name, preset in PRESETS.items():
        if not any((out / "tables").glob(f"{name}*.csv")):  # the sweep CSV itself may be untracked
            continue
        lines += [f"## {name}", "", preset.description, "", _grid_line(name)]
        t = timings.get(name)
        if t:
            lines.append(f"{TIMING_PREFIX}{t['seconds']} s with --procs {t['jobs']} ({t['points_run']} of "
                         f"{t['points']} grid points computed, the rest resumed from the CSV)"
                         + (", with grid overrides." if t.get("overridden") else "."))
        lines.append("")
        for fig in sorted((out / "figures").glob(f"{name}*.png")):
            lines += [f"![{fig.stem}](figures/{fig.name})", ""]
        body = _sweep_tables(out, name)
        lines += body
        write_generated(out, name, [preset.description, "", _grid_line(name), "", *body], jobs=2)
    for name, module in TABLES.items():
        body = module.section(out)
        if body:
            lines += [f"## {name}", "", *body, ""]
            write_generated(out, name, body)
    path = out / "results.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
