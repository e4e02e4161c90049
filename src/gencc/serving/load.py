"""Open-loop load: Poisson arrivals independent of answers, over HTTP (httpx async) or in process; tidy CSV rows;
figures (p50 / p99 / p99.9 against offered load per scheme, latency CDFs at one load)."""

from __future__ import annotations

import asyncio
import csv
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .sim import poisson_arrivals

FIELDS = ("id", "scheme", "rate", "send_s", "latency_ms", "status", "degraded", "error")


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


async def _http(url: str, rate: float, duration: float, inputs: Sequence[Any], seed: int, timeout: float,
                max_connections: int) -> list[dict[str, Any]]:
    import httpx

    times = poisson_arrivals(rate, duration, np.random.default_rng(seed))
    rows: list[dict[str, Any]] = [{} for _ in times]
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    endpoint = url.rstrip("/") + "/predict"
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def one(i: int, t: float) -> None:
            await asyncio.sleep(max(t - (loop.time() - t0), 0.0))
            sent = loop.time()
            scheme, status, degraded, err = "", 0, 0, ""
            try:
                resp = await client.post(endpoint, json={"input": inputs[i % len(inputs)]})
                status = resp.status_code
                body = resp.json()
                scheme = body.get("scheme", "")
                degraded = int(bool(body.get("degraded", False)))
                err = "" if status == 200 else str(body.get("detail", ""))[:120]
            except (httpx.HTTPError, ValueError) as e:
                err = f"{type(e).__name__}: {e}"[:120]
            rows[i] = {"id": i, "scheme": scheme, "rate": rate, "send_s": round(sent - t0, 6),
                       "latency_ms": round((loop.time() - sent) * 1000, 3), "status": status,
                       "degraded": degraded, "error": err}

        await asyncio.gather(*(one(i, float(t)) for i, t in enumerate(times)))
    return rows


def run_http(url: str, rate: float, duration: float, inputs: Sequence[Any], seed: int = 0, timeout: float = 30.0,
             max_connections: int = 512) -> list[dict[str, Any]]:
    """Open-loop Poisson load on `url`/predict; one row per request (status 0: no HTTP answer)."""
    return asyncio.run(_http(url, rate, duration, inputs, seed, timeout, max_connections))


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Load rows as a CSV at `path` (its folder must exist: none is created)."""
    p = Path(path)
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    return p


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
