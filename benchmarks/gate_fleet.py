"""The gate's calibration over a fleet of remote replicas: its wall time and the requests it sends, with the model
evaluated one task at a time against in batches (the same calibration, side by side in one run).

`gencc serve --upstream ...` with a coded scheme and the gate on calibrates the gate's threshold before it sends any
decode: the dispatcher in virtual time on the training inputs (`gencc.serving.calibrate_gate`), every coded task
a call of the model, i.e. a request to a replica. This script starts W Open Inference Protocol replicas on
loopback (tests/engine/oip_replica.py: a real HTTP server each, in this process), whose model is the upstreams
benchmark's `classify` (16 -> 10) after sleeping LATENCY_MS per request whatever its batch (`--cost request`:
a model on an accelerator, where a batch of 8 costs about what one input costs) or per input (`--cost input`: the
upstreams benchmark's replicas, where batching saves nothing), reads the fleet as `gencc serve` does
(`gencc.engine.remote.check_fleet`, max batch 8) and runs the calibration of the default scheme (sgcc, K = 8 over
the W replicas, `CALIBRATION_RUNS` runs of 60 virtual seconds on 2,000 training inputs):

- unbatched: one call per coded task, the runs one after the other (`calibrate_gate(..., batch=False)`);
- batched: the runs side by side, each call taking every task running at that moment in every run, split by
  the fleet into requests of at most the replicas' max batch (`batch=True`, the default).

Reported: wall time, the requests the replicas answered and the inputs in them, and whether the two calibrations
chose the same threshold and frontier (equal up to float rounding: numpy's matrix product rounds a row alone
and a row in a batch differently in the last bits; tests/serving/test_gate_batch.py checks exact equality on a
model whose rows are computed alone). The machine is shared and noisy: the wall times move by some percent from
run to run, the request counts do not.

    python benchmarks/run.py gate-fleet --out docs/generated/gate-fleet.md     # about 8 minutes
    python benchmarks/run.py gate-fleet --duration 10 --runs 2                 # a quick look (a minute)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "engine"))

from upstreams import classify, inputs  # noqa: E402

from gencc.engine.remote import check_fleet  # noqa: E402
from gencc.serving import CALIBRATION_RUNS, make_dispatcher  # noqa: E402
from gencc.serving._policy.gate import calibrate_gate  # noqa: E402

SUITE = "gate-fleet"
LATENCY_MS, MAX_BATCH = 50.0, 8


def replica_model(latency_ms: float, per_input: bool) -> Any:
    """`classify` after sleeping latency_ms per request (per input with `per_input`)."""

    def f(X: Any) -> np.ndarray:
        time.sleep(latency_ms / 1000 * (len(X) if per_input else 1))
        return classify(X)

    return f


def measure(a: argparse.Namespace) -> list[dict]:
    import oip_replica

    model = replica_model(a.latency_ms, a.cost == "input")
    reps = [oip_replica.Replica(model, name="m", in_shape=(16,), out_shape=(10,), max_batch=MAX_BATCH)
            for _ in range(a.workers)]
    try:
        fleet = check_fleet([r.url for r in reps])
        f = fleet.model()
        X = inputs(a.inputs)

        def make(g: Any) -> Any:
            return lambda e: make_dispatcher("sgcc", e, K=a.K, gate=g, seed=a.seed)

        rows = []
        for batch in a.order:
            n0, b0 = sum(r.calls for r in reps), sum(sum(r.batches) for r in reps)
            t0 = time.perf_counter()
            cal = calibrate_gate(make, {"f": f}, X, workers=a.workers, duration=a.duration, seed=a.seed,
                                 runs=a.runs, batch=batch)
            wall = time.perf_counter() - t0
            rows.append({"batch": batch, "wall_s": wall, "requests": sum(r.calls for r in reps) - n0,
                         "inputs": sum(sum(r.batches) for r in reps) - b0, "cal": cal})
            print(f"batch={batch}: {wall:.1f} s, {rows[-1]['requests']} requests, {rows[-1]['inputs']} inputs, "
                  f"threshold {cal.threshold:.4g} on {cal.candidates} degraded requests", flush=True)
        return rows
    finally:
        for r in reps:
            r.kill()


def same(a: Any, b: Any) -> str:
    """Whether two calibrations agree: "identical", "equal up to rounding" (relative 1e-9), or "differ"."""
    if a.threshold == b.threshold and a.frontier == b.frontier and a.draws == b.draws:
        return "identical"
    fa, fb = np.asarray(a.frontier, dtype=float), np.asarray(b.frontier, dtype=float)
    close = fa.shape == fb.shape and np.allclose(fa, fb, rtol=1e-9, atol=1e-12)
    thr = (a.threshold == b.threshold) or np.isclose(a.threshold, b.threshold, rtol=1e-9)
    return "equal up to rounding" if close and thr else "differ"


def table(a: argparse.Namespace, rows: list[dict], argv: list[str]) -> str:
    from measure import generated_by, machine

    by = {r["batch"]: r for r in rows}
    u, b = by[False], by[True]
    out = [f"{generated_by(SUITE, argv)} W = {a.workers} loopback replicas, {a.latency_ms:g} ms per "
           f"{a.cost}, max batch {MAX_BATCH}; sgcc K = {a.K}; {a.runs} runs of {a.duration:g} virtual s on "
           f"{a.inputs} training inputs. {machine()}", "",
           "| calibration | wall time (s) | requests to the replicas | inputs in them | threshold | "
           "degraded requests judged |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in (("one call per task (before)", u), ("batched (now)", b)):
        out.append(f"| {name} | {r['wall_s']:.1f} | {r['requests']:,} | {r['inputs']:,} | "
                   f"{r['cal'].threshold:.3g} | {r['cal'].candidates:,} |")
    out.append(f"| ratio, before / now | {u['wall_s'] / b['wall_s']:.1f}x | {u['requests'] / b['requests']:.1f}x | "
               f"{u['inputs'] / b['inputs']:.2f}x | {same(u['cal'], b['cal'])} | |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    from measure import machine

    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", type=int, default=12, help="replicas (default 12)")
    ap.add_argument("--K", type=int, default=8, help="requests per coded group (default 8)")
    ap.add_argument("--latency-ms", type=float, default=LATENCY_MS, help="the model's sleep (default 50)")
    ap.add_argument("--cost", choices=("request", "input"), default="request",
                    help="the sleep per request, whatever its batch (default), or per input")
    ap.add_argument("--runs", type=int, default=CALIBRATION_RUNS, help="simulated runs pooled (default 6)")
    ap.add_argument("--duration", type=float, default=60.0, help="virtual seconds per run (default 60)")
    ap.add_argument("--inputs", type=int, default=2000, help="training inputs (default 2000)")
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--batched-first", action="store_true", help="run the batched calibration first")
    ap.add_argument("--out", type=Path, help="write the table here (markdown)")
    a = ap.parse_args(argv)
    if a.workers < a.K + 1 or not math.isfinite(a.latency_ms) or a.latency_ms < 0:
        ap.error("need --workers > --K and a non-negative --latency-ms")
    if a.runs < 1 or not a.duration > 0 or a.inputs < 1:
        ap.error("--runs and --inputs must be positive integers and --duration a positive number of seconds")
    if a.out is not None and (a.out.is_dir() or not a.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {a.out}")
    print(machine(), flush=True)
    a.order = (True, False) if a.batched_first else (False, True)
    text = table(a, measure(a), argv)
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
