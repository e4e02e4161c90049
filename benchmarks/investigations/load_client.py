"""Answered: `gencc loadtest` measures the server, not itself (docs/guides/serving.md, the load generator).

Does the load generator measure the server or itself? Its own cost against a trivial server, then open-loop
load on a real `gencc serve` with the client's p50 / p99 beside the server's own histogram (/metrics).

    python benchmarks/investigations/load_client.py                         # 84 req/s for 30 s on digits-cnn, gcc
    python benchmarks/investigations/load_client.py --rate 84 --duration 60 --httpx --out docs/generated/load-client.md

Own cost: CPU time of the client's event-loop thread per request (`gencc.loadgen.load.client_cost`, against
`FixedServer`, which answers at once), and the latency it sees there (client + loopback + a trivial server).
Server side: `gencc serve` in its own process on a free 127.0.0.1 port; its latency histogram (arrival at the
service to answer) is scraped before and after the load, and quantiles are interpolated inside its buckets, so
they are accurate to a bucket's width. The client's latency also covers HTTP parsing and the door's checks.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # measure.py, shared with the suites in benchmarks/

from measure import machine  # noqa: E402

from gencc.loadgen import poisson_arrivals
from gencc.loadgen.load import client_cost, histogram_quantiles, run_http, summary
from gencc.workloads import load


def httpx_load(url: str, rate: float, duration: float, inputs: list) -> np.ndarray:
    """The generator `gencc loadtest` had before (httpx.AsyncClient, one task per request), for comparison:
    latencies (ms) of the 200 answers."""
    import asyncio

    import httpx

    async def run() -> list[float]:
        times = poisson_arrivals(rate, duration, np.random.default_rng(0))
        out: list[float] = []
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            loop = asyncio.get_running_loop()
            t0 = loop.time()

            async def one(i: int, t: float) -> None:
                await asyncio.sleep(max(t - (loop.time() - t0), 0.0))
                sent = loop.time()
                r = await client.post(url + "/predict", json={"input": inputs[i % len(inputs)]})
                r.json()
                if r.status_code == 200:
                    out.append((loop.time() - sent) * 1000)

            await asyncio.gather(*(one(i, float(t)) for i, t in enumerate(times)), return_exceptions=True)
        return out

    return np.array(asyncio.run(run()))


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except OSError:
        return 0, ""


def _httpx_rows(lat: np.ndarray, h: dict) -> list[str]:
    s = summary(lat) if lat.size else {"p50": float("nan"), "p99": float("nan")}
    return [f"| the former httpx generator, same rate | {lat.size} | {s['p50']:.1f} | {s['p99']:.1f} |",
            f"| server histogram during the httpx run | {h['count']} | {h['p50']:.1f} | {h['p99']:.1f} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=84.0, help="requests per second on gencc serve (default 84)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load (default 30)")
    ap.add_argument("--scheme", default="gcc", help="gencc serve --scheme (default gcc)")
    ap.add_argument("--httpx", action="store_true", help="also run the former httpx generator at the same rate")
    ap.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    args = ap.parse_args()
    lines = ["| client against a trivial server | requests | CPU ms per request | latency p50 ms | lag p99 ms | "
             "late |", "|---|---|---|---|---|---|"]
    for rate in (args.rate, 1000.0):
        c = client_cost(rate=rate, duration=max(2.0, 200 / rate))
        lines.append(f"| {rate:g} req/s | {c['requests']} | {c['client_cpu_ms_per_request']:.3f} | "
                     f"{c['latency_p50_ms']:.2f} | {c['lag_p99_ms']:.2f} | {c['late']} |")
        print(lines[-1], flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", "--workload", "digits-cnn", "--scheme",
                               args.scheme, "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        t_end = time.monotonic() + 120
        while get(url + "/healthz")[0] != 200:
            if server.poll() is not None or time.monotonic() > t_end:
                raise SystemExit(f"gencc serve did not start: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.3)
        X = load("digits-cnn", progress=False).X_test[:200].tolist()
        run_http(url, 20, 1.0, X)  # warm-up (first calls, connections); not counted
        before = get(url + "/metrics")[1]
        rep: dict = {}
        rows = run_http(url, args.rate, args.duration, X, report=rep)
        after = get(url + "/metrics")[1]
        if args.httpx:
            hx = httpx_load(url, args.rate, args.duration, X)
            hx_after = get(url + "/metrics")[1]
    finally:
        server.terminate()
        server.wait(30)
    ok = np.array([r["latency_ms"] for r in rows if r["status"] == 200])
    cl = summary(ok) if ok.size else {"p50": float("nan"), "p99": float("nan")}
    h = histogram_quantiles(before, after)
    lines += ["", f"| digits-cnn, {args.scheme}, {args.rate:g} req/s for {args.duration:g} s | answered | p50 ms | "
                  "p99 ms |", "|---|---|---|---|",
              f"| client (gencc loadtest's generator) | {ok.size} of {len(rows)} | {cl['p50']:.1f} | "
              f"{cl['p99']:.1f} |",
              f"| server histogram (/metrics) | {h['count']} | {h['p50']:.1f} | {h['p99']:.1f} |",
              *(_httpx_rows(hx, histogram_quantiles(after, hx_after)) if args.httpx else []),
              "", f"client during the load: {rep['client_cpu_ms_per_request']:.3f} ms CPU per request, lag p50 "
                  f"{rep['lag_p50_ms']:.2f} ms, p99 {rep['lag_p99_ms']:.2f} ms, max {rep['lag_max_ms']:.1f} ms, "
                  f"{rep['late']} late, behind schedule: {rep['behind']}"]
    print("\n".join(lines[-8 if args.httpx else -6:]))
    if args.out:
        flag = " --httpx" if args.httpx else ""
        args.out.write_text(f"Generated by `python benchmarks/investigations/load_client.py --rate {args.rate:g} "
                            f"--duration {args.duration:g}{flag} --out {args.out}`\n\n{machine()}\n\n"
                            + "\n".join(lines) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
