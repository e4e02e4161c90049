"""CLI commands of the experiments layer: `gencc sweep`, `gencc plot`, `gencc reproduce`.

Registered in gencc/cli.py. Heavy imports (matplotlib, rich, the workloads) happen inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def _opts(items: list[str]) -> dict[str, dict]:
    """`gcc.lam_dec=0` style options -> {"gcc": {"lam_dec": 0.0}} (numbers parsed, else strings)."""
    out: dict[str, dict] = {}
    for item in items:
        try:
            lhs, val = item.split("=", 1)
            scheme, key = lhs.split(".", 1)
        except ValueError:
            raise typer.BadParameter(f"code options look like scheme.key=value, got {item!r}") from None
        parsed: object = val
        for kind in (int, float):
            try:
                parsed = kind(val)
                break
            except ValueError:
                pass
        out.setdefault(scheme, {})[key] = parsed
    return out


def sweep(
    workloads: Annotated[str, typer.Option("--workloads", "-w", help="comma-separated workload names")],
    schemes: Annotated[str, typer.Option(help="comma-separated schemes: gcc, bacc, lcc, replication, "
                                              "sgcc")] = "gcc,bacc",
    K: Annotated[str, typer.Option("--K", help="comma-separated numbers of inputs")] = "10",
    N: Annotated[str, typer.Option("--N", help="comma-separated numbers of workers")] = "",
    ratios: Annotated[str, typer.Option(help="comma-separated N/K ratios (N = round(ratio K)), besides --N")] = "",
    stragglers: Annotated[str, typer.Option(help="comma-separated: worst:S, random:S, block:S, random:10%, "
                                                 "bernoulli:p")] = "worst:2",
    seeds: Annotated[str, typer.Option(help="comma-separated seeds or lo:hi ranges (each draws new inputs)")] = "0",
    trials: Annotated[int, typer.Option(help="straggler draws per grid point (the worst case runs once)")] = 20,
    out: Annotated[Path, typer.Option("--out", "-o", help="tidy CSV, appended to and resumed")] = Path("sweep.csv"),
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="processes (results do not depend on it)")] = 1,
    opt: Annotated[list[str] | None, typer.Option("--opt", help="code option scheme.key=value, repeatable "
                                                                "(e.g. gcc.lam_dec=0)")] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Run a grid of simulations into a tidy CSV; rerunning skips the grid points already in it."""
    from .presets import parse_list
    from .sweep import SweepSpec, run_sweep

    if not N and not ratios:
        raise typer.BadParameter("give the worker counts with --N and/or --ratios")
    spec = SweepSpec(workloads=parse_list(workloads, str), schemes=parse_list(schemes, str), K=parse_list(K, int),
                     N=parse_list(N, int), ratios=parse_list(ratios, float),
                     stragglers=parse_list(stragglers, str), seeds=parse_list(seeds, int), trials=trials,
                     opts=_opts(opt or []))
    try:
        res = run_sweep(spec, out, jobs=jobs, progress=progress)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    typer.echo(f"{res.total} grid points: {res.skipped} already in {out}, {res.ran} run now, "
               f"{res.rows_written} rows written")


def plot(
    csv: Annotated[list[Path], typer.Argument(help="sweep CSV(s)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="writes figures/, data/, tables/ under it")] = Path("docs"),
    prefix: Annotated[str, typer.Option(help="file name prefix of everything written")] = "sweep",
    kind: Annotated[list[str] | None, typer.Option(help="rate, vs-S, redundancy or configs, repeatable "
                                                        "(default: all the data supports)")] = None,
) -> None:
    """Figures (PNG) and the CSV data behind them: rel_mse against N with fitted slopes and theory lines,
    rel_mse against S, agreement and RelAcc against N/K, and the RMSE / RelAcc configuration table."""
    from .plots import make_outputs
    from .sweep import read_rows

    rows = [r for path in csv for r in read_rows(path)]
    if not rows:
        raise typer.BadParameter(f"no rows in {', '.join(map(str, csv))}")
    res = make_outputs(rows, out, prefix, kind or None)
    for p in res["paths"]:
        typer.echo(f"wrote {p}")
    for f in res.get("rate_fits", []):
        typer.echo(f"{f['workload']} {f['straggler']} {f['scheme']}: slope {f['slope']:.2f} "
                   f"[{f['lo']:.2f}, {f['hi']:.2f}] over N {f['N_min']}..{f['N_max']}")


def reproduce(
    preset: Annotated[str, typer.Option(help="rate-worst, rate-bernoulli, vs-S, redundancy, low-redundancy "
                                             "or all")] = "all",
    out: Annotated[Path, typer.Option("--out", "-o", help="docs folder to (re)generate")] = Path("docs"),
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="processes (results do not depend on it)")] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a grid field, key=value, e.g. "
                                                                 "seeds=0:2 or workloads=xsinx (repeatable)")] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Regenerate the figures, tables and docs/results.md of a preset (resuming its sweep)."""
    from .presets import PRESET_NAMES
    from .presets import reproduce as run

    if preset not in PRESET_NAMES:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}")
    try:
        res = run(preset, out, set_ or None, jobs=jobs, progress=progress)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    for name, r in ({preset: res} if preset != "all" else res).items():
        typer.echo(f"{name}: {r['seconds']:.1f} s, {r['rows']} rows")
    typer.echo(f"wrote {out / 'results.md'}")
