"""The reproducible experiments behind docs/: named sweep grids, and `reproduce` to rerun them end to end.

Each preset sweeps into docs/data/sweeps/<preset>.csv (resuming), writes its figures and tables, records its
run time in docs/data/timings.csv and regenerates docs/results.md from every preset's tables found in docs/.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from . import analysis as A
from .plots import stem
from .sweep import SweepSpec, read_rows, run_sweep

RATE_WORKLOADS = ("xsinx", "tanh-mlp", "digits-cnn")
RATE_RATIOS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class Preset:
    """A named grid (SweepSpec keyword arguments), the figure kinds it feeds, and what it is meant to show."""

    name: str
    description: str
    spec: dict[str, Any]
    kinds: tuple[str, ...]


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("rate-worst",
               "Worst-case stragglers at fixed S (S = 2 and S = 5), K = 10, N from 2K to 64K: rel_mse against N "
               "and its fitted slope (theory for GCC: O(S^3 N^-3)). One worst-case search per input draw (seed).",
               dict(workloads=RATE_WORKLOADS, schemes=("gcc", "bacc"), K=(10,), ratios=RATE_RATIOS,
                    stragglers=("worst:2", "worst:5"), seeds=tuple(range(6)), trials=1),
               ("rate", "configs")),
        Preset("rate-bernoulli",
               "Bernoulli stragglers, p in {0.1, 0.3}, K = 10, N from 2K to 64K: mean rel_mse over straggler draws, "
               "divided by log^3_{1/p}(N), against N (theory for GCC: O(log^3_{1/p}(N) N^-3)).",
               dict(workloads=RATE_WORKLOADS, schemes=("gcc", "bacc"), K=(10,), ratios=RATE_RATIOS,
                    stragglers=("bernoulli:0.1", "bernoulli:0.3"), seeds=tuple(range(5)), trials=40),
               ("rate",)),
        Preset("vs-S",
               "rel_mse against the number of worst-case stragglers S at fixed N = 160 (K = 10); theory: O(S^3).",
               dict(workloads=RATE_WORKLOADS, schemes=("gcc", "bacc"), K=(10,), N=(160,),
                    stragglers=tuple(f"worst:{s}" for s in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)),
                    seeds=tuple(range(5)), trials=1),
               ("vs-S",)),
        Preset("redundancy",
               "Classifiers: agreement with f and RelAcc at redundancy N/K in {1.25, 1.5, 2, 4} (K = 20) with S at "
               "10% and 25% of N (uniformly random stragglers, mean over draws), GCC, BACC and replication at "
               "equal N.",
               dict(workloads=("digits-cnn", "mnist1d-cnn"), schemes=("gcc", "bacc", "replication"), K=(20,),
                    ratios=(1.25, 1.5, 2, 4), stragglers=("random:10%", "random:25%"), seeds=tuple(range(10)),
                    trials=20),
               ("redundancy", "configs")),
    )
}
#: presets that are not sweeps (each module has reproduce(out, overrides, progress) and section(out))
TABLE_PRESETS = ("low-redundancy",)
PRESET_NAMES = (*PRESETS, *TABLE_PRESETS, "all")
_LIST_FIELDS = {"workloads": str, "schemes": str, "K": int, "N": int, "ratios": float, "stragglers": str, "seeds": int}


def parse_list(text: str, kind: type) -> tuple:
    """`a,b,c` as a tuple of `kind`; for ints also `lo:hi` ranges (hi excluded)."""
    out: list = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        if kind is int and ":" in part:
            lo, hi = part.split(":")
            out.extend(range(int(lo), int(hi)))
        else:
            out.append(kind(part))
    return tuple(out)


def apply_overrides(spec: dict[str, Any], overrides: Sequence[str] | dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `spec` with `key=value` overrides (lists comma-separated; `trials` an integer)."""
    spec = dict(spec)
    if not overrides:
        return spec
    items = overrides.items() if isinstance(overrides, dict) else (o.split("=", 1) for o in overrides)
    names = {f.name for f in fields(SweepSpec)}
    for key, val in items:
        key = key.strip()
        if key not in names or key == "opts":
            raise ValueError(f"cannot override {key!r}; choose from {', '.join(sorted(names - {'opts'}))}")
        if key == "trials":
            spec[key] = int(val)
        elif isinstance(val, str):
            spec[key] = parse_list(val, _LIST_FIELDS[key])
        else:
            spec[key] = tuple(val)
    return spec


def preset_spec(name: str, overrides: Sequence[str] | dict[str, Any] | None = None) -> SweepSpec:
    """The SweepSpec of preset `name` with overrides applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")
    return SweepSpec(**apply_overrides(PRESETS[name].spec, overrides))


def reproduce(name: str, out: str | Path = "docs", overrides: Sequence[str] | dict[str, Any] | None = None,
              jobs: int = 1, progress: bool = True, n_boot: int = 2000) -> dict[str, Any]:
    """Run preset `name` (or "all") into `out`: sweep (resuming), figures, tables, timings and results.md."""
    from .plots import make_outputs

    if name == "all":
        res = {}
        for n in PRESETS:
            res[n] = reproduce(n, out, overrides, jobs, progress, n_boot)
        for n in TABLE_PRESETS:  # their grids are fixed tables: --set applies to the sweep presets only
            res[n] = reproduce(n, out, None, jobs, progress, n_boot)
        return res
    if name in TABLE_PRESETS:
        from . import lowred

        t0 = time.perf_counter()
        res = lowred.reproduce(out, overrides, progress)
        _record_timing(Path(out), name, time.perf_counter() - t0, res["points"], res["points"], 1, bool(overrides))
        write_results(out)
        return res
    out = Path(out)
    spec = preset_spec(name, overrides)
    t0 = time.perf_counter()
    sweep_path = out / "data" / "sweeps" / f"{name}.csv"
    result = run_sweep(spec, sweep_path, jobs=jobs, progress=progress)
    keys = {pt.key for pt in spec.points()}
    rows = [r for r in read_rows(sweep_path) if (r["workload"], r["scheme"], r["K"], r["N"], r["straggler"],
                                                 r["seed"]) in keys]
    outputs = make_outputs(rows, out, name, PRESETS[name].kinds, n_boot=n_boot)
    seconds = time.perf_counter() - t0
    _record_timing(out, name, seconds, result.total, result.ran, jobs, bool(overrides))
    write_results(out)
    outputs.update(seconds=seconds, sweep=result, rows=len(rows))
    return outputs


def _record_timing(out: Path, name: str, seconds: float, points: int, ran: int, jobs: int, overridden: bool) -> None:
    path = out / "data" / "timings.csv"
    rows = [r for r in A.read_csv(path) if r["preset"] != name] if path.exists() else []
    rows.append({"preset": name, "seconds": round(seconds, 1), "points": points, "points_run": ran, "jobs": jobs,
                 "overridden": overridden})
    order = {n: i for i, n in enumerate(PRESETS)}
    A.write_csv(path, sorted(rows, key=lambda r: order.get(r["preset"], 99)))


# ----- docs/results.md ---------------------------------------------------------------------------------------
def _ci(r: dict | None) -> str:
    if not r:
        return ""
    return f"{r['slope']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"


def _rate_section(out: Path, name: str) -> list[str]:
    tab = out / "tables"
    lines: list[str] = []
    rate = stem(name, "rate")
    slopes_path = tab / f"{rate}-slopes.csv"
    if not slopes_path.exists():
        return lines
    fits = A.read_csv(slopes_path)
    pts = A.read_csv(out / "data" / f"{rate}-points.csv")
    cmp_path = tab / f"{rate}-gcc-vs-bacc.csv"
    cmp = A.read_csv(cmp_path) if cmp_path.exists() else []
    lines += ["Fitted slope of log(loss) against log N (least squares on the logs of the per-N means; 95% "
              "bootstrap interval in brackets; loss = rel_mse" + (", divided by log³_{1/p} N" if "bernoulli" in name
                                                                   else "") + "). Theory for GCC: -3.", ""]
    head = ["workload", "stragglers", "GCC slope (all N)", "BACC slope (all N)", "GCC slope (N ≥ 8K)",
            "BACC slope (N ≥ 8K)", "GCC ≤ -3 (all N)", "points"]
    extra = "exact worst case" if "worst" in name else "decodable"
    head.append(extra)
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for (w, st), fs in A.group(fits, ("workload", "straggler")).items():
        get = {(f["scheme"], f["range"]): f for f in fs}
        g, b = get.get(("gcc", "all")), get.get(("bacc", "all"))
        gp = [p for p in pts if p["workload"] == w and p["straggler"] == st and p["scheme"] == "gcc"]
        if "worst" in name:
            ex = [p["exact"] for p in gp if p.get("exact") is not None]
            ex_txt = f"{sum(1 for e in ex if e == 1.0)}/{len(ex)} N values" if ex else ""
        else:
            ex_txt = f"{min(p['decodable'] for p in gp):.3f} (min over N)" if gp else ""
        lines.append("| " + " | ".join([w, st, _ci(g), _ci(b), _ci(get.get(("gcc", "N>=8K"))),
                                         _ci(get.get(("bacc", "N>=8K"))),
                                         A.fmt(g["slope"] <= -3.0) if g else "", str(g["points"] if g else ""),
                                         ex_txt]) + " |")
    if cmp:
        Ns = sorted({c["N"] for c in cmp})
        below = sum(1 for c in cmp if c["a_at_or_below_b"])
        big = [c for c in cmp if c["ratio_NK"] >= 8]
        tenth = sum(1 for c in big if c["ratio"] <= 0.1)
        lines += ["", f"GCC's mean rel_mse at or below BACC's at {below} of {len(cmp)} grid points; at most a tenth "
                  f"of BACC's at {tenth} of {len(big)} grid points with N ≥ 8K. Ratio GCC / BACC of mean rel_mse "
                  "per N:", ""]
        head = ["workload", "stragglers", *[f"N={n}" for n in Ns]]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for (w, st), cs in A.group(cmp, ("workload", "straggler")).items():
            by = {c["N"]: c["ratio"] for c in cs}
            lines.append("| " + " | ".join([w, st, *[A.fmt(by.get(n), 2) for n in Ns]]) + " |")
    return lines


def _vs_s_section(out: Path, name: str) -> list[str]:
    path = out / "tables" / f"{stem(name, 'vs-S')}-slopes.csv"
    if not path.exists():
        return []
    fits = A.read_csv(path)
    lines = ["Fitted slope of log rel_mse against log S at fixed N, 95% bootstrap interval in brackets. The GCC "
             "bound O(S^3 N^-3) grows like S^3 at fixed N; a slope is a description of the measured growth, not a "
             "test of the bound (which caps the loss, not its growth rate).", "",
             "| workload | N | pattern | GCC slope | BACC slope |", "|---|---|---|---|---|"]
    for (w, N, pat), fs in A.group(fits, ("workload", "N", "pattern")).items():
        get = {f["scheme"]: f for f in fs}
        lines.append(f"| {w} | {N} | {pat} | {_ci(get.get('gcc'))} | {_ci(get.get('bacc'))} |")
    pts_path = out / "data" / f"{stem(name, 'vs-S')}-points.csv"
    if pts_path.exists():
        pts = A.read_csv(pts_path)
        lines += ["", "Mean rel_mse per S (GCC / BACC):", ""]
        Ss = sorted({p["S"] for p in pts})
        head = ["workload", *[f"S={s}" for s in Ss]]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for (w,), ps in A.group(pts, ("workload",)).items():
            by = {(p["scheme"], p["S"]): p["rel_mse"] for p in ps}
            lines.append("| " + " | ".join([w, *[f"{A.fmt(by.get(('gcc', s)), 2)} / {A.fmt(by.get(('bacc', s)), 2)}"
                                                  for s in Ss]]) + " |")
    return lines


def _redundancy_section(out: Path, name: str) -> list[str]:
    path = out / "tables" / f"{stem(name, 'redundancy')}.csv"
    if not path.exists():
        return []
    tab = A.read_csv(path)
    schemes = sorted({r["scheme"] for r in tab}, key=A.scheme_key)
    head = ["workload", "stragglers", "N/K", "N", "K", "mean F", *[f"{s} agreement" for s in schemes],
            *[f"{s} RelAcc" for s in schemes]]
    lines = ["Agreement with argmax f and RelAcc (mean over draws and seeds), schemes at equal N:", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for (w, st, ratio), rs in A.group(tab, ("workload", "straggler", "ratio")).items():
        by = {r["scheme"]: r for r in rs}
        r0 = rs[0]
        lines.append("| " + " | ".join([w, st, A.fmt(ratio), str(r0["N"]), str(r0["K"]), A.fmt(r0["F"]),
                                         *[A.fmt(by[s]["agreement"]) if s in by else "" for s in schemes],
                                         *[A.fmt(by[s]["rel_acc"]) if s in by else "" for s in schemes]]) + " |")
    return lines


def _claims(out: Path) -> list[str]:
    """The headline checks, measured: GCC's fitted slopes against -3, and GCC against BACC per grid point."""
    lines: list[str] = []
    for name in ("rate-worst", "rate-bernoulli"):
        rate = stem(name, "rate")
        sp, cp = out / "tables" / f"{rate}-slopes.csv", out / "tables" / f"{rate}-gcc-vs-bacc.csv"
        if not sp.exists():
            continue
        fits = [f for f in A.read_csv(sp) if f["range"] == "all"]
        gcc = [f for f in fits if f["scheme"] == "gcc"]
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
                         "grid points" + ("" if not worse else "; above it at " + ", ".join(
                             f"{c['workload']} {c['straggler']} N={c['N']} (x{c['ratio']:.3g})" for c in worse))
                         + f". For N ≥ 8K it is at most a tenth of BACC's at {len(big) - len(not_tenth)} of {len(big)}"
                         + ("" if not not_tenth else "; not at " + ", ".join(
                             f"{c['workload']} {c['straggler']} N={c['N']} (x{c['ratio']:.3g})" for c in not_tenth))
                         + ".")
    return ["## Claims, as measured", "", *lines, ""] if lines else []


def _configs_section(out: Path, name: str) -> list[str]:
    path = out / "tables" / f"{name}-configs.csv"
    if name != "redundancy" or not path.exists():
        return []
    tab = A.read_csv(path)
    schemes = sorted({c.rsplit("_", 2)[0] for r in tab for c in r if c.endswith("_rmse")}, key=A.scheme_key)
    head = ["workload", "N", "K", "|F|", "stragglers", *[f"{s} RMSE" for s in schemes],
            *[f"{s} RelAcc" for s in schemes]]
    lines = ["RMSE of the decoded logits and RelAcc per (N, K, |F|) configuration:", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in tab:
        lines.append("| " + " | ".join([r["workload"], str(r["N"]), str(r["K"]), str(r["F"]), r["straggler"],
                                         *[A.fmt(r.get(f"{s}_rmse")) for s in schemes],
                                         *[A.fmt(r.get(f"{s}_rel_acc")) for s in schemes]]) + " |")
    return lines


def write_results(out: str | Path) -> Path:
    """docs/results.md from the tables of every preset present under `out`."""
    out = Path(out)
    timings = {r["preset"]: r for r in A.read_csv(out / "data" / "timings.csv")} \
        if (out / "data" / "timings.csv").exists() else {}
    lines = ["# Results", "", "Generated by `gencc reproduce` from the sweeps in `data/sweeps/`; do not edit by hand. "
             "Every number below is measured; figures are in `figures/`, the data behind them in `data/`, and the "
             "tables in `tables/`.", ""]
    lines += _claims(out)
    for name, preset in PRESETS.items():
        if not (out / "data" / "sweeps" / f"{name}.csv").exists():
            continue
        spec = preset_spec(name)
        lines += [f"## {name}", "", preset.description, "",
                  f"Command: `gencc reproduce --preset {name} --jobs 2`. Default grid: workloads "
                  f"{', '.join(spec.workloads)}; schemes {', '.join(spec.schemes)}; K {list(spec.K)}; "
                  + (f"N = K x {list(spec.ratios)}" if spec.ratios else f"N {list(spec.N)}")
                  + f"; stragglers {', '.join(spec.stragglers)}; seeds {len(spec.seeds)}; trials {spec.trials}."]
        t = timings.get(name)
        if t:
            lines.append(f"Last run: {t['seconds']} s with --jobs {t['jobs']} ({t['points_run']} of {t['points']} "
                         "grid points computed, the rest resumed from the CSV)"
                         + (", with grid overrides." if t.get("overridden") else "."))
        lines.append("")
        for fig in sorted((out / "figures").glob(f"{name}*.png")):
            lines += [f"![{fig.stem}](figures/{fig.name})", ""]
        for section in (_rate_section, _vs_s_section, _redundancy_section, _configs_section):
            sec = section(out, name)
            if sec:
                lines += [*sec, ""]
    from . import lowred

    lines += lowred.section(out)
    path = out / "results.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
