"""Ray on several nodes, one lost mid-stream: a stream of coded jobs on a local multi-node cluster
(`gencc.engine.ray.cluster.LocalCluster`: a head and --nodes worker nodes, inside a loopback-only network namespace),
--actors actors spread over the worker nodes (Ray's SPREAD strategy), and one worker node killed, with every
process on it, while a job runs.

    python benchmarks/run.py fleet                      # 3 worker nodes, 48 actors, 60 jobs
    python benchmarks/run.py fleet --out docs/generated/ray-cluster.md

Each job (one every --interval seconds at most) is `gencc.run` of f(x) = 2x + 1 (per input) under LCC with
K = N / 6 and N = --actors, waiting for N minus the most actors any one node holds (so the loss of any one
node leaves enough), order=False. Reported: the placement of the actors over the nodes before the loss and
after the stream (the replacements go to the nodes left), the jobs answered (decoded; the largest error
against f, relative to f's largest output), the actors re-created (counted once the replacements are up),
the median job time before the loss and after it, the worst job, and the most threads the master process
held (sampled during the stream: they do not grow with the actors). Outside a loopback-only namespace the
script re-runs itself inside one (`gencc.engine.ray.namespace`), so Ray never binds a routable address.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

import numpy as np


def f(x: np.ndarray) -> np.ndarray:
    """The function the jobs compute, one input at a time."""
    return 2.0 * np.asarray(x) + 1.0


SUITE = "fleet"


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawTextHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--nodes", type=int, default=3, help="worker nodes beside the head (default 3)")
    ap.add_argument("--actors", type=int, default=48, help="actors, one per coded worker (default 48)")
    ap.add_argument("--jobs", type=int, default=60, help="jobs in the stream (default 60)")
    ap.add_argument("--kill-at", type=int, default=20, help="the job during which a node is killed (default 20)")
    ap.add_argument("--interval", type=float, default=0.1,
                    help="seconds from one job's start to the next one's, at least (default 0.1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a job may take (default 60)")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables (markdown) to this file")
    return ap


def check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every option validated before any work starts (argparse's exit 2 with one message)."""
    if args.nodes < 2:
        ap.error(f"--nodes must be at least 2 (one is killed), got {args.nodes}")
    if args.actors < 2 * args.nodes:
        ap.error(f"--actors must be at least 2 per worker node ({2 * args.nodes}), got {args.actors}")
    if args.jobs < 2:
        ap.error(f"--jobs must be at least 2, got {args.jobs}")
    if not 1 <= args.kill_at < args.jobs:
        ap.error(f"--kill-at must be a job index from 1 to --jobs - 1 ({args.jobs - 1}), got {args.kill_at}")
    if not 0 <= args.interval < 60:
        ap.error(f"--interval must be from 0 to 60 seconds, got {args.interval:g}")
    if not args.timeout > 0:
        ap.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {args.out}")


def measure(args: argparse.Namespace) -> dict:
    """Run the stream on a fresh local cluster and return its figures."""
    import ray

    import gencc
    from gencc.engine.ray.cluster import NODE_RESOURCE, LocalCluster
    from gencc.runtime import RayExecutor, run

    t0 = time.perf_counter()
    N = args.actors
    out: dict = {"nodes": args.nodes, "actors": N, "jobs": args.jobs, "kill_at": args.kill_at,
                 "interval": args.interval}
    with LocalCluster(args.nodes) as cluster:
        if __name__ != "__main__":  # imported: f goes to the actors by value (a script's __main__ always does)
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ex = RayExecutor(num_actors=N, address=cluster.address, ready_timeout=600,
                         actor_options={"scheduling_strategy": "SPREAD", "resources": {NODE_RESOURCE: 1}})
        try:
            ex.start(f, N)
            out["startup_s"] = time.perf_counter() - t0
            backend, ids = ex._backend, cluster.node_ids()
            before = collections.Counter(backend.placement())
            out["placement_before"] = [before.get(i, 0) for i in ids]
            victim = max(range(len(ids)), key=lambda i: before.get(ids[i], 0))
            wait_for = N - max(out["placement_before"])
            code = gencc.LCC(K=max(2, N // 6), N=N)
            out.update(victim=victim, wait_for=wait_for, K=code.K)
            X = np.random.default_rng(0).normal(size=(code.K, 8))
            times, answered, errors, threads = [], 0, [], threading.active_count()
            killer = None
            for j in range(args.jobs):
                if j == args.kill_at:  # killed while this job's calls are out
                    killer = threading.Thread(target=cluster.remove, args=(victim,))
                t = time.perf_counter()
                try:
                    if killer is not None and j == args.kill_at:
                        killer.start()
                    r = run(f, X + j, code, ex, wait_for=wait_for, order=False, timeout=args.timeout)
                    errors.append(float(np.abs(r.outputs - f(X + j)).max() / np.abs(f(X + j)).max()))
                    answered += 1
                except Exception as e:  # noqa: BLE001 - an unanswered job is what is counted
                    print(f"job {j}: {type(e).__name__}: {e}", flush=True)
                times.append(time.perf_counter() - t)
                threads = max(threads, threading.active_count())
                time.sleep(max(0.0, t + args.interval - time.perf_counter()))
            if killer is not None:
                killer.join()
            after = collections.Counter(backend.placement(120))  # the replacements up (or 2 minutes passed)
            out["restarts"] = int(sum(backend.restarts))
            out["placement_after"] = [after.get(i, 0) for i in ids]
            out["placement_after_unready"] = after.get("", 0)
        finally:
            ex.close()
    ts = np.asarray(times)
    out.update(answered=answered, times=ts, threads=threads, max_err=max(errors, default=float("nan")),
               median_before_ms=1000 * float(np.median(ts[: args.kill_at])),
               median_after_ms=1000 * float(np.median(ts[args.kill_at + 1:])) if args.kill_at + 1 < len(ts) else 0.0,
               kill_job_s=float(ts[args.kill_at]), worst_s=float(ts.max()), worst_job=int(ts.argmax()),
               total_s=time.perf_counter() - t0)
    return out


def render(m: dict, argv: list[str]) -> str:
    from measure import generated_by, machine

    nodes = ", ".join(f"node {i + 1}: {n}" for i, n in enumerate(m["placement_before"]))
    after = ", ".join(f"node {i + 1}: {'lost' if i == m['victim'] else n}"
                      for i, n in enumerate(m["placement_after"]))
    rows = [
        ("worker nodes (beside the head)", f"{m['nodes']}"),
        ("actors (SPREAD over the worker nodes)", f"{m['actors']}: {nodes}"),
        ("code, waiting for", f"LCC K = {m['K']}, N = {m['actors']}; the first {m['wait_for']} results"),
        ("jobs", f"{m['jobs']}, one every {m['interval']:g} s at most"),
        ("node killed (every process on it)", f"node {m['victim'] + 1}, during job {m['kill_at'] + 1}"),
        ("jobs answered", f"{m['answered']} of {m['jobs']}"),
        ("largest error of a decoded output (relative to f's largest)", f"{m['max_err']:.1e}"),
        ("actors re-created", f"{m['restarts']}"),
        ("actors after the stream", after + (f" (+{m['placement_after_unready']} still starting)"
                                             if m["placement_after_unready"] else "")),
        ("median job before the loss", f"{m['median_before_ms']:.1f} ms"),
        ("the job during which the node was killed", f"{m['kill_job_s']:.2f} s"),
        ("median job after the loss", f"{m['median_after_ms']:.1f} ms"),
        ("worst job", f"{m['worst_s']:.2f} s (job {m['worst_job'] + 1})"),
        ("most threads in the master process", f"{m['threads']}"),
        ("cluster and actors up in", f"{m['startup_s']:.0f} s"),
    ]
    table = "\n".join(["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])
    return f"{generated_by(SUITE, argv)}\n\n{machine()}\n\n{table}\n"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = parser(prog)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    check(ap, args)
    from measure import publish, rerun_in_namespace

    status = rerun_in_namespace(ap, argv, __file__)
    if status is not None:
        return status
    return publish(render(measure(args), argv), args.out)


if __name__ == "__main__":
    sys.exit(main())
