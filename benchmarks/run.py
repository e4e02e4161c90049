"""gencc's benchmark suites, one command: python benchmarks/run.py SUITE [options].

    python benchmarks/run.py codes                      # one suite, its defaults
    python benchmarks/run.py serving --duration 5       # a short serving run in virtual time (seconds)
    python benchmarks/run.py http-tail --help           # a suite's own options
    python benchmarks/run.py all --out figures.md       # codes, runtime, serving and scale in one table

Every suite prints the machine it runs on first (CPUs, load average: on a shared machine the figures move with the
load), and a table it writes (--out) starts with the command that regenerates it. The figures of codes, runtime,
serving and scale are ratios against a floor (the cheapest way to the same result, or what users run today)
measured interleaved in the same run, so read the ratios. The claim tables (accuracy, not speed) are
`gencc reproduce` presets; benchmarks/investigations/ holds scripts that each answered one question.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent

#: suite -> (the module that runs it, what it measures)
SUITES: dict[str, tuple[str, str]] = {
    "codes": ("bench_codes", "encode, decode, D_F builds, robust decode, against their floors (a minute)"),
    "runtime": ("bench_runtime", "gencc.run per job and its p99 under stragglers, against f alone (a minute)"),
    "scale": ("bench_scale", "time per job and threads held at N = 100, 1,000, 10,000 (threads backend)"),
    "serving": ("bench_serving", "coded against uncoded serving, p50 and p99, simulated (virtual time, seconds)"),
    "serving-sweep": ("serving_sweep", "every serving scheme over a load sweep: sim, real, policies, report"),
    "http-tail": ("http_tail", "`gencc serve`'s tail on an independent HTTP client: default, sweep (minutes)"),
    "serving-floor": ("serving_floor", "`gencc serve` against a minimal FastAPI app on one model (minutes)"),
    "deadlines": ("deadlines", "per scheme, the most Poisson load answered 99% inside 2x / 4x the service time "
                  "(virtual time, minutes); --frontier: p99.9 against tasks per request"),
    "deadlines-real": ("deadlines_real", "the same as deadlines --real: a real `gencc serve` per scheme under "
                       "latency targets, answers checked, CPU per request (minutes)"),
    "soak": ("soak", "a long open-loop run of a service: p99 and RSS per minute (10 minutes)"),
    "hostile-input": ("hostile_input", "hostile requests to a real `gencc serve`: status, time, health, memory"),
    "fleet": ("bench_ray_cluster", "a Ray cluster of several nodes losing one mid-stream (needs Ray)"),
    "chaos": ("chaos", "`gencc serve` on a 4-node Ray cluster under load, nodes, actors, the head lost, hostile "
              "traffic, bursts: per-minute table and recovery per fault (10 minutes; needs Ray)"),
    "upstreams": ("upstreams", "gencc in front of 12 Triton replicas against a direct client (needs .venv-triton)"),
    "gate-fleet": ("gate_fleet", "the gate's calibration over 12 loopback replicas: wall time and requests, one "
                   "call per coded task against batched (minutes)"),
    "training": ("training", "time to a target accuracy per training scheme under stragglers (needs torch)"),
    "instructions": ("instructions", "instructions per job counted by valgrind, beside the minimal job"),
}
#: the suites whose figures are ratios against a floor, run together by `all`
FIGURES = ("codes", "runtime", "serving", "scale")


def module(suite: str) -> ModuleType:
    """The suite's module, imported when the suite runs (some need torch, Ray or a server's extras)."""
    if str(HERE) not in sys.path:  # the suites import their shared helpers (measure) from this folder
        sys.path.insert(0, str(HERE))
    return importlib.import_module(SUITES[suite][0])


def parser() -> argparse.ArgumentParser:
    width = max(map(len, SUITES))
    listing = "\n".join(f"  {name:<{width}}  {line}" for name, (_, line) in SUITES.items())
    listing += f"\n  {'all':<{width}}  {', '.join(FIGURES)}, one after another in one table"
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="run.py", description=doc[0], formatter_class=argparse.RawTextHelpFormatter,
                                 usage="%(prog)s SUITE [options]",
                                 epilog=f"suites:\n{listing}\n\n" + "\n\n".join(doc[1:]))
    ap.add_argument("suite", metavar="SUITE", choices=(*SUITES, "all"), help="which suite to run (listed below)")
    ap.add_argument("options", metavar="OPTIONS", nargs="*", default=[],
                    help="the suite's options (SUITE --help lists them)")
    return ap


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def figures_parser(suite: str) -> argparse.ArgumentParser:
    """The options of the figure suites: --repeat and --out, and each suite's own."""
    names = FIGURES if suite == "all" else (suite,)
    ap = argparse.ArgumentParser(prog=f"run.py {suite}", formatter_class=argparse.RawTextHelpFormatter,
                                 description=SUITES[suite][1] if suite in SUITES else
                                 f"{', '.join(FIGURES)}, one after another in one table")
    if "codes" in names:
        ap.add_argument("--repeat", type=positive_int, default=5, help="repetitions of each timing (default 5)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table (markdown) to this file")
    for name in names:
        mod = module(name)
        mod.add_arguments(ap.add_argument_group(mod.SUITE))
    return ap


def check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every option validated before any work starts (argparse's exit 2 with one message)."""
    for name in ("columns", "jobs", "scale_jobs"):
        if getattr(args, name, 1) < 1:
            ap.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if getattr(args, "large_N", 0) < 0:
        ap.error(f"--large-N must be 0 (skip) or a worker count, got {args.large_N}")
    if not 0 < getattr(args, "base_ms", 1.0) < math.inf:
        ap.error(f"--base-ms must be a positive number of milliseconds, got {args.base_ms:g}")
    if hasattr(args, "loads"):
        module("serving").check(ap, args)
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {args.out}")


def run_figures(suite: str, argv: list[str]) -> int:
    """codes, runtime, serving, scale or all: each suite's figures against their floors, as one markdown table."""
    ap = figures_parser(suite)
    args = ap.parse_args(argv)
    check(ap, args)
    from measure import generated_by, machine, render, versions

    print(machine(), flush=True)
    figures = []
    for name in FIGURES if suite == "all" else (suite,):
        figs = module(name).run(args)
        print(render(figs), flush=True)
        figures += figs
    if args.out is not None:
        args.out.write_text(f"{generated_by(suite, argv)} {machine()} Measured with {versions()}; read the "
                            f"ratios, measured interleaved with their floors.\n\n{render(figures)}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = parser()
    suite = ap.parse_args(argv if not argv or argv[0].startswith("-") else argv[:1]).suite
    if suite == "all" or suite in FIGURES:
        return run_figures(suite, argv[1:])
    return module(suite).main(argv[1:], prog=f"run.py {suite}") or 0


if __name__ == "__main__":
    sys.exit(main())
