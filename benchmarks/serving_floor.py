"""Serving at its floor: `gencc serve`'s app against a minimal FastAPI app running the same model, side by side.

Each server is its own process on 127.0.0.1 (a random free port), started by this script:
- "minimal": a FastAPI app defined here, one POST /predict (a pydantic body, the model called in a thread pool
  of as many threads as the service has workers), served by plain uvicorn;
- gencc: what `gencc serve` runs (`Service.build`, the gate calibrated, `freeze_heap`, `create_app` with its door
  limits, uvicorn with `uvicorn_options`), built in the child process exactly as the command builds it.
Models: the digits CNN (`gencc.workloads`) and `Floor`, a torch CNN defined here (passed through
`gencc.as_model`); service time is the model's own compute, no injected sleep. Then the coded hedge: uncoded,
eager gcc and the lazy hedges on injected service times (W = 12, K = 8, 10% of the time slow x10), where a
coded scheme's throughput is its extra model calls' price.

"uncoded-ctl" is uncoded with its dispatcher kept on the pool's control thread (not on the event loop,
`gencc.serving._policy.loop_env.LoopEnv`), for comparison. Every server runs at once (idle ones cost only their
threads' polling); runs alternate between them, `--reps` times, with the project's own asyncio load client
(`gencc.loadgen.client`): open-loop Poisson arrivals at `--rate` (latency: p50 / p99 / p99.9) and a
closed loop of `--concurrency` requests at saturation (throughput); server CPU per request is the child's
CPU time (/proc) over answers. Figures are medians over reps, and ratios to the minimal app (or to uncoded,
for the hedge). The machine's load average is printed.

    python benchmarks/run.py serving-floor                       # ~3-4 minutes (servers start in parallel)
    python benchmarks/run.py serving-floor --seconds 10 --reps 5 # longer
    python benchmarks/run.py serving-floor --out docs/generated/serving-floor.md
    python benchmarks/run.py serving-floor --profile gcc         # cProfile of one saturated server's event loop
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from measure import generated_by, machine
from pydantic import BaseModel

from gencc.loadgen.client import ClientError, HttpClient
from gencc.loadgen.load import run_http

SUITE = "serving-floor"
SCRIPT_SHAPE = (1, 16, 16)
HEDGE_SLOW = {"service_ms": 20.0, "slow_fraction": 0.1, "slow_factor": 10.0}


def floor_module() -> Any:
    """A small torch CNN gencc never saw (fixed seed), a few ms of compute per input on one core."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64 * 16, 10)).eval()


def load_model(name: str) -> tuple[Any, Any]:
    """(what Service.build takes, the batched callable both servers run)."""
    import gencc

    if name == "digits-cnn":
        from gencc.workloads import load

        w = load("digits-cnn")
        return "digits-cnn", w.f
    m = gencc.as_model(floor_module(), input_shape=SCRIPT_SHAPE)
    return m, m


def inputs(name: str, n: int = 64) -> list[Any]:
    if name == "digits-cnn":
        from gencc.workloads import load

        return [x.tolist() for x in load("digits-cnn").X_test[:n]]
    rng = np.random.default_rng(1)
    return [x.tolist() for x in rng.standard_normal((n, *SCRIPT_SHAPE)).astype(np.float32)]


# ----- the child servers ----------------------------------------------------------------------------------
class Body(BaseModel):
    """The minimal app's request body."""

    input: list


def minimal_app(f: Any, threads: int) -> Any:
    from concurrent.futures import ThreadPoolExecutor

    from fastapi import FastAPI

    pool = ThreadPoolExecutor(threads)
    app = FastAPI()

    @app.post("/predict")
    async def predict(body: Body) -> dict[str, Any]:
        x = np.asarray(body.input, dtype=np.float32)
        y = await asyncio.get_running_loop().run_in_executor(pool, f, x[None])
        return {"output": np.asarray(y)[0].tolist()}

    return app


def sample_threads(out: dict[tuple[str, str], int], stop: Any, every: float = 0.001) -> None:
    """Every `every` s, count (thread name, innermost frame) of each other thread (`sys._current_frames`)."""
    import threading

    me = threading.get_ident()
    while not stop.is_set():
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident != me:
                code = frame.f_code
                key = (names.get(ident, "?"), f"{Path(code.co_filename).name}:{code.co_name}")
                out[key] = out.get(key, 0) + 1
        time.sleep(every)


def child(kind: str, model: str, scheme: str, workers: int, K: int, slow: bool, gate: str,
          profile: str | None = None) -> None:
    import socket

    import uvicorn

    target, f = load_model(model)
    svc, submitted = None, [0]
    if kind == "minimal":
        app, kw = minimal_app(f, workers), {}
    else:
        from gencc.serving import Limits, Service, create_app, freeze_heap, uvicorn_options

        svc = Service.build(target, scheme.removesuffix("-ctl"), workers, K, gate=gate,
                            **(HEDGE_SLOW if slow else {}))
        if scheme.endswith("-ctl"):  # a baseline's dispatcher kept on the control thread (not LoopEnv)
            svc.attach_loop = lambda loop: False
        if svc.gate is not None:
            svc.gate.ready.wait()
        if profile is not None:  # count the requests the door submits to the service (503s included)
            submit = svc.submit

            def counted(*a: Any, **kw: Any) -> Any:
                submitted[0] += 1
                return submit(*a, **kw)

            svc.submit = counted
        freeze_heap()
        limits = Limits()
        app, kw = create_app(svc, limits=limits), uvicorn_options(limits)
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (a proto-0 listening
    # socket's connections would run Nagle's algorithm, ~40 ms per keep-alive answer with delayed ACKs)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, **kw))
    if profile is None:
        server.run(sockets=[sock])
        return
    import cProfile
    import threading

    samples: dict[tuple[str, str], int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample_threads, args=(samples, stop), daemon=True)
    prof = cProfile.Profile()  # the main thread: the event loop, with the dispatcher on it
    signal.signal(signal.SIGTERM, lambda *_: None)  # uvicorn re-raises the SIGTERM it stopped on: outlive it
    sampler.start()
    prof.enable()
    server.run(sockets=[sock])
    prof.disable()
    stop.set()
    sampler.join()
    prof.dump_stats(profile + ".prof")
    d = getattr(svc, "dispatcher", None)
    counts = {k: int(getattr(d, k, 0)) for k in ("tasks_sent", "decodes", "copies")}
    counts["requests"] = submitted[0]
    counts["executed"] = int(sum(svc.pool.counts.values())) if svc is not None else 0
    Path(profile + ".counts.json").write_text(json.dumps(counts))
    Path(profile + ".samples.json").write_text(json.dumps([[n, f, c] for (n, f), c in samples.items()]))


class Server:
    def __init__(self, label: str, kind: str, model: str, scheme: str, workers: int, K: int, slow: bool, gate: str,
                 profile: str | None = None):
        self.label, self.model = label, model
        cmd = [sys.executable, __file__, "--child", kind, "--model", model, "--scheme", scheme,
               "--workers", str(workers), "--K", str(K), "--gate", gate] + (["--slow"] if slow else []) + \
            ([] if profile is None else ["--profile-out", profile])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.port, self.t_start = 0, time.monotonic()

    def wait(self, timeout: float = 300.0) -> None:
        """Until the child answers, at most `timeout` seconds after it was started."""
        t_end = self.t_start + timeout
        timeout = max(t_end - time.monotonic(), 1.0)
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise RuntimeError(f"{self.label}: child did not start within {timeout} s")
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"{self.label}: child did not start ({line!r})")
        self.port = int(line.split()[1])
        while time.monotonic() < t_end:  # until it answers
            try:
                asyncio.run(_one(self.port, inputs(self.model, 1)[0]))
                return
            except (ClientError, OSError):
                time.sleep(0.2)
        raise RuntimeError(f"{self.label}: no answer within {timeout} s")

    def cpu_s(self, loop: bool = False) -> float:
        """CPU seconds of the child (`loop`: of its main thread alone, where uvicorn runs the event loop)."""
        path = f"/proc/{self.proc.pid}/task/{self.proc.pid}/stat" if loop else f"/proc/{self.proc.pid}/stat"
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _raw(client: HttpClient, x: Any) -> bytes:
    return client.encode("POST", "/predict", json.dumps({"input": x}).encode(), {"Content-Type": "application/json"})


async def _one(port: int, x: Any) -> int:
    c = HttpClient("127.0.0.1", port, 1, 10.0)
    try:
        status, _ = await c.request(_raw(c, x))
    finally:
        c.close()
    return status


async def _saturate(port: int, xs: list[Any], concurrency: int, seconds: float) -> tuple[int, int, list[float]]:
    c = HttpClient("127.0.0.1", port, concurrency, 30.0)
    raws = [_raw(c, x) for x in xs]
    loop = asyncio.get_running_loop()
    t_end = loop.time() + seconds
    ok, bad, lat = [0], [0], []

    async def one_loop(i: int) -> None:
        while loop.time() < t_end:
            t = loop.time()
            try:
                status, _ = await c.request(raws[i % len(raws)])
            except ClientError:
                status = 0
            i += concurrency
            if status == 200:
                ok[0] += 1
                lat.append(loop.time() - t)
            else:
                bad[0] += 1

    t0 = loop.time()
    await asyncio.gather(*(one_loop(i) for i in range(concurrency)))
    c.close()
    return ok[0], bad[0], [loop.time() - t0, *lat]


LOADS: list[float] = []  # the machine's 1-minute load average at each measurement


def measure(srv: Server, mode: str, xs: list[Any], args: argparse.Namespace) -> dict[str, float]:
    LOADS.append(os.getloadavg()[0])
    cpu0, loop0 = srv.cpu_s(), srv.cpu_s(loop=True)
    if mode == "rate":
        rows = run_http(f"http://127.0.0.1:{srv.port}", args.rate, args.seconds, xs, seed=len(srv.label))
        lat = np.array([r["latency_ms"] for r in rows if r["status"] == 200])
        n_ok, n_bad, wall = lat.size, len(rows) - lat.size, args.seconds
    else:
        n_ok, n_bad, out = asyncio.run(_saturate(srv.port, xs, args.concurrency, args.seconds))
        wall, lat = out[0], np.array(out[1:]) * 1000
    cpu, loop = srv.cpu_s() - cpu0, srv.cpu_s(loop=True) - loop0
    p50, p99, p999 = np.percentile(lat, [50, 99, 99.9]) if lat.size else (np.nan,) * 3
    return {"p50": p50, "p99": p99, "p999": p999, "tput": n_ok / wall, "cpu_ms": 1000 * cpu / max(n_ok, 1),
            "loop_ms": 1000 * loop / max(n_ok, 1), "errors": n_bad}


def med(runs: list[dict[str, float]], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def ratio(runs: list[dict[str, float]], ref: list[dict[str, float]], key: str) -> float:
    """The median over reps of each rep's figure over the reference's in the same rep (measured in the same
    pass, so a change in the machine's load between reps cancels)."""
    return float(np.median([a[key] / b[key] for a, b in zip(runs, ref, strict=True)]))


def table(title: str, rows: list[tuple[str, dict, dict]], ref: str) -> list[str]:
    r0 = next(r for label, r, _ in rows if label == ref)
    s0 = next(s for label, _, s in rows if label == ref)
    out = [f"### {title}", "",
           f"| server | p50 ms | p99 ms | p99.9 ms | p50 / {ref} | saturation req/s | req/s / {ref} | "
           f"sat. p50 / p99 / p99.9 ms | CPU ms/req (sat.) | CPU / {ref} | loop thread CPU ms/req (sat.) | errors |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, r, s in rows:
        out.append(f"| {label} | {med(r, 'p50'):.2f} | {med(r, 'p99'):.2f} | {med(r, 'p999'):.2f} | "
                   f"{ratio(r, r0, 'p50'):.2f} | {med(s, 'tput'):.0f} | "
                   f"{ratio(s, s0, 'tput'):.2f} | {med(s, 'p50'):.1f} / {med(s, 'p99'):.1f} / "
                   f"{med(s, 'p999'):.1f} | {med(s, 'cpu_ms'):.2f} | {ratio(s, s0, 'cpu_ms'):.2f} | "
                   f"{med(s, 'loop_ms'):.2f} | {int(sum(x['errors'] for x in r + s))} |")
    return out + [""]


def coded_work(K: int, W: int, reps: int = 2000) -> list[str]:
    """A markdown table: the coded schemes' own work on the dispatcher's thread at K and N = coded_workers(K, W),
    on digits-cnn inputs and outputs (median us per call, `reps` calls after a warm-up)."""
    from gencc.codes.ordering import order_inputs
    from gencc.codes.registry import make_code
    from gencc.serving import Gate
    from gencc.serving.parity import coded_workers
    from gencc.workloads import load

    w = load("digits-cnn")
    N = coded_workers(K, W)
    X = np.asarray(w.X_test[:K], dtype=np.float32)
    R = [n for n in range(N) if n != 0]  # one straggler

    def us(fn: Any) -> float:
        fn()
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        return 1e6 * float(np.median(t))

    rows = [f"### The coded schemes' own work on the dispatcher's thread (K = {K}, N = {N}, digits-cnn)", "",
            "| code | order the group's inputs us | encode us | decode (one straggler) us | the gate's score us |",
            "|---|---|---|---|---|"]
    for name, code in (("gcc (interpolate)", make_code("gcc", K, N, decoder="interpolate")),
                       ("sgcc", make_code("sgcc", K, N))):
        Y = np.asarray(w.f(code.encode(X)), dtype=np.float32)
        Yhat = code.decode(Y[R], R)
        rows.append(f"| {name} | {us(lambda: order_inputs(X)):.1f} | {us(lambda c=code: c.encode(X)):.1f} | "
                    f"{us(lambda c=code, Y=Y: c.decode(Y[R], R)):.1f} | "
                    f"{us(lambda c=code, Y=Y, H=Yhat: Gate(0.0).scores(c, H, Y[R], R, [0])):.1f} |")
    return rows + ["", f"A group's order and encode run once per {K} requests, a decode and its score once per "
                   "degraded answer; compare the loop thread's CPU per request in the tables above.", ""]


def profile_one(args: argparse.Namespace, top: int = 30) -> None:
    """`--profile SCHEME`: one gencc server saturated by a closed loop for `--seconds`; prints the event loop
    thread's cProfile (by own time) and each thread's share of the samples with its innermost functions
    (environment variable PROFILE_DIR: keep the profile's files there, for pstats)."""
    import pstats
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.environ.get("PROFILE_DIR", tmp)
        out = str(Path(tmp) / "profile")
        srv = Server(args.profile, "gencc", args.model, args.profile, args.workers, args.K, args.slow, args.gate,
                     profile=out)
        try:
            srv.wait()
            xs = inputs(args.model)
            asyncio.run(_saturate(srv.port, xs, args.concurrency, 1.0))  # warm up
            cpu0 = srv.cpu_s()
            n_ok, n_bad, o = asyncio.run(_saturate(srv.port, xs, args.concurrency, args.seconds))
            cpu = srv.cpu_s() - cpu0
        finally:
            srv.stop()
        print(f"{args.profile} on {args.model}: {n_ok / o[0]:.0f} req/s, {1000 * cpu / max(n_ok, 1):.2f} CPU ms/req, "
              f"{n_bad} errors; load average {os.getloadavg()[0]:.2f}")
        st = pstats.Stats(out + ".prof")
        st.sort_stats("tottime").print_stats(top)
        st.sort_stats("cumulative").print_stats(top)
        samples = json.loads(Path(out + ".samples.json").read_text())
        print("dispatcher counts (whole run):", Path(out + ".counts.json").read_text())
    by_thread: dict[str, int] = {}
    for name, _, c in samples:
        base = name.rstrip("0123456789")
        by_thread[base] = by_thread.get(base, 0) + c
    total = sum(by_thread.values())
    for base, c in sorted(by_thread.items(), key=lambda kv: -kv[1]):
        fns = sorted(((f, n) for name, f, n in samples if name.rstrip("0123456789") == base), key=lambda t: -t[1])
        print(f"{base:28s} {c / total:6.1%}  " + ", ".join(f"{f} {n / c:.0%}" for f, n in fns[:6]))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.5, help="seconds per run (default 2.5)")
    ap.add_argument("--reps", type=int, default=2, help="alternated repetitions per server and mode (default 2)")
    ap.add_argument("--rate", type=float, default=60.0, help="open-loop request rate, req/s (default 60)")
    ap.add_argument("--concurrency", type=int, default=32, help="closed-loop requests at saturation (default 32)")
    ap.add_argument("--workers", type=int, default=12, help="workers / minimal app threads (default 12)")
    ap.add_argument("--K", type=int, default=8, help="coded group size (default 8)")
    ap.add_argument("--gate", choices=("off", "on"), default="off",
                    help="the coded schemes' gate (default off: its calibration takes minutes per server on a "
                         "loaded 2-core machine; it changes which decodes are sent, not the control path)")
    ap.add_argument("--out", help="write the tables to this markdown file")
    ap.add_argument("--only", help="comma-separated tables to run (digits, floor, hedge; default all) and, after "
                                   "a colon, servers (each table keeps its reference): --only floor,hedge:gcc-hedge")
    ap.add_argument("--child", choices=("minimal", "gencc"), help=argparse.SUPPRESS)
    ap.add_argument("--model", default="digits-cnn", help=argparse.SUPPRESS)
    ap.add_argument("--scheme", default="uncoded", help=argparse.SUPPRESS)
    ap.add_argument("--slow", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", metavar="SCHEME",
                    help="instead: profile one saturated gencc server of SCHEME (digits-cnn; --slow for the "
                         "injected service time) for --seconds: cProfile of its event loop's thread, and where "
                         "each of its threads was (sampled every ms)")
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.model, args.scheme, args.workers, args.K, args.slow, args.gate, args.profile_out)
        return 0
    if not (args.seconds > 0 and args.reps >= 1 and args.rate > 0 and args.concurrency >= 1):
        ap.error("--seconds, --rate must be positive; --reps, --concurrency at least 1")
    if args.profile:
        from gencc.serving.config import SCHEMES

        if args.profile.removesuffix("-ctl") not in SCHEMES:
            ap.error(f"--profile: unknown scheme {args.profile!r}; choose one of {', '.join(SCHEMES)}")
        print(machine(), flush=True)
        profile_one(args)
        return 0
    W, K = args.workers, args.K
    groups = {  # title -> (reference label, [(label, kind, model, scheme, slow)])
        "digits-cnn, model compute only": ("minimal", [
            ("minimal", "minimal", "digits-cnn", "uncoded", False),
            *((s, "gencc", "digits-cnn", s, False) for s in ("uncoded", "uncoded-ctl", "gcc", "gcc-hedge",
                                                              "sgcc-hedge"))]),
        "Floor (a torch CNN defined in the script), model compute only": ("minimal", [
            ("minimal", "minimal", "floor", "uncoded", False),
            *((s, "gencc", "floor", s, False) for s in ("uncoded", "gcc", "gcc-hedge"))]),
        "coded hedge: digits-cnn, injected 20 ms service time, 10% of the time slow x10": ("uncoded", [
            (s, "gencc", "digits-cnn", s, True) for s in ("uncoded", "gcc", "gcc-hedge", "sgcc-hedge")]),
    }
    if args.only:
        tables, _, labels = args.only.partition(":")
        keys = dict(zip(("digits", "floor", "hedge"), groups, strict=True))
        if not set(tables.split(",")) <= set(keys):
            ap.error(f"--only: tables are {', '.join(keys)}")
        groups = {keys[t]: groups[keys[t]] for t in tables.split(",")}
        if labels:
            groups = {title: (ref, [s for s in specs if s[0] == ref or s[0] in labels.split(",")])
                      for title, (ref, specs) in groups.items()}
    print(machine(), flush=True)
    t_start, load0 = time.monotonic(), os.getloadavg()
    servers = {(title, lab): Server(lab, kind, model, scheme, W, K, slow, args.gate)
               for title, (_, specs) in groups.items() for lab, kind, model, scheme, slow in specs}
    try:
        for s in servers.values():
            s.wait()
        xs = {m: inputs(m) for m in ("digits-cnn", "floor")}
        res: dict[tuple[str, str], dict[str, list]] = {k: {"rate": [], "sat": []} for k in servers}
        for rep in range(args.reps):
            for title, (_, specs) in groups.items():
                for mode in ("rate", "sat"):
                    order = specs if rep % 2 == 0 else specs[::-1]  # alternate the order between reps
                    for lab, *_ in order:
                        srv = servers[(title, lab)]
                        res[(title, lab)][mode].append(measure(srv, mode, xs[srv.model], args))
                        print(f"rep {rep} {title[:24]:24s} {lab:11s} {mode}: "
                              f"{json.dumps({k: round(v, 2) for k, v in res[(title, lab)][mode][-1].items()})}",
                              flush=True)
    finally:
        for s in servers.values():
            s.stop()
    load1 = os.getloadavg()
    lines = [generated_by(SUITE, argv), "",
             f"W = {W} workers (the minimal app: {W} threads), K = {K}; open loop at {args.rate:g} req/s "
             f"(Poisson) for the latencies, closed loop of {args.concurrency} for saturation; {args.seconds:g} s "
             f"per run, medians of {args.reps} alternated reps (ratios: the median of each rep's ratio); "
             f"gate {args.gate}. Load average (1 min) before / after: {load0[0]:.2f} / {load1[0]:.2f}, from "
             f"{min(LOADS):.2f} to {max(LOADS):.2f} over the runs, on {os.cpu_count()} cores; "
             f"{time.monotonic() - t_start:.0f} s in all.",
             ""]
    for title, (ref, specs) in groups.items():
        lines += table(title, [(lab, res[(title, lab)]["rate"], res[(title, lab)]["sat"]) for lab, *_ in specs], ref)
    lines += coded_work(K, W)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
