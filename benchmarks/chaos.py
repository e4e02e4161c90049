"""Chaos: everything at once on a `gencc serve --backend ray --address ...` over a multi-node Ray cluster, under
open-loop load from an independent client that checks every answer; a per-minute table and each fault's recovery.

    python benchmarks/run.py chaos                                  # 10 minutes, 4 nodes (the documented run)
    python benchmarks/run.py chaos --minutes 10 --out docs/generated/chaos.md
    python benchmarks/run.py chaos --minutes 1 --minute-s 20 --faults kill,burst --nodes 2   # a short look

Inside a loopback-only network namespace (the script re-runs itself in one, `gencc.engine.ray.namespace`): a
`gencc.engine.ray.LocalCluster` of --nodes nodes (the head and --nodes - 1 worker nodes, each its own raylet and
object store), `gencc serve` (the default coded scheme, --workload, --workers Ray actors, an injected
--service-ms per task) joined to it as a process of its own on 127.0.0.1, and `benchmarks/chaos_parts/client.py`
as another: Poisson arrivals at --load times the scheme's capacity (capacity: workers / (service time x tasks per
request), tasks per request being the workers a coded group uses over its K requests, from /healthz), every
exact answer compared with the model's own output computed in the client, every degraded one scored by top-1
agreement. On a schedule (fractions of the run; --faults picks the kinds):

    kill      an actor process killed by PID (SIGKILL) at 8%; three (at most a quarter of them) at 58%
    remove    the worker node holding the most actors lost with every process on it, at 18%
    hostile   malformed requests and half-sent requests (slow connections) for 10% of the run from 28%; for 6%
              from 64%
    burst     3 x --max-pending requests at once with a deadline (X-Deadline-Ms: 1.5 x --service-ms), at 42%
              and 66%: admission answers 503 past --max-pending, a missed deadline 504
    add       a worker node added, at 50%
    head      the head node lost (GCS and raylet) at 75%; then the operator's recovery: a fresh cluster started at
              once, and `gencc serve` restarted on it, on the same port, once the old one has exited

Per minute (--minute-s): requests sent (load and bursts), answered (200), 5xx by code, lost (no HTTP answer),
wrong (exact answers that differ from the model's), degraded answers and their top-1 agreement, p50 / p99 /
p99.9 of the answered, the server's RSS at the minute's end, the seconds /healthz was not ok, the actors per
node. Per fault: the load's 10-s p99 before it (a request not answered 200 counts as infinitely slow), the
seconds until the p99 of a 10-s window starting then is back within 2x of it, when /healthz first said not ok
and ok again, and the requests lost and refused in the 30 s after. Not a CI test (tests/benchmarks/
test_chaos.py runs its code path for a few seconds). The machine is shared: read the figures with its load.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SUITE = "chaos"
KINDS = ("kill", "remove", "hostile", "burst", "add", "head")
#: (fraction of the run, kind, size): actors killed, seconds of hostile traffic as a fraction of the run
PLAN = [(0.08, "kill", 1), (0.18, "remove", 1), (0.28, "hostile", 0.10), (0.42, "burst", 1), (0.50, "add", 1),
        (0.58, "kill", 3), (0.64, "hostile", 0.06), (0.66, "burst", 1), (0.75, "head", 1)]
#: seconds the run needs after the head's loss (Ray ends a driver that has not reached the GCS for 60 s)
AFTER_HEAD_S = 120.0


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawTextHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the run in minutes (default 10)")
    ap.add_argument("--minute-s", type=float, default=60.0, help="seconds per minute of the table (default 60)")
    ap.add_argument("--nodes", type=int, default=4, help="Ray nodes, the head included (default 4)")
    ap.add_argument("--workers", type=int, default=12, help="the server's Ray actors (default 12)")
    ap.add_argument("--K", type=int, default=8, help="requests per coding group (default 8)")
    ap.add_argument("--workload", default="digits-cnn", help="the model served (default digits-cnn)")
    ap.add_argument("--service-ms", type=float, default=200.0, help="injected service time per task (default 200)")
    ap.add_argument("--load", type=float, default=0.5, help="fraction of the capacity, in (0, 1) (default 0.5)")
    ap.add_argument("--max-pending", type=int, default=64, help="the server's --max-pending (default 64)")
    ap.add_argument("--read-timeout-ms", type=float, default=2000.0, help="the server's --read-timeout-ms "
                    "(default 2000)")
    ap.add_argument("--faults", default=",".join(KINDS), help=f"the kinds scheduled (default {','.join(KINDS)})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the page (markdown) to this file")
    return ap


def check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every option validated before any work starts (argparse's exit 2 with one message)."""
    for name in ("minutes", "minute_s", "service_ms", "read_timeout_ms"):
        if not 0 < getattr(args, name) < math.inf:
            ap.error(f"--{name.replace('_', '-')} must be a positive finite number, got {getattr(args, name):g}")
    if not 0 < args.load < 1:
        ap.error(f"--load must lie in (0, 1), got {args.load:g}")
    if args.nodes < 1 or args.workers < 2 or args.K < 1 or args.max_pending < 1:
        ap.error("--nodes must be at least 1, --workers at least 2, --K and --max-pending at least 1")
    if args.K >= args.workers:
        ap.error(f"--K must be below --workers (a coded group needs more workers than requests), got K = {args.K}, "
                 f"workers = {args.workers}")
    args.kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    if bad := [k for k in args.kinds if k not in KINDS]:
        ap.error(f"--faults takes {', '.join(KINDS)}; got {', '.join(bad)}")
    if args.nodes < 2 and {"remove", "head"} & set(args.kinds):
        ap.error("--faults remove and head need --nodes 2 or more (the head and a worker node)")
    duration = args.minutes * args.minute_s
    if "head" in args.kinds and duration * (1 - 0.75) < AFTER_HEAD_S:
        ap.error(f"--faults head needs {AFTER_HEAD_S:g} s after the head's loss at 75% of the run: --minutes x "
                 f"--minute-s at least {AFTER_HEAD_S / 0.25:g} s, got {duration:g}")
    if duration < args.minute_s:
        ap.error(f"--minutes must cover at least one --minute-s interval ({args.minute_s:g} s)")
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {args.out}")


def placement_options() -> list[str]:
    """`gencc serve`'s placement options where it has them (spread the actors over the nodes)."""
    r = subprocess.run([sys.executable, "-m", "gencc.cli", "serve", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    for option in ("--worker-placement", "--placement"):
        if option in r.stdout:
            return [option, "spread"]
    return []


class Run:
    """The run's shared state: the events, the health and RSS samples, the current server."""

    def __init__(self, t0: float):
        self.t0, self.lock = t0, threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.samples: list[tuple[float, int, dict, float]] = []  # (t, /healthz status, body, server RSS MB)
        self.placement: list[str] = []
        self.stop = threading.Event()

    def now(self) -> float:
        return time.time() - self.t0

    def event(self, kind: str, what: str, t: float | None = None, **extra: Any) -> dict[str, Any]:
        """Note a fault (at `t`, when it started: default now)."""
        e = {"t": self.now() if t is None else t, "kind": kind, "what": what, **extra}
        with self.lock:
            self.events.append(e)
        print(f"{e['t']:7.1f} s  {kind}: {what}", flush=True)
        return e


def sampler(run: Run, server: Any, nodes: Any, n_minutes: int, minute_s: float) -> None:
    """Every second: /healthz and the server's RSS; at each minute's end the actors per node."""
    from chaos_parts.faults import health

    m = 0
    while not run.stop.is_set():
        t = run.now()
        status, body = health(server.port)
        with run.lock:
            run.samples.append((t, status, body, server.rss_mb()))
        if m < n_minutes and t >= (m + 1) * minute_s - 1.0:
            run.placement.append(nodes.placement())
            m += 1
        run.stop.wait(max(0.0, 1.0 - (run.now() - t)))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole run; its records, events and samples."""
    from chaos_parts.faults import Nodes, Server, hostile
    from measure import free_port

    from gencc.engine.ray import LocalCluster

    duration = args.minutes * args.minute_s
    n_minutes = max(1, round(duration / args.minute_s))
    rng = np.random.default_rng(args.seed)
    plan = [(f * duration, kind, size) for f, kind, size in PLAN if kind in args.kinds]
    bursts = [t for t, kind, _ in plan if kind == "burst"]
    placement = placement_options()
    argv = ["--backend", "ray", "--workload", args.workload, "--workers", str(args.workers), "--K", str(args.K),
            "--service-ms", f"{args.service_ms:g}", "--max-pending", str(args.max_pending),
            "--read-timeout-ms", f"{args.read_timeout_ms:g}", *placement]
    out: dict[str, Any] = {"argv": argv, "placement_option": " ".join(placement) or "none (Ray's default)"}
    with tempfile.TemporaryDirectory(prefix="gencc-chaos-") as tmp, contextlib.ExitStack() as stack:
        t_up = time.monotonic()
        cluster = stack.enter_context(LocalCluster(args.nodes - 1))
        nodes = Nodes(cluster)
        server = Server(argv, free_port(), Path(tmp) / "server.log")
        server.start(cluster.address)
        stack.callback(lambda: server.stop())
        server.wait_ready(900)
        out["startup_s"] = time.monotonic() - t_up
        from chaos_parts.faults import health

        h = health(server.port)[1]
        tasks_per_request = h.get("needed", args.workers) / args.K
        capacity = args.workers / (args.service_ms / 1000 * tasks_per_request)
        rate = args.load * capacity
        out.update(scheme=h.get("scheme"), needed=h.get("needed"), capacity=capacity, rate=rate,
                   burst_n=3 * args.max_pending, burst_ms=1.5 * args.service_ms)
        burst_arg = ",".join(f"{t:.3f}:{3 * args.max_pending}:{1.5 * args.service_ms:g}" for t in bursts)
        rec_path = Path(tmp) / "records.npz"
        client = subprocess.Popen([sys.executable, str(HERE / "chaos_parts" / "client.py"),
                                   "--port", str(server.port),
                                   "--rate", f"{rate:.4f}", "--duration", f"{duration:g}", "--bursts", burst_arg,
                                   "--workload", args.workload, "--seed", str(args.seed), "--out", str(rec_path)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        stack.callback(lambda: client.poll() is None and client.kill())
        if client.stdout.readline().strip() != "ready":
            raise RuntimeError("the chaos client did not start")
        t0 = time.time() + 1.0
        client.stdin.write(f"{t0!r}\n")
        client.stdin.flush()
        run = Run(t0)
        stack.callback(run.stop.set)
        out["placement_start"] = nodes.placement()
        threading.Thread(target=sampler, args=(run, server, nodes, n_minutes, args.minute_s), daemon=True).start()
        threads = []
        for at, kind, size in plan:
            run.stop.wait(max(0.0, at - run.now()))
            t = run.now()
            if kind == "kill":
                run.event(kind, "actor(s) killed: " + nodes.kill_actors(int(size), rng), t)
            elif kind == "remove":
                run.event(kind, "worker node lost: " + nodes.remove_worker(), t)
            elif kind == "add":
                run.event(kind, "worker node added: " + nodes.add_worker(), t)
            elif kind == "burst":
                run.event(kind, f"{3 * args.max_pending} requests at once, deadline {1.5 * args.service_ms:g} ms")
            elif kind == "hostile":
                e = run.event(kind, f"malformed requests and slow connections for {size * duration:.0f} s")
                th = threading.Thread(target=hostile, args=(server.port, size * duration, args.read_timeout_ms / 1e3,
                                                            run.stop, e), daemon=True)
                th.start()
                threads.append(th)
            elif kind == "head":
                e = run.event(kind, "head node lost: " + nodes.lose_head(), t)
                fresh = stack.enter_context(LocalCluster(args.nodes - 1))  # here: Ray sets signal handlers
                e["fresh_cluster_s"] = run.now() - e["t"]
                nodes.adopt(fresh)
                th = threading.Thread(target=operator, args=(run, server, fresh.address, e), daemon=True)
                th.start()
                threads.append(th)
        client.wait()
        for th in threads:
            th.join(300)
        run.stop.set()
        out["placement_end"] = nodes.placement()
        out["stop_status"], out["stop_s"] = server.stop()
        out["log_tail"] = server.tail(600)
        rec = dict(np.load(rec_path))
    out.update(records=rec, events=run.events, samples=run.samples, placement=run.placement, duration=duration,
               n_minutes=n_minutes, minute_s=duration / n_minutes)
    return out


def operator(run: Run, server: Any, address: str, e: dict[str, Any]) -> None:
    """What an operator does after the head's loss, once a fresh cluster is up (started at once, in the main
    thread): when the server has exited (Ray ends a driver that cannot reach the GCS), start it again on the fresh
    cluster at `address`, same port."""
    try:
        e["exit_status"] = server.proc.wait(AFTER_HEAD_S + 60)
    except subprocess.TimeoutExpired:
        e["exit_status"] = f"still running after {AFTER_HEAD_S + 60:g} s: stopped ({server.stop()[0]})"
    e["exit_s"] = run.now() - e["t"]
    lines = server.tail(4000).strip().splitlines()
    e["exit_says"] = next((ln.strip() for ln in reversed(lines) if "GCS" in ln or "rror" in ln),
                          lines[-1] if lines else "")
    server.start(address)
    try:
        server.wait_ready(600)
        e["ready_s"] = run.now() - e["t"]
    except RuntimeError as err:
        e["ready_s"] = math.nan
        print(err, flush=True)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = parser(prog)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    check(ap, args)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from measure import publish, rerun_in_namespace

    status = rerun_in_namespace(ap, argv, __file__)
    if status is not None:
        return status
    from chaos_parts.report import render

    m = measure(args)
    try:
        page = render(m, argv)
    except Exception:  # keep what was measured: `chaos_parts.report.render(pickle.load(...), argv)` again
        import pickle

        kept = Path(tempfile.mkdtemp(prefix="gencc-chaos-")) / "measured.pickle"
        kept.write_bytes(pickle.dumps(m))
        print(f"the page could not be rendered; what was measured is in {kept}", flush=True)
        raise
    return publish(page, args.out)


if __name__ == "__main__":
    sys.exit(main())
