"""The chaos run's independent client (benchmarks/chaos.py starts it as a process of its own): open-loop Poisson
load on a `gencc serve` at 127.0.0.1:PORT, plus bursts, every answer checked against the model computed here.

    python benchmarks/chaos_parts/client.py --port 8000 --rate 20 --duration 600 --out records.npz

It loads the workload (the same model the server serves), prints "ready", reads the start time (an epoch, one
line on stdin; the orchestrator uses the same clock for its faults), then sends request i at start + t_i
(Poisson arrivals at --rate, independent of the answers), each on a keep-alive connection of
`gencc.loadgen.HttpClient` (a fresh one when none is free). A burst "T:N:MS" sends N requests at once at T
seconds, each with `X-Deadline-Ms: MS` (past the server's capacity: some are refused with 503 at admission,
some miss their deadline with 504). Every 200 answer is checked: an exact one must equal the local model's
output (to float32 rounding), a degraded one (decoded from coded results) is scored by whether its top-1 class is
the model's. A request with no HTTP answer (connection refused, closed, no answer in --timeout-ms) is lost.
Written to --out (numpy .npz): per request the send time, kind (0 load, 1 burst), status (0: lost), latency,
degraded, wrong, top-1 agreement; and the lost requests' error kinds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

#: exact answers must equal the local model's output within float32 rounding (a different batch may sum in
#: another order)
RTOL, ATOL = 1e-4, 1e-5


def parse_bursts(text: str) -> list[tuple[float, int, float]]:
    """ "T:N:MS,..." -> [(T seconds, N requests, deadline ms)]."""
    out = []
    for part in filter(None, text.split(",")):
        t, n, ms = part.split(":")
        out.append((float(t), int(n), float(ms)))
    return out


def schedule(rate: float, duration: float, bursts: list[tuple[float, int, float]], seed: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send times, kinds, deadlines in ms or 0) of every request, in time order."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * duration)
    t = np.sort(rng.uniform(0.0, duration, size=n))
    kind, deadline = np.zeros(n, np.int8), np.zeros(n)
    for at, count, ms in bursts:
        t = np.concatenate([t, np.full(count, at)])
        kind = np.concatenate([kind, np.ones(count, np.int8)])
        deadline = np.concatenate([deadline, np.full(count, ms)])
    order = np.argsort(t, kind="stable")
    return t[order], kind[order], deadline[order]


async def drive(port: int, start: float, times: np.ndarray, kinds: np.ndarray, deadlines: np.ndarray,
                X: np.ndarray, truth: np.ndarray, timeout_s: float) -> dict[str, np.ndarray]:
    """Send every request at its time; the per-request records."""
    from gencc.loadgen import HttpClient
    from gencc.loadgen.client import Pending

    n = len(times)
    status = np.zeros(n, np.int16)
    latency = np.full(n, np.nan)
    degraded, wrong, agree = (np.zeros(n, bool) for _ in range(3))
    errors: collections.Counter[str] = collections.Counter()
    client = HttpClient("127.0.0.1", port, max_connections=1024, timeout=timeout_s)
    loop = asyncio.get_running_loop()
    offset = start - time.time() + loop.time()  # the start time on the loop's clock
    hdr = {"Content-Type": "application/json"}
    bodies = [json.dumps({"input": x.tolist()}).encode() for x in X]
    left = n
    finished = loop.create_future()

    def record(i: int, j: int, sent: float):
        def done(code: int, body: bytes, err) -> None:
            nonlocal left
            status[i], latency[i] = code, loop.time() - sent
            if err is not None:
                errors[err.kind if hasattr(err, "kind") else type(err).__name__] += 1
            elif code == 200:
                try:
                    answer = json.loads(body)
                    out = np.asarray(answer["output"], dtype=float).ravel()
                    degraded[i] = bool(answer.get("degraded"))
                    agree[i] = out.size == truth[j].size and int(np.argmax(out)) == int(np.argmax(truth[j]))
                    wrong[i] = not degraded[i] and not (out.shape == truth[j].shape
                                                        and np.allclose(out, truth[j], rtol=RTOL, atol=ATOL))
                except (ValueError, KeyError, TypeError):
                    wrong[i] = True  # a 200 that is not an answer
            left -= 1
            if left == 0 and not finished.done():
                finished.set_result(None)
        return done

    for i in range(n):
        delay = offset + float(times[i]) - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        j = i % len(X)
        headers = hdr if not deadlines[i] else {**hdr, "X-Deadline-Ms": f"{deadlines[i]:g}"}
        client.send(Pending(client.encode("POST", "/predict", bodies[j], headers), record(i, j, loop.time())))
    if n:
        try:
            await asyncio.wait_for(finished, timeout_s + 10)
        except asyncio.TimeoutError:
            pass
    client.close()
    return {"t": times, "kind": kinds, "status": status, "latency": latency, "degraded": degraded,
            "wrong": wrong, "agree": agree, "error_kinds": np.array(list(errors), dtype=str),
            "error_counts": np.array(list(errors.values()), dtype=np.int64)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="the server's port on 127.0.0.1")
    ap.add_argument("--rate", type=float, required=True, help="requests per second (Poisson)")
    ap.add_argument("--duration", type=float, required=True, help="seconds of load")
    ap.add_argument("--bursts", default="", help="T:N:MS,... bursts of N requests at T s with deadline MS ms")
    ap.add_argument("--workload", default="digits-cnn", help="the model the server serves (default digits-cnn)")
    ap.add_argument("--timeout-ms", type=float, default=30000.0, help="ms to wait for an answer (default 30000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="the records (.npz)")
    args = ap.parse_args(argv)
    from gencc.workloads import load

    w = load(args.workload, progress=False)
    X = np.asarray(w.X_test, dtype=np.float32)[:256]
    truth = np.asarray(w.f(X), dtype=float).reshape(len(X), -1)
    times, kinds, deadlines = schedule(args.rate, args.duration, parse_bursts(args.bursts), args.seed)
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    rec = asyncio.run(drive(args.port, start, times, kinds, deadlines, X, truth, args.timeout_ms / 1000))
    np.savez(args.out, **rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
