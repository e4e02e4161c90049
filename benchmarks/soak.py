"""Soak: a long open-loop run at a fixed load, p99 latency and RSS printed per minute (memory per request is
bounded: the target is a p99 in the last minute within 1.5x of the first, RSS growth under 30 MB).

    python benchmarks/run.py soak --minutes 10 --load 0.5                 # in process: Service.submit
    python benchmarks/run.py soak --minutes 5 --load 0.5 --http           # over loopback HTTP (uvicorn, this process)
    python benchmarks/run.py soak --minutes 1 --minute-s 10 --crash-p 0.01   # 1% of tasks crash their worker
    python benchmarks/run.py soak --minutes 1 --minute-s 10 --wrong-worker 0 --check on   # one always-wrong worker

Load is a fraction of the scheme's capacity W / (E[task time] x tasks per request): tasks per request N / K for a
coded scheme (1.5), `copies` for replication, 1 otherwise; E[task time] is the injected `--service-ms` plus f's own
time, measured first. Arrivals are Poisson, independent of answers. The service is built as `gencc serve` builds it
(`Service.build`, then `freeze_heap`). Per minute (`--minute-s`): requests that arrived in it, their statuses, p50
and p99 of the answered ones, the process's RSS at its end, the garbage collector's full collections and the
longest one, the exact (not degraded) answers whose top-1 class differs from the model's own on the input (wrong:
corruption that got through), the degraded answers and how many of them differ (in process only: "-" over HTTP),
and the service's health read every
`--health-s` seconds (counts by status, and the fewest live workers seen). `--http` serves the app on 127.0.0.1 in
this process and sends each request on a pooled keep-alive connection of a raw asyncio client, so the RSS includes
the client. Not a CI test (tests/benchmarks/test_soak.py runs its code path for a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import threading
import time
from typing import Any

import numpy as np
from measure import machine

from gencc.faults import Faults, WrongResults
from gencc.loadgen import poisson_arrivals
from gencc.serving import Service, freeze_heap

TARGET_P99_RATIO, TARGET_RSS_MB = 1.5, 30.0


def rss_mb() -> float:
    """This process's resident set size now, MB (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Minutes:
    """Per interval of arrivals: latencies of answered requests and counts by status (thread-safe; a request's
    record is two numbers, never the request)."""

    def __init__(self, n: int, minute_s: float):
        self.minute_s, self.lock = minute_s, threading.Lock()
        self.lat: list[list[float]] = [[] for _ in range(n)]
        self.status: list[dict[int, int]] = [{} for _ in range(n)]
        self.rss: list[float] = [math.nan] * n
        self.full_gcs: list[int] = [0] * n
        self.gc_ms: list[float] = [0.0] * n  # the longest full collection in the interval
        self.scored = False  # whether answers were scored (in process, with the truth); over HTTP they are not
        self.wrong: list[int] = [0] * n  # exact (not degraded) answers whose top-1 is not the model's
        self.degraded: list[int] = [0] * n
        self.wrong_degraded: list[int] = [0] * n
        self.health: list[dict[str, int]] = [{} for _ in range(n)]
        self.min_live: list[float] = [math.inf] * n
        self.t0 = time.perf_counter()

    def watch_gc(self, phase: str, info: dict[str, Any]) -> None:
        """A `gc.callbacks` hook: the longest pause of a full (generation 2) collection per interval."""
        if info.get("generation") != 2:
            return
        now = time.perf_counter()
        if phase == "start":
            self._gc_start = now
            return
        m = min(int((now - self.t0) / self.minute_s), len(self.gc_ms) - 1)
        self.gc_ms[m] = max(self.gc_ms[m], (now - getattr(self, "_gc_start", now)) * 1000)

    def add(self, t_sent: float, status: int, latency_s: float, wrong: bool = False, degraded: bool = False) -> None:
        m = min(int(t_sent / self.minute_s), len(self.lat) - 1)
        with self.lock:
            self.status[m][status] = self.status[m].get(status, 0) + 1
            if status == 200:
                self.lat[m].append(latency_s)
                self.degraded[m] += bool(degraded)
                if degraded:
                    self.wrong_degraded[m] += bool(wrong)
                else:
                    self.wrong[m] += bool(wrong)

    def add_health(self, t: float, status: str, live: int) -> None:
        m = min(int(t / self.minute_s), len(self.lat) - 1)
        with self.lock:
            self.health[m][status] = self.health[m].get(status, 0) + 1
            self.min_live[m] = min(self.min_live[m], live)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for m, lat in enumerate(self.lat):
            a = np.asarray(lat) * 1000
            out.append({"minute": m + 1, "requests": sum(self.status[m].values()), "ok": len(lat),
                        "other": {k: v for k, v in sorted(self.status[m].items()) if k != 200},
                        "p50_ms": float(np.percentile(a, 50)) if a.size else math.nan,
                        "p99_ms": float(np.percentile(a, 99)) if a.size else math.nan,
                        "rss_mb": self.rss[m], "full_gcs": self.full_gcs[m], "gc_ms": self.gc_ms[m],
                        "wrong": self.wrong[m] if self.scored else None,
                        "degraded": self.degraded[m] if self.scored else None,
                        "wrong_degraded": self.wrong_degraded[m] if self.scored else None,
                        "health": dict(sorted(self.health[m].items())),
                        "min_live": self.min_live[m]})
        return out


def capacity(svc: Any, service_ms: float) -> float:
    """Requests per second the scheme's workers can take: W / (E[task time] x tasks per request)."""
    d = svc.dispatcher
    x = svc.workload.X_test[:1]
    f = svc.workload.f
    f(x)
    t = []
    for _ in range(30):
        t0 = time.perf_counter()
        f(x)
        t.append(time.perf_counter() - t0)
    task_s = service_ms / 1000 + float(np.min(t))  # f's own cost (the machine may be busy meanwhile)
    per_request = d.N / d.K if hasattr(d, "N") else float(getattr(d, "copies", 1))
    return svc.pool.n_workers / (task_s * per_request)


def _sampler(minutes: Minutes, t0: float, stop: threading.Event) -> None:
    """At each interval's end: the RSS and the full collections so far."""
    m, gen2 = 0, gc.get_stats()[2]["collections"]
    while m < len(minutes.rss) and not stop.is_set():
        stop.wait(max(0.0, t0 + (m + 1) * minutes.minute_s - time.perf_counter()))
        g = gc.get_stats()[2]["collections"]
        minutes.rss[m], minutes.full_gcs[m], gen2 = rss_mb(), g - gen2, g
        m += 1


def _health(svc: Any, minutes: Minutes, t0: float, stop: threading.Event, every_s: float) -> None:
    """Every `every_s`: the service's health status, and its count of live workers."""
    while not stop.wait(every_s):
        h = svc.health()
        minutes.add_health(time.perf_counter() - t0, h["status"], h["live"])


def _top1(out: Any) -> int:
    return int(np.argmax(np.asarray(out, dtype=float).ravel()))


def run_inprocess(svc: Any, times: np.ndarray, X: np.ndarray, minutes: Minutes, truth: np.ndarray | None = None,
                  health_s: float = 1.0) -> None:
    t0 = time.perf_counter()
    minutes.scored = truth is not None
    stop = threading.Event()
    th = threading.Thread(target=_sampler, args=(minutes, t0, stop), daemon=True)
    th.start()
    threading.Thread(target=_health, args=(svc, minutes, t0, stop, health_s), daemon=True).start()
    pending = threading.Semaphore(0)
    for i, t in enumerate(times):
        delay = t0 + t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent = float(t)

        def done(fut: Any, sent: float = sent, i: int = i % len(X)) -> None:
            r = fut.result()
            wrong = truth is not None and r.status == 200 and _top1(r.output) != truth[i]
            minutes.add(sent, r.status, r.latency, wrong, bool(r.degraded))
            pending.release()

        svc.submit(X[i % len(X)]).add_done_callback(done)
    for _ in range(len(times)):
        pending.acquire(timeout=60)
    th.join()
    stop.set()


async def _http(port: int, times: np.ndarray, bodies: list[bytes], minutes: Minutes, max_conns: int = 512) -> None:
    """A raw asyncio HTTP/1.1 client: each request on a free keep-alive connection (a new one when none is)."""
    free: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opened = 0
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def exchange(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], body: bytes) -> int:
        r, w = conn
        w.write(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        status, length = int((await r.readline()).split()[1]), 0
        while (line := await r.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await r.readexactly(length)
        return status

    async def one(i: int, t: float) -> None:
        nonlocal opened
        start = loop.time()
        while True:  # a kept-alive connection the server closed meanwhile: the next one, or a new one
            reused = bool(free)
            if reused:
                conn = free.pop()
            elif opened < max_conns:
                opened += 1
                conn = await asyncio.open_connection("127.0.0.1", port)
            else:
                break
            try:
                status = await exchange(conn, bodies[i % len(bodies)])
            except (ConnectionError, asyncio.IncompleteReadError, IndexError, ValueError):
                opened -= 1
                conn[1].close()
                if reused:
                    continue
                break
            minutes.add(t, status, loop.time() - start)
            free.append(conn)
            return
        minutes.add(t, 0, 0.0)  # no answer

    running: set[asyncio.Task] = set()
    for i, t in enumerate(times):  # each request's task made at its arrival (not all at once: the heap stays small)
        await asyncio.sleep(max(0.0, t0 + float(t) - loop.time()))
        task = asyncio.create_task(one(i, float(t)))
        running.add(task)
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)
    for _, w in free:
        w.close()


def run_http(svc: Any, times: np.ndarray, X: np.ndarray, minutes: Minutes, health_s: float = 1.0) -> None:
    from gencc.serving import create_app, start_in_thread  # FastAPI: imported only for --http

    server, th, port = start_in_thread(create_app(svc))
    bodies = [json.dumps({"input": x.tolist()}).encode() for x in X[:256]]
    stop = threading.Event()
    t0 = time.perf_counter()
    sampler = threading.Thread(target=_sampler, args=(minutes, t0, stop), daemon=True)
    sampler.start()
    threading.Thread(target=_health, args=(svc, minutes, t0, stop, health_s), daemon=True).start()
    try:
        asyncio.run(_http(port, times, bodies, minutes))
        sampler.join()
    finally:
        stop.set()
        server.should_exit = True
        th.join(60)


def report(rows: list[dict[str, Any]], head: str) -> tuple[float, float]:
    """Print the per-minute table; returns (p99 last / first, RSS growth MB from the end of minute 1)."""
    print(head)
    print(f"{'minute':>6} {'requests':>8} {'ok':>7} {'p50 ms':>8} {'p99 ms':>8} {'RSS MB':>8} {'full GCs':>8} "
          f"{'max GC ms':>9} {'wrong':>5} {'degraded':>8} {'of them wrong':>13}  other / health")
    for r in rows:
        health = f"health {r['health']}, fewest live {r['min_live']:g}" if r["health"] else ""
        w, d, wd = ("-" if r[k] is None else r[k] for k in ("wrong", "degraded", "wrong_degraded"))
        print(f"{r['minute']:>6} {r['requests']:>8} {r['ok']:>7} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
              f"{r['rss_mb']:>8.1f} {r['full_gcs']:>8} {r['gc_ms']:>9.1f} {w:>5} {d:>8} {wd:>13}  {r['other'] or ''} "
              f"{health}")
    ratio = rows[-1]["p99_ms"] / rows[0]["p99_ms"]
    growth = rows[-1]["rss_mb"] - rows[0]["rss_mb"]
    ok = ratio <= TARGET_P99_RATIO and growth < TARGET_RSS_MB
    print(f"p99 last / first minute: {ratio:.2f} (target <= {TARGET_P99_RATIO}); RSS growth after minute 1: "
          f"{growth:+.1f} MB (target < {TARGET_RSS_MB:g}): {'met' if ok else 'NOT met'}")
    return ratio, growth


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the run in minutes (default 10)")
    ap.add_argument("--load", type=float, default=0.5, help="fraction of the scheme's capacity in (0, 1) (default 0.5)")
    ap.add_argument("--workload", default="digits-cnn", help="a gencc workload (default digits-cnn)")
    ap.add_argument("--scheme", default="gcc", help="serving scheme (default gcc)")
    ap.add_argument("--workers", type=int, default=12, help="workers W (default 12)")
    ap.add_argument("--K", type=int, default=8, help="group size K of the coded schemes (default 8)")
    ap.add_argument("--service-ms", type=float, default=30.0, help="injected service time per task (default 30)")
    ap.add_argument("--minute-s", type=float, default=60.0, help="seconds per reported interval (default 60)")
    ap.add_argument("--http", action="store_true", help="over loopback HTTP instead of Service.submit")
    ap.add_argument("--rate", type=float, default=None, help="requests per second (default: --load x capacity)")
    ap.add_argument("--crash-p", type=float, default=0.0, help="probability a task crashes its worker (default 0)")
    ap.add_argument("--wrong-worker", type=int, action="append", default=[],
                    help="a worker whose every result is wrong (repeatable; with --check on or strict)")
    ap.add_argument("--check", default="off", help="wrong-result check: off, on or strict (default off)")
    ap.add_argument("--health-s", type=float, default=1.0, help="seconds between health reads (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 0 <= args.crash_p < 1:
        ap.error(f"--crash-p must lie in [0, 1), got {args.crash_p:g}")
    if any(not 0 <= w < args.workers for w in args.wrong_worker):
        ap.error(f"--wrong-worker must name workers in 0..{args.workers - 1}, got {args.wrong_worker}")
    if not 0 < args.health_s < math.inf:
        ap.error(f"--health-s must be a positive finite number, got {args.health_s:g}")
    if not 0 < args.load < 1:
        ap.error(f"--load must lie in (0, 1), got {args.load:g}")
    for name in ("minutes", "service_ms", "minute_s"):
        if not 0 < getattr(args, name) < math.inf:
            ap.error(f"--{name.replace('_', '-')} must be a positive finite number, got {getattr(args, name):g}")
    if args.rate is not None and not 0 < args.rate < math.inf:
        ap.error(f"--rate must be a positive finite number, got {args.rate:g}")
    if args.minutes * 60 < args.minute_s:
        ap.error(f"--minutes must cover at least one interval of --minute-s {args.minute_s:g} s")

    try:
        svc = Service.build(args.workload, args.scheme, args.workers, args.K, service_ms=args.service_ms,
                            max_pending=100_000, check=args.check,
                            faults=Faults(crash_p=args.crash_p) if args.crash_p else None,
                            wrong=WrongResults(args.wrong_worker) if args.wrong_worker else None)
    except ValueError as e:
        ap.error(str(e))
    cap = capacity(svc, args.service_ms)
    rate = args.rate or args.load * cap
    freeze_heap()
    print(machine(), flush=True)
    head = (f"soak: {args.workload}, {svc.scheme}, W={args.workers}, K={args.K}, service {args.service_ms:g} ms, "
            f"{rate:.1f} req/s (capacity {cap:.1f}: load {rate / cap:.2f}) for {args.minutes:g} min, "
            f"{'HTTP (loopback)' if args.http else 'in process'}; crash_p {args.crash_p:g}, wrong workers "
            f"{args.wrong_worker or 'none'}, check {args.check}; RSS at start {rss_mb():.1f} MB")
    X = np.asarray(svc.workload.X_test, dtype=np.float32)
    truth = np.argmax(np.asarray(svc.workload.f(X), dtype=float).reshape(len(X), -1), axis=1)
    rows = soak(svc, rate, args.minutes * 60, args.minute_s, X, http=args.http, seed=args.seed, truth=truth,
                health_s=args.health_s)
    report(rows, head)
    d, pool = svc.dispatcher, svc.pool
    print(f"crashes {d.failures.get('crash', 0)}, workers re-created {int(np.sum(getattr(pool, 'restarts', 0)))}, "
          f"quarantined {sorted(getattr(d, 'quarantined_view', ()))}")
    return 0


def soak(svc: Any, rate: float, duration: float, minute_s: float, X: np.ndarray, http: bool = False,
         seed: int = 0, truth: np.ndarray | None = None, health_s: float = 1.0) -> list[dict[str, Any]]:
    """Poisson arrivals at `rate` for `duration` seconds on `svc` (inputs X in turn); closes it; per-interval rows."""
    times = poisson_arrivals(rate, duration, np.random.default_rng(seed))
    n = max(1, round(duration / minute_s))
    minutes = Minutes(n, duration / n)
    gc.callbacks.append(minutes.watch_gc)
    try:
        if http:
            run_http(svc, times, X, minutes, health_s)
        else:
            run_inprocess(svc, times, X, minutes, truth, health_s)
    finally:
        gc.callbacks.remove(minutes.watch_gc)
        svc.close()
    return minutes.rows()


if __name__ == "__main__":
    raise SystemExit(main())
