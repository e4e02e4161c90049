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


def _list(text: str, kind: type, option: str) -> tuple:
    from .presets import parse_list

    try:
        return parse_list(text, kind)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint=option) from None


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
    trials: Annotated[int, typer.Option(min=1, help="straggler draws per grid point (the worst case runs once)")] = 20,
    out: Annotated[Path, typer.Option("--out", "-o", help="tidy CSV, appended to and resumed")] = Path("sweep.csv"),
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="processes (results do not depend on it)")] = 1,
    opt: Annotated[list[str] | None, typer.Option("--opt", help="code option scheme.key=value, repeatable "
                                                                "(e.g. gcc.lam_dec=0)")] = None,
    adversaries: Annotated[str, typer.Option(help="comma-separated adversary models, model:A or model:N^a (A = "
                                                  "round(N^a)) with an optional :scale in sd, e.g. signflip:2,"
                                                  "offset:N^0.5:2; models: random, signflip, noise, offset, bump, "
                                                  "stealth, honest. Results are decoded by robust_decode")] = "",
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Run a grid of simulations into a tidy CSV; rerunning skips the grid points already in it. Grid points
    with N < K, with S >= N stragglers, or with adversaries and worst-case stragglers are left out (and
    listed)."""
    from .sweep import SweepSpec, run_sweep

    if not N and not ratios:
        raise typer.BadParameter("give the worker counts with --N and/or --ratios")
    spec = SweepSpec(workloads=_list(workloads, str, "--workloads"), schemes=_list(schemes, str, "--schemes"),
                     K=_list(K, int, "--K"), N=_list(N, int, "--N"), ratios=_list(ratios, float, "--ratios"),
                     stragglers=_list(stragglers, str, "--stragglers"), seeds=_list(seeds, int, "--seeds"),
                     trials=trials, opts=_opts(opt or []), adversaries=_list(adversaries, str, "--adversaries"))
    stray = sorted(set(spec.opts) - set(spec.schemes))
    if stray:
        raise typer.BadParameter(f"options for {', '.join(stray)}, which is not in --schemes {schemes}",
                                 param_hint="--opt")
    res = run_sweep(spec, out, jobs=jobs, progress=progress)
    for why in res.dropped:
        typer.echo(f"left out {why}", err=True)
    typer.echo(f"{res.total} grid points: {res.skipped} already in {out}, {res.ran} run now, "
               f"{res.rows_written} rows written")


def plot(
    csv: Annotated[list[Path], typer.Argument(help="sweep CSV(s)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="writes figures/, data/, tables/ under it")] = Path("."),
    prefix: Annotated[str, typer.Option(help="file name prefix of everything written")] = "sweep",
    kind: Annotated[list[str] | None, typer.Option(help="rate, vs-S, redundancy, configs or adversarial, repeatable "
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
    for f in res.get("adversarial_fits", []):
        typer.echo(f"{f['workload']} {f['straggler']} {f['scheme']} adversaries {f['adversary']}: slope "
                   f"{f['slope']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}] over N {f['N_min']}..{f['N_max']}, theory "
                   f"(6/5)(a-1) = {f['theory']:.2f}")


def reproduce(
    preset: Annotated[str, typer.Option(help="rate-worst, rate-bernoulli, vs-S, redundancy, adversarial, "
                                             "low-redundancy or all")] = "all",
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to (re)generate (the repository's: docs)")]
    = Path("."),
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="processes (results do not depend on it)")] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a grid field, key=value, e.g. "
                                                                 "seeds=0:2 or workloads=xsinx (repeatable)")] = None,
    check: Annotated[bool, typer.Option("--check", help="rebuild the preset (all: the cheap ones) from scratch in "
                                                        "a temporary folder and compare with --out; exit 1 if "
                                                        "they differ")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Regenerate the figures, tables and results.md of a preset (resuming its sweep), or check them."""
    from .presets import PRESET_NAMES
    from .reproduce import reproduce as run

    if preset not in PRESET_NAMES:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}",
                                 param_hint="--preset")
    if check:
        _check(preset, out, set_, jobs, progress)
        return
    res = run(preset, out, set_ or None, jobs=jobs, progress=progress)
    for name, r in ({preset: res} if preset != "all" else res).items():
        typer.echo(f"{name}: {r['seconds']:.1f} s, {r['rows']} rows")
    typer.echo(f"wrote {out / 'results.md'}")


def _check(preset: str, out: Path, set_: list[str] | None, jobs: int, progress: bool) -> None:
    from . import analysis as A
    from .staleness import check

    res = check(out, None if preset == "all" else [preset], set_ or None, jobs=jobs, progress=progress)
    typer.echo(f"rebuilt {', '.join(res.checked)} from scratch in {res.seconds:.0f} s and compared with {out}")
    if res.not_checked:
        tpath = out / "data" / "timings.csv"
        secs = {r["preset"]: r["seconds"] for r in A.read_csv(tpath)} if tpath.exists() else {}
        for name in res.not_checked:
            typer.echo(f"not rechecked: {name} (last run {secs.get(name, '?')} s; check it with "
                       f"`gencc reproduce --check --preset {name} --out {out}`)")
    if res.ok:
        typer.echo("up to date")
        return
    for rel, why in res.differ.items():
        typer.echo(f"differs: {out / rel}: {why}")
    stale = [n for n in res.checked if any(Path(rel).name.startswith(n) for rel in res.differ)] or res.checked
    cmd = " && ".join(f"rm -f {out}/data/sweeps/{n}.csv && gencc reproduce --preset {n} --out {out} --jobs 2"
                      for n in stale)
    typer.echo(f"{out} is stale; regenerate from scratch with: {cmd}")
    raise typer.Exit(1)
