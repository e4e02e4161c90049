"""gencc's benchmark suite: every figure printed beside its floor, measured side by side in the same run.

    python benchmarks/run.py codes      # encode, decode, D_F builds, robust decode (about a minute)
    python benchmarks/run.py runtime    # gencc.run per-job overhead and p99 under stragglers (about a minute)
    python benchmarks/run.py serving    # coded vs uncoded serving in the simulator (virtual time, seconds)
    python benchmarks/run.py all [--out figures.md]

Each figure is a ratio against its floor (the cheapest way to the same result, or what users run today); see
each suite's module (bench_codes.py, bench_runtime.py, bench_serving.py) for what is measured. Timings are best
of --repeat (codes) or medians and percentiles over jobs (runtime); the machine may be shared, so read the ratios,
which are measured interleaved. The claim tables (accuracy, not speed) are `gencc reproduce` presets.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the suites' modules, when run from elsewhere

import bench_codes  # noqa: E402
import bench_runtime  # noqa: E402
import bench_serving  # noqa: E402
from measure import render  # noqa: E402

SUITES = {"codes": bench_codes, "runtime": bench_runtime, "serving": bench_serving}


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("suite", choices=(*SUITES, "all"), help="which suite to run")
    ap.add_argument("--repeat", type=positive_int, default=5, help="repetitions of each timing (default 5)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table (markdown) to this file")
    for mod in SUITES.values():
        mod.add_arguments(ap.add_argument_group(mod.SUITE))
    return ap


def check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every option validated before any work starts (argparse's exit 2 with one message)."""
    for name in ("columns", "jobs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.large_N < 0:
        ap.error(f"--large-N must be 0 (skip) or a worker count, got {args.large_N}")
    if not 0 < args.base_ms < math.inf:
        ap.error(f"--base-ms must be a positive number of milliseconds, got {args.base_ms:g}")
    bench_serving.check(ap, args)
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {args.out}")


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    check(ap, args)
    figures = []
    for name in SUITES if args.suite == "all" else (args.suite,):
        figs = SUITES[name].run(args)
        print(render(figs), flush=True)
        figures += figs
    if args.out is not None:
        args.out.write_text(render(figures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
