"""Instructions per job, counted by valgrind's callgrind: a figure that does not move with the host's speed.

    python benchmarks/run.py instructions                # gencc.run (GCC and uncoded) beside MinimalJob
    python benchmarks/run.py instructions --schemes gcc    # one scheme
    python benchmarks/run.py instructions --schemes gcc --per-input   # a per-input f beside HandRolledJob
    python benchmarks/run.py instructions --schemes gcc --breakdown   # also the job's ordering, encode and decode alone
    python benchmarks/run.py instructions --schemes gcc --scale       # also K=500, N=1000: per-input beside batched

Wall-clock figures on a shared VM move by 2x between runs minutes apart (docs/guides/runtime.md), so a change to
the runtime's Python work is judged here: each scheme runs `--jobs` and then 2 x `--jobs` jobs (K = 8, a trivial
batched f, the default executor, after a warm-up in which every straggler pattern's decoder is cached) in two
processes under callgrind (this checkout's src/, one BLAS thread: idle BLAS threads spin), and the difference of
their instruction counts over `--jobs` is the cost of one job, start-up and warm-up cancelled out. The floor is
bench_runtime's MinimalJob on the same inputs (the same ordering, encode and decode around one hand-off to one
thread). Needs valgrind; takes a few minutes. The counts still move with how the threads were scheduled (the GIL's
timed waits, the engine's polling control thread): by a few per cent for the GCC job, by more for the small uncoded
job and MinimalJob.

`--scale` counts bench_scale's K = 500, N = 1,000 job (GCC, wait for 900, order=False) with a per-input f and
with a batched one, and the cold decode of a new straggler pattern that the per-input job pays and the batched one
does not (its block meets one pattern, cached): the per-input job's runtime cost per task is then (per-input -
batched - cold decode) / N. Under valgrind f runs ~50x slower, so a shared thread would claim one or two tasks at a
time (`gencc.engine.threads.CHUNK_S` over a call's seconds) and give claims back after `RELEASE_S`, unlike the
uninstrumented run, whose calls of this f fill `CHUNK_MAX` claims: both are pinned in the counted process so the
count follows the real chunking, not the host's load. """

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = "instructions"
K, N, WAIT_FOR = 8, 12, 10
SCHEMES = ("gcc", "uncoded")
#: the pieces of a job's math that `--breakdown` counts alone (any runtime running the job does them)
PARTS = {"order": "ordering the inputs (gencc.order_inputs)", "encode": "encoding (code.encode)",
         "decode": "decoding (code.decode, a cached pattern)"}
WARM = 300


def child(scheme: str, jobs: int, kind: str) -> None:
    """Run `jobs` jobs of `scheme` after the warm-up (under callgrind, started by `count`)."""
    import numpy as np

    import gencc
    from gencc.runtime import LocalExecutor

    def double(X):
        return np.asarray(X) * 2.0

    double.batched = kind in ("batched", "minimal")
    rng = np.random.default_rng(1)
    inputs = [rng.normal(size=(K, 64)) for _ in range(100)]
    code, wait_for = (gencc.GCC(K, N), WAIT_FOR) if scheme == "gcc" else (gencc.Replication(K, K), None)
    from bench_runtime import HandRolledJob, MinimalJob, warm_decoders

    if scheme == "gcc":  # every straggler pattern's decoder cached, so no job in the count builds one
        warm_decoders(code, rng.normal(size=(N, 3)))
    if kind in PARTS:  # one piece of the job's math alone, on the job's inputs and straggler patterns
        from gencc.codes.ordering import order_checked

        Ys = [code.encode(x) for x in inputs]
        pats = [np.sort(rng.permutation(code.N)[:wait_for]) for _ in inputs] if wait_for else [np.arange(code.N)] * 100
        for j in range(WARM + jobs):
            x = inputs[j % len(inputs)]
            if kind == "order":
                order_checked(x)
            elif kind == "encode":
                code.encode(x)
            else:
                code.decode(Ys[j % len(Ys)][pats[j % len(pats)]], pats[j % len(pats)])
        return
    if kind == "hand":
        hand = HandRolledJob(double, code)
        for j in range(WARM + jobs):
            hand(inputs[j % len(inputs)], wait_for)
        hand.close()
        return
    if kind == "minimal":
        job = MinimalJob(double)
        for j in range(WARM + jobs):
            job(inputs[j % len(inputs)], code, wait_for)
        job.close()
        return
    with LocalExecutor(blas_threads=1) as ex:
        for j in range(WARM + jobs):
            gencc.run(double, inputs[j % len(inputs)], code, ex, wait_for=wait_for)


SCALE_K, SCALE_N, SCALE_WAIT, SCALE_DIM = 500, 1000, 900, 8


def scale_child(jobs: int, kind: str) -> None:
    """Run `jobs` K=500, N=1000 jobs after three (kind "plain" or "batched"), or `jobs` cold decodes after two
    (kind "decode"), under callgrind."""
    import numpy as np

    import gencc
    import gencc.engine.threads as threads
    import gencc.engine.workers as workers
    from gencc.runtime import LocalExecutor

    threads.CHUNK_S = workers.CHUNK_S = 10.0  # the real run's chunking (see the module docstring)
    threads.RELEASE_S = workers.RELEASE_S = 100.0

    def double(X):
        return np.asarray(X) * 2.0

    double.batched = kind == "batched"
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(SCALE_K, SCALE_DIM)) for _ in range(8)]
    code = gencc.GCC(SCALE_K, SCALE_N)
    Y = code.encode(inputs[0]) * 2.0  # E built once, as a code serving many jobs holds it
    if kind == "decode":
        for _ in range(2 + jobs):
            used = np.sort(rng.choice(SCALE_N, SCALE_WAIT, replace=False))
            code.decode(Y[used], used)
        return
    with LocalExecutor(blas_threads=1) as ex:
        for j in range(3 + jobs):
            gencc.run(double, inputs[j % len(inputs)], code, ex, wait_for=SCALE_WAIT, order=False)


def scale(jobs: int, emit: Callable[[str], None]) -> None:
    """The K=500, N=1000 table (instructions per job, and per task of the per-input job's runtime)."""
    got = {kind: per_job("scale", jobs, kind) for kind in ("plain", "batched", "decode")}
    emit(f"| K={SCALE_K}, N={SCALE_N}, wait for {SCALE_WAIT}, order=False | instructions |")
    emit("|---|---|")
    emit(f"| per-input job | {got['plain'] / 1e6:,.2f} M |")
    emit(f"| batched job | {got['batched'] / 1e6:,.2f} M |")
    emit(f"| cold decode (a new pattern) | {got['decode'] / 1e6:,.2f} M |")
    emit(f"| per-input job / batched job | {got['plain'] / got['batched']:.2f} |")
    per_task = (got["plain"] - got["batched"] - got["decode"]) / SCALE_N
    emit(f"| per task: (per-input - batched - cold decode) / N | {per_task / 1e3:,.1f} k |")
    emit()


def count(scheme: str, jobs: int, kind: str) -> int:
    """Instructions of a child process running `jobs` jobs (callgrind's total)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable, __file__,
               "--child", scheme, str(jobs), kind]
        # one BLAS thread: OpenBLAS's idle threads spin, and what they burn would be counted with the job
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"callgrind run failed ({' '.join(cmd)}):\n{out.stderr[-2000:]}")
    return int(m.group(1))


def per_job(scheme: str, jobs: int, kind: str) -> float:
    return (count(scheme, 2 * jobs, kind) - count(scheme, jobs, kind)) / jobs


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        if argv[1] == "scale":
            scale_child(int(argv[2]), argv[3])
        else:
            child(argv[1], int(argv[2]), argv[3])
        return 0
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES), help="default: both")
    ap.add_argument("--jobs", type=int, default=200, help="jobs in the shorter run (default 200)")
    kinds = ap.add_mutually_exclusive_group()
    kinds.add_argument("--per-input", action="store_true",
                       help="f taking one input at a time, beside HandRolledJob (a ThreadPoolExecutor job)")
    kinds.add_argument("--both", action="store_true", help="the batched table, then the per-input one")
    ap.add_argument("--breakdown", action="store_true",
                    help="also count the GCC job's ordering, encode and decode alone (the rest is the runtime's)")
    ap.add_argument("--scale", action="store_true",
                    help="also K=500, N=1000: a per-input job beside a batched one and a cold decode")
    ap.add_argument("--scale-jobs", type=int, default=4, help="jobs in --scale's shorter run (default 4)")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables (markdown) to this file")
    args = ap.parse_args(argv)
    for name in ("jobs", "scale_jobs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {args.out}")
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (Debian: apt-get install valgrind)")
    from measure import generated_by, machine

    print(machine(), flush=True)
    lines: list[str] = []

    def emit(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    pieces: dict[str, float] = {}  # the job's pieces do not depend on f: counted once for both tables
    for per_input in ((False, True) if args.both else (args.per_input,)):
        table(args, per_input, emit, pieces)
    if args.scale:
        scale(args.scale_jobs, emit)
    if args.out is not None:
        args.out.write_text(f"{generated_by(SUITE, argv)} Instructions per job counted by valgrind's "
                            f"callgrind (K = {K}, N = {N}, the first {WAIT_FOR}, f = X * 2 on 64 columns, BLAS at one "
                            "thread; see the script's docstring).\n\n" + "\n".join(lines) + "\n")
    return 0


def table(args: argparse.Namespace, per_input: bool, emit: Callable[[str], None], pieces: dict[str, float]) -> None:
    """One table: gencc.run against its floor for each scheme (with --breakdown, the GCC job's pieces after it)."""
    kind, floor_kind = ("plain", "hand") if per_input else ("batched", "minimal")
    fname = "per-input" if per_input else "batched"
    floor_name = "HandRolledJob" if per_input else "MinimalJob"
    emit(f"| scheme (K={K}, trivial {fname} f, default executor) | gencc.run, instructions per job | {floor_name} | "
         "ratio |")
    emit("|---|---|---|---|")
    totals = {}
    for scheme in args.schemes:
        got, floor = per_job(scheme, args.jobs, kind), per_job(scheme, args.jobs, floor_kind)
        totals[scheme] = got
        what = f"GCC, N={N}, first {WAIT_FOR}" if scheme == "gcc" else f"uncoded (Replication({K}, {K}))"
        emit(f"| {what} | {got / 1e3:,.0f} k | {floor / 1e3:,.0f} k | {got / floor:.2f} |")
    emit()
    if args.breakdown and "gcc" in totals:  # uncoded jobs are not ordered, encoded or decoded
        breakdown(args.jobs, totals["gcc"], fname, emit, pieces)


def breakdown(jobs: int, total: float, fname: str, emit: Callable[[str], None], pieces: dict[str, float]) -> None:
    """The GCC job's math counted alone (each piece in its own pair of processes), beside the whole job's count:
    what any runtime running this job does, and what is left for gencc's own."""
    emit(f"| piece of one GCC job ({fname} f) | instructions | share of the job |")
    emit("|---|---|---|")
    rest = total
    for kind, label in PARTS.items():
        got = pieces.get(kind)
        if got is None:
            got = pieces[kind] = per_job("gcc", jobs, kind)
        rest -= got
        emit(f"| {label} | {got / 1e3:,.0f} k | {got / total:.0%} |")
    emit(f"| the rest: the runtime (validation, dispatch, the calls of f, collection, result) | {rest / 1e3:,.0f} k "
         f"| {rest / total:.0%} |")
    emit()


if __name__ == "__main__":
    sys.exit(main())
