"""Hostile input against a real `gencc serve` (digits-cnn, gcc) on loopback: each case's status, time to the
answer, /healthz after it, and the server's RSS growth, on /predict and on the Open Inference Protocol's
/v2/models/model/infer (JSON and binary tensors); then the poison pattern (two valid requests and one 1e39
request per group, 30 rounds, on both) and 300 half-sent bodies and headers against the read timeout. Oversized
headers (a 1 MB line, 10,000 of them) are among the cases.

    python benchmarks/run.py hostile-input
    python benchmarks/run.py hostile-input --out docs/generated/hostile-input.md

The server runs in its own process (started here on a free 127.0.0.1 port, stopped at the end); RSS is read
from /proc/<pid>/status before and after each case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from measure import free_port, generated_by, machine

from gencc.loadgen import HttpClient
from gencc.workloads import load

SUITE = "hostile-input"
MB = 2 ** 20
V2 = "/v2/models/model/infer"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS")) / 1024


def exchange(port: int, head: bytes, body: bytes = b"", timeout: float = 30.0) -> tuple[int, float]:
    """Send head + body (body from a thread, so an early answer is seen while it is still being sent); the
    status and the seconds to it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t = time.perf_counter()
        s.sendall(head)

        def push() -> None:
            try:
                s.sendall(body)
            except OSError:
                pass

        th = threading.Thread(target=push, daemon=True)
        th.start()
        data = b""
        try:
            while b"\r\n" not in data and (chunk := s.recv(65536)):
                data += chunk
        except OSError:
            pass
        elapsed = time.perf_counter() - t
        th.join(timeout)
    return (int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1") else 0), elapsed


def post(port: int, body: bytes, ctype: str = "application/json", path: str = "/predict") -> tuple[int, float]:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return exchange(port, head, body)


def chunked(port: int, total: int, path: str = "/predict") -> tuple[int, float]:
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
            "\r\n\r\n").encode()
    piece = b"%x\r\n%s\r\n" % (MB, b"[0.5," * (MB // 5) + b"0" * (MB % 5))
    return exchange(port, head, piece * (total // MB) + b"0\r\n\r\n")


def healthz(port: int) -> tuple[int, float]:
    return exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")


def x_body(value: str, shape: tuple[int, ...] = (1, 8, 8)) -> bytes:
    a = np.full(shape, 0.25).tolist()
    return json.dumps({"input": a}).replace("0.25", value, 1).encode()


def v2_json(data: str, shape: str = "[1,1,8,8]", datatype: str = "FP32") -> bytes:
    """An Open Inference Protocol infer body with the tensor as JSON `data`."""
    return (f'{{"inputs":[{{"name":"input","shape":{shape},"datatype":"{datatype}","data":{data}}}]}}').encode()


def v2_binary(port: int, x: np.ndarray, size: int | None = None) -> tuple[int, float]:
    """POST x (B, 1, 8, 8) as a binary tensor after the JSON header (`size`: the declared binary_data_size)."""
    blob = np.asarray(x, dtype="<f4").tobytes()
    head = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": len(blob) if size is None else size}}]}).encode()
    req = (f"POST {V2} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
           f"Inference-Header-Content-Length: {len(head)}\r\nContent-Length: {len(head) + len(blob)}\r\n\r\n")
    return exchange(port, req.encode(), head + blob)


def v2_cases() -> list[tuple[str, object]]:
    """The same kinds of hostile input on the Open Inference Protocol's infer route."""
    flat = ",".join(["0.25"] * 64)
    one = np.full((1, 1, 8, 8), 0.25, dtype=np.float32)
    nan = one.copy()
    nan[0, 0, 0, 0] = np.nan
    return [
        ("v2: depth 10,000", lambda p: post(p, v2_json("[" * 10_000 + "]" * 10_000), path=V2)),
        ("v2: 1e39 (inf in float32)", lambda p: post(p, v2_json("[1e39," + flat[5:] + "]"), path=V2)),
        ("v2: NaN literal", lambda p: post(p, v2_json("[NaN," + flat[5:] + "]"), path=V2)),
        ("v2: booleans", lambda p: post(p, v2_json("[" + ",".join(["true"] * 64) + "]"), path=V2)),
        ("v2: wrong shape", lambda p: post(p, v2_json("[" + flat + "]", shape="[1,8,8]"), path=V2)),
        ("v2: datatype INT64", lambda p: post(p, v2_json("[" + flat + "]", datatype="INT64"), path=V2)),
        ("v2: unknown model", lambda p: post(p, v2_json("[" + flat + "]"), path="/v2/models/other/infer")),
        ("v2: binary, NaN", lambda p: v2_binary(p, nan)),
        ("v2: binary, size mismatch", lambda p: v2_binary(p, one, size=255)),
        ("v2: binary, 100,000-item batch", lambda p: v2_binary(p, np.zeros((100_000, 1, 8, 8), np.float32))),
        ("v2: text/plain", lambda p: post(p, v2_json("[" + flat + "]"), ctype="text/plain", path=V2)),
        ("v2: 50 MB body (chunked)", lambda p: chunked(p, 50 * MB, path=V2)),
        ("v2: 1 MB header line", lambda p: exchange(p, f"POST {V2} HTTP/1.1\r\nHost: x\r\nX-Pad: ".encode(),
                                                    b"a" * MB + b"\r\n\r\n")),
    ]


def cases(x: list) -> list[tuple[str, object]]:
    huge = b'{"input": [' + b"0.123456789," * (50 * MB // 12) + b"0]}"
    return [
        ("depth 10,000", lambda p: post(p, b'{"input": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")),
        ("10**400", lambda p: post(p, x_body("1" + "0" * 400))),
        ("1e39 (inf in float32)", lambda p: post(p, x_body("1e39"))),
        ("NaN literal", lambda p: post(p, x_body("NaN"))),
        ("booleans", lambda p: post(p, json.dumps({"input": np.full((1, 8, 8), True).tolist()}).encode())),
        ('numeric strings "0.5"', lambda p: post(p, x_body('"0.5"'))),
        ("UTF-16 body", lambda p: post(p, json.dumps({"input": x}).encode("utf-16"))),
        ("text/plain", lambda p: post(p, json.dumps({"input": x}).encode(), ctype="text/plain")),
        ("100,000-item batch", lambda p: post(p, json.dumps({"inputs": [x] * 100_000}).encode(),
                                              path="/predict/batch")),
        ("50 MB body (Content-Length)", lambda p: post(p, huge)),
        ("50 MB body (chunked)", lambda p: chunked(p, 50 * MB)),
        ("1 MB header line", lambda p: exchange(p, b"POST /predict HTTP/1.1\r\nHost: x\r\nX-Pad: ",
                                                b"a" * MB + b"\r\n\r\n")),
        ("10,000 headers", lambda p: exchange(p, b"POST /predict HTTP/1.1\r\nHost: x\r\n",
                                              b"".join(b"X-%d: 1\r\n" % i for i in range(10_000)) + b"\r\n")),
        *v2_cases(),
    ]


def half_sent(port: int, n: int, read_timeout: float, headers_only: bool, path: str = "/predict"
              ) -> tuple[int, float]:
    """Open n connections that send half a request; how many are still open read_timeout + 1 s later."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Le".encode() if headers_only else
                  f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000"
                  "\r\n\r\n{\"input\": [[".encode())
        socks.append(s)
    t = time.perf_counter()
    time.sleep(read_timeout + 1.0)
    still = 0
    for s in socks:
        s.setblocking(False)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break  # closed by the server
        except BlockingIOError:
            still += 1  # nothing more to read and not closed: still held open
        except OSError:
            pass
        s.close()
    return still, time.perf_counter() - t


def poison(port: int, X: np.ndarray, rounds: int = 30, v2: bool = False) -> dict:
    """v2: the valid inputs as binary tensors to the Open Inference Protocol's route, the poison as JSON there."""
    def body(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
        if not v2:
            return json.dumps({"input": x.tolist()}).encode(), {"Content-Type": "application/json"}
        blob = np.asarray(x[None], dtype="<f4").tobytes()
        head = json.dumps({"inputs": [{"name": "input", "shape": [1, *x.shape], "datatype": "FP32",
                                       "parameters": {"binary_data_size": len(blob)}}]}).encode()
        return head + blob, {"Content-Type": "application/octet-stream",
                             "Inference-Header-Content-Length": str(len(head))}

    path = V2 if v2 else "/predict"

    async def run() -> dict:
        c = HttpClient("127.0.0.1", port, max_connections=8, timeout=30)
        hdr = {"Content-Type": "application/json"}
        bad = c.encode("POST", path, v2_json("[1e39" + ",0.25" * 63 + "]") if v2 else x_body("1e39"), hdr)
        valid, poisoned, worst = [], [], 0.0
        for r in range(rounds):
            raws = [c.encode("POST", path, *body(X[(2 * r + j) % len(X)])) for j in range(2)]

            async def timed(raw: bytes) -> tuple[int, float]:
                t = time.perf_counter()
                status, _ = await c.request(raw)
                return status, time.perf_counter() - t

            (s0, t0), (sp, _), (s1, t1) = await asyncio.gather(timed(raws[0]), timed(bad), timed(raws[1]))
            valid += [s0, s1]
            poisoned.append(sp)
            worst = max(worst, t0, t1)
        c.close()
        return {"valid_200": valid.count(200), "valid": len(valid), "poison_422": poisoned.count(400 if v2 else 422),
                "poison": len(poisoned), "worst_valid_s": worst}

    return asyncio.run(run())


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--read-timeout-ms", type=float, default=2000.0,
                    help="the server's --read-timeout-ms (default 2000)")
    ap.add_argument("--half-sent", type=int, default=300, help="half-sent connections (default 300)")
    ap.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if not 0 < args.read_timeout_ms <= 60000:
        ap.error(f"--read-timeout-ms must be a number of ms in (0, 60000], got {args.read_timeout_ms:g}")
    if args.half_sent < 1:
        ap.error(f"--half-sent must be a positive integer, got {args.half_sent}")
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        ap.error(f"--out must be a file in an existing folder, got {args.out}")
    print(machine(), flush=True)
    port = free_port()
    cmd = [sys.executable, "-m", "gencc.cli", "serve", "--workload", "digits-cnn", "--scheme", "gcc",
           "--port", str(port), "--read-timeout-ms", f"{args.read_timeout_ms:g}"]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines = []
    try:
        t_end = time.monotonic() + 120
        while not (_listening(port) and healthz(port)[0] == 200):
            if server.poll() is not None or time.monotonic() > t_end:
                raise SystemExit(f"gencc serve did not start: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.3)
        X = load("digits-cnn", progress=False).X_test
        x = X[0].tolist()
        lines += ["| case | status | answer ms | /healthz after | RSS growth MB |", "|---|---|---|---|---|"]
        for name, fn in cases(x):
            r0 = rss_mb(server.pid)
            status, secs = fn(port)
            h, hs = healthz(port)
            lines.append(f"| {name} | {status} | {secs * 1000:.1f} | {h} in {hs * 1000:.1f} ms | "
                         f"{rss_mb(server.pid) - r0:+.1f} |")
            print(lines[-1], flush=True)
        lines += ["", "| half-sent connections | still open after read timeout + 1 s | /healthz after |",
                  "|---|---|---|"]
        for kind, headers_only, path in (("bodies", False, "/predict"), ("headers", True, "/predict"),
                                         ("v2 bodies", False, V2), ("v2 headers", True, V2)):
            still, _ = half_sent(port, args.half_sent, args.read_timeout_ms / 1e3, headers_only, path)
            h, hs = healthz(port)
            lines.append(f"| {args.half_sent} half-sent {kind} | {still} | {h} in {hs * 1000:.1f} ms |")
            print(lines[-1], flush=True)
        lines += ["", "| poison pattern (2 valid + one 1e39 per group, 30 rounds) | valid 200 | poison refused (422; "
                      "v2: 400) | slowest valid s |", "|---|---|---|---|"]
        for label, v2 in (("gcc, K = 8, W = 12, /predict", False), ("gcc, K = 8, W = 12, v2 binary", True)):
            p = poison(port, X, v2=v2)
            lines.append(f"| {label} | {p['valid_200']} of {p['valid']} | {p['poison_422']} of {p['poison']} | "
                         f"{p['worst_valid_s']:.3f} |")
            print(lines[-1], flush=True)
    finally:
        server.terminate()
        server.wait(30)
    if args.out:
        args.out.write_text(f"{generated_by(SUITE, argv)}\n\n{machine()}\n\n" + "\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    return 0


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
