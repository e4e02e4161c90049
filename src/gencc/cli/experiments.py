"""CLI commands of the experiments layer: `gencc sweep`, `gencc plot`, `gencc reproduce`.

Registered in gencc/cli.py. Heavy imports (matplotlib, rich, the workloads) happen inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..codes.schemes import schemes as front_schemes
from .options import ShowProgress, code_options, integer, out_dir, out_file, refuse, reported


def _list(text: str, kind: type, option: str) -> tuple:
    from ..experiments.presets import parse_list

    try:
        return parse_list(text, kind)
    except ValueError as err:
        raise refuse(option, str(err)) from None


#: the schemes `gencc sweep --scheme` takes (every code of the registry)
SWEEP_CHOICES = ", ".join(front_schemes("sweeps"))


def _check_schemes(names: tuple, option: str) -> None:
    """Refuse a scheme the sweeps do not simulate (the message lists those they do)."""
    from ..experiments.schemes import check_scheme

    for name in names:
        try:
            check_scheme(name)
        except ValueError as e:
            raise refuse(option, str(e)) from None


def sweep(
    workloads: Annotated[str, typer.Option("--workload", "-w", help="comma-separated workload names")],
    schemes: Annotated[str, typer.Option("--scheme", help=f"comma-separated schemes: {SWEEP_CHOICES}")] = "gcc,bacc",
    K: Annotated[str, typer.Option("--K", help="comma-separated numbers of inputs")] = "10",
    N: Annotated[str, typer.Option("--workers", metavar="LIST", help="comma-separated numbers of workers N")] = "",
    ratios: Annotated[str, typer.Option(help="comma-separated N/K ratios (N = round(ratio K)), besides "
                                             "--workers")] = "",
    k_frac: Annotated[str, typer.Option("--k-frac", help="comma-separated loads K/N in (0, 1]: K = round(frac N) "
                                                         "for each --workers N, besides --K (--K '': none)")] = "",
    stragglers: Annotated[str, typer.Option(help="comma-separated: worst:S, worst-agreement:S, random:S, block:S, "
                                                 "random:10%, bernoulli:p")] = "worst:2",
    seeds: Annotated[str, typer.Option(help="comma-separated seeds or lo:hi ranges (each draws new inputs)")] = "0",
    trials: Annotated[int, typer.Option(help="straggler draws per grid point (the worst case runs once)",
                                        callback=integer(at_least=1))] = 20,
    out: Annotated[Path, typer.Option("--out", "-o", help="tidy CSV, appended to and resumed (its folder must "
                                                          "exist)", callback=out_file)] = Path("sweep.csv"),
    procs: Annotated[int, typer.Option("--procs", "-j", help="processes (results do not depend on it)",
                                       callback=integer(at_least=1))] = 1,
    opt: Annotated[list[str] | None, typer.Option("--opt", metavar="CODE.KEY=VALUE",
                                                  help="an option of a scheme's code, e.g. gcc.lam_dec=0; "
                                                       "repeatable")] = None,
    adversaries: Annotated[str, typer.Option(metavar="LIST", help="comma-separated model:A or model:N^a[:scale] "
                                             "(docs: robust decoding guide), decoded by robust_decode")] = "",
    progress: ShowProgress = True,
) -> None:
    """Run a grid of simulations into a tidy CSV; rerunning skips the grid points already in it. Grid points
    with N < K, with S >= N stragglers, or with adversaries and worst-case stragglers are left out (and
    listed)."""
    from ..experiments.sweep import SweepSpec, read_rows, run_sweep

    if not N and not ratios:
        raise refuse("--workers", "give the worker counts with --workers and/or --ratios")
    fracs = _list(k_frac, float, "--k-frac")
    chosen = _list(schemes, str, "--scheme")
    _check_schemes(chosen, "--scheme")
    opts = code_options(opt or [], chosen, "sweeps")
    try:
        spec = SweepSpec(workloads=_list(workloads, str, "--workload"), schemes=chosen,
                         K=_list(K, int, "--K"), N=_list(N, int, "--workers"),
                         ratios=_list(ratios, float, "--ratios"), stragglers=_list(stragglers, str, "--stragglers"),
                         seeds=_list(seeds, int, "--seeds"), trials=trials, opts=opts,
                         adversaries=_list(adversaries, str, "--adversaries"), K_frac=fracs)
    except ValueError as e:
        raise refuse("--k-frac", str(e)) from None
    check_grid(spec)
    if out.exists():  # a CSV to resume must be a sweep's: refused here, before any point runs
        try:
            read_rows(out)
        except ValueError as e:
            raise refuse("--out", str(e)) from None
    res = run_sweep(spec, out, jobs=procs, progress=progress)
    for why in res.dropped:
        typer.echo(f"left out {why}", err=True)
    typer.echo(f"{res.total} grid points: {res.skipped} already in {out}, {res.ran} run now, "
               f"{res.rows_written} rows written")


#: the option of `gencc sweep` each grid field comes from
_SWEEP_OPTIONS = {"workloads": "--workload", "schemes": "--scheme", "K": "--K", "N": "--workers", "ratios": "--ratios",
                  "stragglers": "--stragglers", "seeds": "--seeds", "adversaries": "--adversaries", "opts": "--opt",
                  "trials": "--trials", "K_frac": "--k-frac"}


def check_grid(spec: Any, options: dict[str, str] | None = None) -> None:
    """The library's check of a sweep grid (`SweepSpec.check`: it runs no simulation), its error reported as the
    usage error of the option the field came from (`options`; default: `gencc sweep`'s)."""
    try:
        spec.check()
    except ValueError as e:
        raise reported(e, {**_SWEEP_OPTIONS, **(options or {})}, _SWEEP_OPTIONS["schemes"]) from None


def plot(
    csv: Annotated[list[Path], typer.Argument(metavar="CSV", hidden=True, show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="writes figures/, data/, tables/ under it (its parent "
                                                          "folder must exist)", callback=out_dir)] = Path("."),
    prefix: Annotated[str, typer.Option(help="file name prefix of everything written")] = "sweep",
    kind: Annotated[list[str] | None, typer.Option(metavar="KIND",
                                                   help="rate, vs-S, redundancy, configs, adversarial or fraction, "
                                                        "repeatable (default: all the data supports)")] = None,
) -> None:
    """From one or more CSV files that `gencc sweep` wrote: figures (PNG) and the CSV data behind them, rel_mse
    against N with fitted slopes and theory lines, rel_mse against S, agreement and RelAcc against N/K, and the
    RMSE / RelAcc configuration table."""
    from ..experiments.plots import KINDS, NEEDS, detect_kinds, make_outputs
    from ..experiments.sweep import read_rows

    if not prefix.strip() or any(c in prefix for c in "/\\") or prefix.startswith("."):
        raise refuse("--prefix", f"the prefix starts file names: a non-empty name without / or \\ that does not "
                                 f"start with '.', got {prefix!r}")
    bad = [k for k in kind or () if k not in KINDS]
    if bad:
        raise refuse("--kind", f"unknown plot kind(s) {', '.join(bad)}; choose from {', '.join(KINDS)}")
    for path in csv:
        if not path.is_file():
            what = "is a folder, not a sweep CSV" if path.is_dir() else "does not exist (no such file)"
            raise typer.BadParameter(f"{path} {what}", param_hint="'CSV...'")
    rows = [r for path in csv for r in read_rows(path)]
    if not rows:
        raise typer.BadParameter(f"no rows in {', '.join(map(str, csv))}", param_hint="'CSV...'")
    supported = detect_kinds(rows)
    if not (kind or supported):
        raise typer.BadParameter(f"the rows support no figure or table: {NEEDS}", param_hint="'CSV...'")
    unsupported = [k for k in kind or () if k not in supported]
    if unsupported:
        raise refuse("--kind", f"the rows do not support kind(s) {', '.join(unsupported)} (they support "
                               f"{', '.join(supported) or 'none'}); {NEEDS}")
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
                                             "fixed-fraction (sweeps); gcc-defaults, parm, robust, low-redundancy, "
                                             "noisy, privacy (tables); or all")] = "all",
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to (re)generate (the repository's: docs; its "
                                                          "parent folder must exist)", callback=out_dir)]
    = Path("."),
    procs: Annotated[int, typer.Option("--procs", "-j", help="processes (results do not depend on it)",
                                       callback=integer(at_least=1))] = 1,
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE",
                                                   help="override a grid field, e.g. seeds=0:2 or workloads=xsinx "
                                                        "(repeatable)")] = None,
    check: Annotated[bool, typer.Option("--check", help="rebuild the preset (all: the cheap ones) from scratch in "
                                                        "a temporary folder and compare with --out; exit 1 if "
                                                        "they differ")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Regenerate the figures, tables and results.md of a preset (resuming its sweep), or check them."""
    from ..experiments.presets import PRESET_NAMES
    from ..experiments.reproduce import reproduce as run

    if preset not in PRESET_NAMES:
        raise refuse("--preset", f"unknown preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}")
    if check and not (out / "results.md").is_file():
        raise refuse("--out", f"no results.md in {out}: pass the docs folder to check, e.g. --out docs")
    _check_overrides(preset, set_ or [], check)
    if check:
        _check(preset, out, set_, procs, progress)
        return
    res = run(preset, out, set_ or None, jobs=procs, progress=progress)
    for name, r in ({preset: res} if preset != "all" else res).items():
        typer.echo(f"{name}: {r['seconds']:.1f} s, {r['rows']} rows")
    typer.echo(f"wrote {out / 'results.md'}")


def _check_overrides(preset: str, overrides: list[str], check: bool) -> None:
    """Refuse bad --set values, and the grid of every preset that will run, before any of them runs."""
    from ..experiments.presets import PRESETS, TABLE_PRESETS, preset_spec
    from ..experiments.staleness import CHEAP
    from ..experiments.tables import TABLES, low_redundancy
    from ..experiments.tables.options import parse_overrides

    if preset == "all":
        names = list(CHEAP) if check else [*PRESETS, *TABLE_PRESETS]
    else:
        names = [preset]
    every = {key: "--set" for key in _SWEEP_OPTIONS}
    for name in names:
        try:
            if name in TABLE_PRESETS:
                # with preset all, the table presets run with their own grids (--set applies to sweeps only)
                mine = overrides if preset == name else None
                table = TABLES[name]
                if table is low_redundancy:
                    low_redundancy.preset_args(mine)
                else:
                    parse_overrides(name, mine, table.OPTIONS)
                continue
            spec = preset_spec(name, overrides)
        except ValueError as e:
            raise refuse("--set", str(e)) from None
        try:
            check_grid(spec, every)
        except typer.BadParameter as e:
            raise refuse("--set", f"preset {name}: {e.message}") from None


def _check(preset: str, out: Path, set_: list[str] | None, jobs: int, progress: bool) -> None:
    from ..experiments import analysis as A
    from ..experiments.staleness import check

    res = check(out, None if preset == "all" else [preset], set_ or None, jobs=jobs, progress=progress)
    typer.echo(f"rebuilt {', '.join(res.checked)} from scratch in {res.seconds:.0f} s and compared with {out}")
    if res.not_checked:
        tpath = out / "data" / "timings.csv"
        secs = {r["preset"]: r["seconds"] for r in A.read_csv(tpath)} if tpath.exists() else {}
        for name in res.not_checked:
            typer.echo(f"not rechecked: {name} (last run {secs.get(name, '?')} s; check it with "
                       f"`gencc reproduce --check --preset {name} --out {out}`)")
    for name, moved in res.models.items():
        which = ", ".join(f"{m} {a[:10]} committed, {b[:10]} here" for m, (a, b) in moved.items())
        typer.echo(f"trained models differ from those {name}'s figures were built with ({which}; another "
                   "processor's kernels round differently): its trained workloads' figures were compared for their "
                   "shape and text, not their values")
    if res.ok:
        typer.echo("up to date")
        return
    for rel, why in res.differ.items():
        typer.echo(f"differs: {out / rel}: {why}")
    stale = [n for n in res.checked if any(Path(rel).name.startswith(n) for rel in res.differ)] or res.checked
    cmd = " && ".join(f"rm -f {out}/data/sweeps/{n}.csv && gencc reproduce --preset {n} --out {out} --procs 2"
                      for n in stale)
    typer.echo(f"{out} is stale; regenerate from scratch with: {cmd}")
    raise typer.Exit(1)
