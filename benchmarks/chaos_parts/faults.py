"""The chaos run's faults (benchmarks/chaos.py): actors killed by PID, worker nodes removed and added, the head
node lost, on a `gencc.engine.ray.LocalCluster`; hostile traffic (malformed requests, slow connections) on the
server; the server as a process (started, watched, stopped). Run inside the loopback-only network namespace."""

from __future__ import annotations

import collections
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from hostile_input import V2, exchange, post, v2_json, x_body


def _psutil() -> Any:
    import importlib

    import ray  # noqa: F401 - puts Ray's bundled psutil on sys.path

    return importlib.import_module("psutil")


class Nodes:
    """The nodes of the run's cluster(s), labelled as they are added ("head", "node 1", ...; after the head's loss
    the operator's fresh cluster: "new head", "new 1", ...), and the actor processes on each."""

    def __init__(self, cluster: Any):
        self.clusters = [cluster]
        self.labels: list[tuple[str, Any]] = [("head", cluster.cluster.head_node)]
        self.labels += [(f"node {i + 1}", n) for i, n in enumerate(cluster.nodes)]
        self.gone: set[str] = set()

    def adopt(self, cluster: Any, prefix: str = "new") -> None:
        """The operator's fresh cluster after the head's loss."""
        self.clusters.append(cluster)
        self.labels.append((f"{prefix} head", cluster.cluster.head_node))
        self.labels += [(f"{prefix} {i + 1}", n) for i, n in enumerate(cluster.nodes)]

    def actors(self) -> dict[str, list[int]]:
        """label -> PIDs of the gencc actor processes on that node (nodes gone left out)."""
        psutil = _psutil()
        out: dict[str, list[int]] = {}
        for label, node in self.labels:
            if label in self.gone:
                continue
            pids = []
            for info in node.all_processes.get("raylet") or []:
                try:
                    kids = psutil.Process(info.process.pid).children(recursive=True)
                except psutil.Error:
                    continue
                for k in kids:
                    try:
                        if k.cmdline()[:1] and k.cmdline()[0].startswith("ray::_Actor"):
                            pids.append(k.pid)
                    except psutil.Error:
                        pass
            out[label] = pids
        return out

    def placement(self) -> str:
        """Actors per node now, e.g. "head 2, node 1 4, node 2 lost, ..."."""
        got = self.actors()
        return ", ".join(f"{label} {len(got[label]) if label in got else 'lost'}" for label, _ in self.labels)

    def kill_actors(self, count: int, rng: np.random.Generator) -> str:
        """SIGKILL `count` actor processes (at most a quarter of them, at least one) chosen at random over the nodes
        left."""
        where = [(label, pid) for label, pids in self.actors().items() for pid in pids]
        if not where:
            return "no actor process found"
        count = min(count, max(1, len(where) // 4))
        picked = [where[i] for i in rng.choice(len(where), size=count, replace=False)]
        for _, pid in picked:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return ", ".join(f"pid {pid} on {label}" for label, pid in picked)

    def remove_worker(self) -> str:
        """Remove the worker node of the first cluster holding the most actors, with every process on it."""
        cluster = self.clusters[0]
        got = self.actors()
        live = [(i, f"node {i + 1}") for i in range(len(cluster.nodes)) if f"node {i + 1}" not in self.gone]
        if not live:
            return "no worker node left to remove"
        i, label = max(live, key=lambda il: len(got.get(il[1], [])))
        n = len(got.get(label, []))
        cluster.remove(i)
        self.gone.add(label)
        return f"{label} (holding {n} actors)"

    def add_worker(self) -> str:
        """Add a worker node to the first cluster (as LocalCluster's own are made)."""
        from gencc.engine.ray.cluster import NODE_RESOURCE

        cluster = self.clusters[0]
        add = getattr(cluster, "add", None)
        if callable(add):
            add()
            node = cluster.nodes[-1]
        else:
            node = cluster.cluster.add_node(node_ip_address="127.0.0.1", object_store_memory=100 * 2**20, num_cpus=1,
                                            resources={NODE_RESOURCE: 10_000})
            cluster.nodes.append(node)
        label = f"node {len(cluster.nodes)}"
        self.labels.append((label, node))
        return label

    def lose_head(self) -> str:
        """Kill the head node at once (its GCS, raylet and every process they started), as a lost machine."""
        psutil = _psutil()
        cluster = self.clusters[0]
        head = cluster.cluster.head_node
        n = len(self.actors().get("head", []))
        for info in head.all_processes.get("raylet") or []:
            try:
                for k in psutil.Process(info.process.pid).children(recursive=True):
                    try:
                        k.kill()
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
        cluster.cluster.remove_node(head, allow_graceful=False)
        self.gone.add("head")
        return f"head (GCS and raylet, holding {n} actors)"


class Server:
    """`gencc serve` as a process of its own on 127.0.0.1:port, its output in a log file."""

    def __init__(self, argv: list[str], port: int, log: Path):
        self.argv, self.port, self.log = argv, port, log
        self.proc: subprocess.Popen | None = None

    def start(self, address: str) -> None:
        with open(self.log, "a") as fh:
            self.proc = subprocess.Popen([sys.executable, "-m", "gencc.cli", "serve", "--address", address,
                                          "--port", str(self.port), *self.argv], stdout=fh, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float) -> float:
        """Seconds until /healthz says ok; RuntimeError (with the log's tail) if it exits or times out first."""
        t0 = time.monotonic()
        while health(self.port)[0] != 200:
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                raise RuntimeError(f"gencc serve did not become ready:\n{self.tail(3000)}")
            time.sleep(0.3)
        return time.monotonic() - t0

    def tail(self, n: int = 400) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS")) / 1024
        except (OSError, StopIteration, AttributeError):
            return float("nan")

    def stop(self, timeout: float = 60.0) -> tuple[int | None, float]:
        """SIGTERM; (exit status, seconds to exit)."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else None), 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout), time.monotonic() - t0
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(), time.monotonic() - t0


def health(port: int, timeout: float = 2.0) -> tuple[int, dict]:
    """(status, body) of GET /healthz; (0, {}) when nothing answers."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", "/healthz")
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, json.loads(body or b"{}")
    except (OSError, ValueError, http.client.HTTPException):
        return 0, {}


def malformed(port: int) -> list[tuple[str, Any]]:
    """Malformed requests, each answered with a 4xx by a healthy server."""
    flat = ",".join(["0.25"] * 64)
    return [
        ("depth 10,000", lambda: post(port, b'{"input": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")),
        ("10**400", lambda: post(port, x_body("1" + "0" * 400))),
        ("1e39", lambda: post(port, x_body("1e39"))),
        ("NaN", lambda: post(port, x_body("NaN"))),
        ("strings", lambda: post(port, x_body('"0.5"'))),
        ("truncated JSON", lambda: post(port, b'{"input": [[0.5, ')),
        ("text/plain", lambda: post(port, x_body("0.5"), ctype="text/plain")),
        ("wrong shape", lambda: post(port, x_body("0.5", shape=(3, 3)))),
        ("v2 wrong shape", lambda: post(port, v2_json("[" + flat + "]", shape="[1,8,8]"), path=V2)),
        ("v2 INT64", lambda: post(port, v2_json("[" + flat + "]", datatype="INT64"), path=V2)),
        ("not HTTP", lambda: exchange(port, b"HELLO THERE\r\n\r\n")),
    ]


def half_sent(port: int, n: int) -> list[socket.socket]:
    """n connections that send half a request's headers or body, then nothing."""
    socks = []
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Le" if i % 2 else
                      b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000"
                      b"\r\n\r\n{\"input\": [[")
            socks.append(s)
        except OSError:
            pass
    return socks


def closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.close()


def hostile(port: int, seconds: float, read_timeout_s: float, stop: threading.Event, out: dict) -> None:
    """For `seconds`: malformed requests (about 5 a second, in turn) and slow connections (10 half-sent every
    read timeout + 1 s, each checked then: closed by the server or still held). Counts go to `out`."""
    cases = malformed(port)
    statuses: collections.Counter[str] = collections.Counter()
    held: list[tuple[float, list[socket.socket]]] = []
    slow = closed = still = 0
    t_end, i = time.monotonic() + seconds, 0
    while time.monotonic() < t_end and not stop.is_set():
        if not held or time.monotonic() - held[-1][0] >= read_timeout_s + 1:
            socks = half_sent(port, 10)
            slow += len(socks)
            held.append((time.monotonic(), socks))
        name, fn = cases[i % len(cases)]
        status, _ = fn()
        statuses[str(status)] += 1
        i += 1
        while held and time.monotonic() - held[0][0] >= read_timeout_s + 1:
            for s in held.pop(0)[1]:
                ok = closed_by_server(s)
                closed, still = closed + ok, still + (not ok)
        stop.wait(0.2)
    time.sleep(max(0.0, read_timeout_s + 1 - (time.monotonic() - held[-1][0])) if held else 0.0)
    for _, socks in held:
        for s in socks:
            ok = closed_by_server(s)
            closed, still = closed + ok, still + (not ok)
    out.update(malformed=i, statuses=dict(sorted(statuses.items())), slow=slow, closed=closed, still_open=still)
