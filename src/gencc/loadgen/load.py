"""Open-loop load: Poisson arrivals independent of answers, over HTTP (`gencc.loadgen.client`, raw asyncio
keep-alive) or in process; the generator's lag against its schedule and its own cost; the server's histogram
quantiles between two /metrics scrapes; tidy CSV rows; figures (p50 / p99 / p99.9 against offered load per
scheme, latency CDFs at one load)."""

from __future__ import annotations

import asyncio
import csv
import functools
import json
import logging
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from .arrivals import poisson_arrivals
from .client import ClientError, FixedServer, HttpClient, Pending

log = logging.getLogger(__name__)
FIELDS = ("id", "scheme", "rate", "send_s", "lag_ms", "latency_ms", "status", "degraded", "error")


def run_inprocess(service: Any, rate: float, duration: float, inputs: np.ndarray, seed: int = 0,
                  timeout: float = 60.0) -> list[dict[str, Any]]:
    """Submit inputs to a `Service` at Poisson times for `duration` s; one row per request (all answered)."""
    times = poisson_arrivals(rate, duration, np.random.default_rng(seed))
    t0 = time.perf_counter()
    futs = []
    for i, t in enumerate(times):
        delay = t - (time.perf_counter() - t0)
        if delay > 0:
            time.sleep(delay)
        futs.append((t, service.submit(inputs[i % len(inputs)])))
    rows = []
    for i, (t, f) in enumerate(futs):
        r = f.result(timeout=timeout)
        rows.append({"id": i, "scheme": service.scheme, "rate": rate, "send_s": round(float(t), 6),
                     "latency_ms": round(r.latency * 1000, 3), "status": r.status, "degraded": int(r.degraded),
                     "error": r.error})
    return rows


#: a request sent this much later than its scheduled time counts as late (the generator fell behind)
LATE_MS = 5.0


async def _http(url: str, rate: float, duration: float, inputs: Sequence[Any], seed: int, timeout: float,
                max_connections: int, api_key: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    u = urlparse(url)
    times = poisson_arrivals(rate, duration, np.random.default_rng(seed))
    rows: list[dict[str, Any]] = [{} for _ in times]
    loop = asyncio.get_running_loop()
    client = HttpClient(u.hostname or "127.0.0.1", u.port or 80, max_connections, timeout)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    path = (u.path.rstrip("/") or "") + "/predict"
    raws = [client.encode("POST", path, json.dumps({"input": x}).encode(), headers)
            for x in inputs[:max(1, min(len(inputs), len(times)))]]
    lags = np.zeros(len(times))
    left = [len(times)]
    finished = loop.create_future()

    def record(i: int, due: float, p: Pending, status: int, raw: bytes, error: ClientError | None) -> None:
        scheme, degraded, err = "", 0, "" if error is None else str(error)[:120]
        sent = p.sent or due
        if error is None:
            try:
                body = json.loads(raw) if raw else {}
            except ValueError as e:
                body, err = {}, f"RemoteProtocolError: answer is not JSON ({e})"[:120]
            if isinstance(body, dict):
                scheme = str(body.get("scheme", ""))
                degraded = int(bool(body.get("degraded", False)))
                if status != 200:
                    err = str(body.get("detail", ""))[:120]
        lags[i] = sent - due
        rows[i] = {"id": i, "scheme": scheme, "rate": rate, "send_s": round(sent - t0, 6),
                   "lag_ms": round((sent - due) * 1000, 3), "latency_ms": round((loop.time() - sent) * 1000, 3),
                   "status": status, "degraded": degraded, "error": err}
        left[0] -= 1
        if not left[0] and not finished.done():
            finished.set_result(None)

    cpu0 = time.thread_time()
    t0 = loop.time()
    for i, t in enumerate(times):
        due = t0 + float(t)
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        p = Pending(raws[i % len(raws)], lambda *a: None)
        p.done = functools.partial(record, i, due, p)
        client.send(p)
    if left[0]:
        await finished
    cpu = time.thread_time() - cpu0
    client.close()
    report = schedule_report(lags * 1000, cpu)
    report["connections"] = client.opened
    return rows, report


def schedule_report(lag_ms: np.ndarray, cpu_s: float) -> dict[str, Any]:
    """How well the generator kept its schedule: lag percentiles (ms, send time minus scheduled time), the
    number of late requests (over LATE_MS), `behind` (more than 1% late), and its own CPU per request (ms)."""
    n = max(int(lag_ms.size), 1)
    p50, p99 = np.percentile(lag_ms, [50, 99]) if lag_ms.size else (0.0, 0.0)
    late = int((lag_ms > LATE_MS).sum())
    return {"requests": int(lag_ms.size), "lag_p50_ms": float(p50), "lag_p99_ms": float(p99),
            "lag_max_ms": float(lag_ms.max()) if lag_ms.size else 0.0, "late": late,
            "behind": late > 0.01 * n, "client_cpu_ms_per_request": 1000 * cpu_s / n}


def run_http(url: str, rate: float, duration: float, inputs: Sequence[Any], seed: int = 0, timeout: float = 30.0,
             max_connections: int = 512, api_key: str | None = None, report: dict[str, Any] | None = None
             ) -> list[dict[str, Any]]:
    """Open-loop Poisson load on `url`/predict (a raw asyncio HTTP/1.1 keep-alive client); one row per request
    (status 0: no HTTP answer; lag_ms: how late it left against its schedule). `report`, if given, receives
    `schedule_report`'s fields and a warning is logged when the generator fell behind its schedule."""
    rows, rep = asyncio.run(_http(url, rate, duration, inputs, seed, timeout, max_connections, api_key))
    if rep["behind"]:
        log.warning("the load generator fell behind its schedule: %d of %d requests left over %g ms late "
                    "(p99 lag %.1f ms, max %.1f ms); latencies are counted from the actual send", rep["late"],
                    rep["requests"], LATE_MS, rep["lag_p99_ms"], rep["lag_max_ms"])
    if report is not None:
        report.update(rep)
    return rows


def client_cost(rate: float = 2000.0, duration: float = 2.0, inputs: Sequence[Any] = ((0.0,) * 64,)
                ) -> dict[str, Any]:
    """The generator's own cost: `schedule_report` of a run against `FixedServer` (answers at once), with
    `client_cpu_ms_per_request` its CPU time per request (thread CPU time of the client's event loop)."""
    rep: dict[str, Any] = {}
    with FixedServer() as srv:
        rows = run_http(f"http://127.0.0.1:{srv.port}", rate, duration, [list(x) for x in inputs], report=rep)
    rep["answered"] = sum(r["status"] == 200 for r in rows)
    rep["latency_p50_ms"] = float(np.median([r["latency_ms"] for r in rows]))
    return rep


def histogram_quantiles(before: str, after: str, qs: Sequence[float] = (0.5, 0.99),
                        name: str = "gencc_request_latency_seconds") -> dict[str, Any]:
    """Quantiles (ms) of the answers the server counted between two /metrics scrapes, interpolated inside its
    histogram's buckets (as Prometheus' histogram_quantile does): {"count": n, "p50": ms, ...}."""
    def buckets(text: str) -> dict[float, float]:
        out = {}
        for ln in text.splitlines():
            if ln.startswith(name + "_bucket{"):
                le = ln.split('le="', 1)[1].split('"', 1)[0]
                out[float(le)] = float(ln.rsplit(" ", 1)[1])
        return out

    b0, b1 = buckets(before), buckets(after)
    edges = sorted(b1)
    cum = np.array([b1[e] - b0.get(e, 0.0) for e in edges])
    res: dict[str, Any] = {"count": int(cum[-1]) if cum.size else 0}
    for q in qs:
        key = f"p{q * 100:g}".replace(".", "")
        if not res["count"]:
            res[key] = float("nan")
            continue
        rank = q * cum[-1]
        j = int(np.searchsorted(cum, rank))
        lo, hi = (0.0 if j == 0 else edges[j - 1]), edges[j]
        below = 0.0 if j == 0 else cum[j - 1]
        if math.isinf(hi):
            res[key] = lo * 1000  # beyond the last finite bucket: its lower edge (a lower bound)
        else:
            res[key] = 1000 * (lo + (hi - lo) * (rank - below) / max(cum[j] - below, 1e-12))
    return res


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Load rows as a CSV at `path` (its folder must exist: none is created)."""
    p = Path(path)
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    return p


def served_input(url: str, api_key: str | None = None, timeout: float = 5.0) -> tuple[str, tuple[int, ...]] | None:
    """(name, shape of one input) of the model a gencc server serves, read from its Open Inference Protocol
    metadata (GET URL/v2/models); None when the server does not say (not gencc's, an older one, an error)."""
    import httpx

    try:
        r = httpx.get(url.rstrip("/") + "/v2/models", timeout=timeout,
                      headers={"Authorization": f"Bearer {api_key}"} if api_key else None)
        meta = r.json()["models"][0] if r.status_code == 200 else None
        if meta is None:
            return None
        shape = meta["inputs"][0]["shape"]
        return str(meta["name"]), tuple(int(d) for d in shape[1:])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None


#: where an error message starts echoing the request's input ("..., found [[0.0, 0.1, ..."), cut off to group
_ECHO = re.compile(r"[,;:]?\s*\(?\b(?:found|got)\b.*$")


def failure_kind(status: int, error: str) -> str:
    """What went wrong with one unanswered request, without what varies between requests (the input it echoes,
    the index of the row): "422: 'input'[i] has 12 items: this model takes inputs of shape [13]"."""
    text = _ECHO.sub("", " ".join(str(error or "").split()))
    text = re.sub(r"(?<=['\]])\[\d+\]", "[i]", text).strip(" ,;:")  # 'input'[3][0]: which row, which item
    head = "no answer" if int(status) == 0 else str(int(status))
    return f"{head}: {text}" if text else head


def failures(rows: Sequence[dict[str, Any]], most: int = 5) -> list[str]:
    """The kinds of failure of the unanswered requests (status other than 200), most frequent first, with their
    counts: "422 x 40: input has 12 items ..."; at most `most` kinds, then how many requests the rest had."""
    counts: dict[str, int] = {}
    for r in rows:
        if int(r["status"]) != 200:
            k = failure_kind(int(r["status"]), str(r.get("error") or ""))
            counts[k] = counts.get(k, 0) + 1
    kinds = sorted(counts.items(), key=lambda kv: -kv[1])
    out = []
    for kind, n in kinds[:most]:
        head, _, text = kind.partition(": ")
        out.append(f"{head} x {n}" + (f": {text}" if text else ""))
    rest = sum(n for _, n in kinds[most:])
    if rest:
        out.append(f"{rest} more of {len(kinds) - most} other kinds")
    return out


def accounting(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where every request sent went: sent = answered (200) + rejected (503) + other HTTP statuses + no answer
    (status 0: refused, reset or timed out, i.e. lost); `ids_once` says each request id appears exactly once."""
    st = [int(r["status"]) for r in rows]
    ids = [r["id"] for r in rows]
    other: dict[int, int] = {}
    for s in st:
        if s not in (0, 200, 503):
            other[s] = other.get(s, 0) + 1
    return {"sent": len(st), "answered_200": st.count(200), "rejected_503": st.count(503),
            "other": sum(other.values()), "other_by_status": other, "lost": st.count(0),
            "ids_once": len(ids) == len(set(ids))}


def summary(latency_ms: np.ndarray) -> dict[str, float]:
    """p50, p99, p99.9 and the p99.9 - p50 gap (ms) of answered requests."""
    p50, p99, p999 = np.percentile(latency_ms, [50, 99, 99.9])
    return {"p50": float(p50), "p99": float(p99), "p999": float(p999), "gap": float(p999 - p50)}


def plot(rows: Sequence[dict[str, Any]], out_dir: str | Path, cdf_rate: float | None = None,
         title: str = "") -> list[Path]:
    """PNGs from load rows (several schemes and rates): percentiles against rate, and CDFs at `cdf_rate`, in
    `out_dir` (created if missing; its parent folder must exist)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(exist_ok=True)
    by: dict[str, dict[float, list[float]]] = {}
    for r in rows:
        if int(r["status"]) == 200:
            by.setdefault(str(r["scheme"]), {}).setdefault(float(r["rate"]), []).append(float(r["latency_ms"]))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharex=True)
    for scheme, d in sorted(by.items()):
        rates = sorted(d)
        s = [summary(np.asarray(d[x])) for x in rates]
        for ax, key in zip(axes, ("p50", "p99", "p999"), strict=True):
            ax.plot(rates, [v[key] for v in s], marker="o", label=scheme)
            ax.set_title(f"{key} {title}".strip())
            ax.set_xlabel("offered load")
            ax.set_ylabel("ms")
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    paths = [out / "percentiles.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)
    rates = sorted({x for d in by.values() for x in d})
    if rates:
        at = cdf_rate if cdf_rate is not None else rates[len(rates) // 2]
        at = min(rates, key=lambda x: abs(x - at))
        fig, ax = plt.subplots(figsize=(6, 4))
        for scheme, d in sorted(by.items()):
            if at in d:
                v = np.sort(d[at])
                ax.plot(v, 1 - np.arange(v.size) / v.size, label=scheme)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("latency ms")
        ax.set_ylabel("fraction slower (1 - CDF)")
        ax.set_title(f"latency tail at load {at:g} {title}".strip())
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(out / "cdf.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
