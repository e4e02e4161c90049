"""`gencc serve` (the HTTP front door) and `gencc loadtest` (open-loop Poisson load, CSV and PNGs)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated
from urllib.parse import urlparse

import typer

from .parity import PARITY_SCHEMES
from .service import CHECKS, SCHEMES

#: most requests one loadtest may send
MAX_REQUESTS = 200_000


def serve_command(
    workload: Annotated[str, typer.Option(help="a gencc.workloads name, e.g. digits-cnn")] = "digits-cnn",
    scheme: Annotated[str, typer.Option(help=", ".join(SCHEMES))] = "gcc",
    workers: Annotated[int, typer.Option(help="model replicas (every scheme gets the same number)")] = 12,
    K: Annotated[int, typer.Option("--K", help="coded schemes: requests per coding group")] = 8,  # noqa: N803
    backend: Annotated[str, typer.Option(help="local (threads) or ray (one actor per worker)")] = "local",
    address: Annotated[str | None, typer.Option(help="ray: an existing cluster's address")] = None,
    service_ms: Annotated[float, typer.Option(help="injected service time per task, ms")] = 0.0,
    slow_fraction: Annotated[float, typer.Option(help="persistent stragglers: fraction of time slow")] = 0.0,
    slow_factor: Annotated[float, typer.Option(help="persistent stragglers: slowdown while slow")] = 10.0,
    max_wait_ms: Annotated[float, typer.Option(help="coded: flush a group after this many ms")] = 50.0,
    parm_k: Annotated[int, typer.Option(help="parm: inputs per parity query (2 to 4)")] = 2,
    check_results: Annotated[str, typer.Option(
        help="wrong-result check (gcc, bacc, sgcc, sgcc-parity): off; on (answers wait for the group's check, "
             "inconsistent results are outvoted and their workers quarantined); strict (every answer checked "
             "or confirmed by a second worker)")] = "off",
    packed_parity: Annotated[bool, typer.Option(
        help="parm, sgcc-parity: a parity model that takes each group's members stacked instead of their sum "
             "(coded slots receive k inputs; trained on first use)")] = False,
    max_pending: Annotated[int, typer.Option(help="requests in flight before answering 503")] = 1000,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8000,
) -> None:
    """Serve POST /predict for a workload with a coded or baseline scheme (FastAPI + uvicorn)."""
    if scheme not in SCHEMES:
        raise typer.BadParameter(f"--scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if backend not in ("local", "ray"):
        raise typer.BadParameter(f"--backend must be local or ray, got {backend!r}")
    if workers < 1 or K < 1 or max_pending < 1:
        raise typer.BadParameter("--workers, --K and --max-pending must be positive")
    if service_ms < 0 or max_wait_ms <= 0 or not 1 <= port <= 65535:
        raise typer.BadParameter("need --service-ms >= 0, --max-wait-ms > 0 and --port in 1..65535")
    if not 2 <= parm_k <= 4:
        raise typer.BadParameter(f"--parm-k must lie in 2..4, got {parm_k}")
    if check_results not in CHECKS:
        raise typer.BadParameter(f"--check-results must be one of {', '.join(CHECKS)}, got {check_results!r}")
    if packed_parity and scheme.removesuffix("-hedge") not in PARITY_SCHEMES:
        raise typer.BadParameter(f"--packed-parity applies to {' and '.join(PARITY_SCHEMES)} (and their -hedge "
                                 f"forms), not {scheme!r}")
    _check_bindable(host, port)
    import uvicorn

    from ..workloads import WORKLOADS
    from .app import create_app
    from .service import Service, freeze_heap

    if workload not in WORKLOADS:
        raise typer.BadParameter(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    try:
        svc = Service.build(workload, scheme, workers, K, backend=backend, address=address, service_ms=service_ms,
                            slow_fraction=slow_fraction, slow_factor=slow_factor, max_wait_ms=max_wait_ms,
                            parm_k=parm_k, max_pending=max_pending, check=check_results,
                            packed_parity=packed_parity)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    freeze_heap()
    typer.echo(f"serving {workload} with {svc.scheme} on {workers} {backend} workers at http://{host}:{port}")
    uvicorn.run(create_app(svc), host=host, port=port, log_level="warning")


def _check_bindable(host: str, port: int) -> None:
    """Refuse, before the model loads, an address this machine cannot listen on (busy port, foreign host)."""
    import socket

    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise typer.BadParameter(f"--host {host!r} does not resolve ({e.strerror})") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise typer.BadParameter(f"cannot listen on {host}:{port} ({e.strerror}); pick a free --port or an "
                                     "address of this machine for --host") from None


def loadtest_command(
    url: Annotated[str, typer.Option(help="the server, e.g. http://127.0.0.1:8000")],
    rate: Annotated[float, typer.Option(help="requests per second (Poisson, open loop)")],
    duration: Annotated[float, typer.Option(help="seconds of arrivals")],
    out: Annotated[Path, typer.Option(help="CSV file, one row per request")],
    workload: Annotated[str, typer.Option(help="workload whose test inputs are sent")] = "digits-cnn",
    plots: Annotated[Path | None, typer.Option(help="folder for percentile and CDF PNGs")] = None,
    timeout: Annotated[float, typer.Option(help="seconds before a request counts as unanswered")] = 30.0,
    seed: Annotated[int, typer.Option(help="seeds the arrival times")] = 0,
) -> None:
    """Send open-loop Poisson load to URL/predict; write one CSV row per request and print percentiles."""
    import numpy as np

    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise typer.BadParameter(f"--url must look like http://127.0.0.1:8000, got {url!r}")
    if not (rate > 0 and duration > 0 and timeout > 0):
        raise typer.BadParameter("--rate, --duration and --timeout must be positive")
    if rate * duration > MAX_REQUESTS:
        raise typer.BadParameter(f"rate x duration must stay under {MAX_REQUESTS} requests")
    try:
        if not ipaddress.ip_address(parsed.hostname).is_loopback:
            typer.echo(f"note: sending load to non-loopback {parsed.hostname}", err=True)
    except ValueError:
        pass
    from ..workloads import WORKLOADS, load
    from .load import accounting, plot, run_http, summary, write_csv

    if workload not in WORKLOADS:
        raise typer.BadParameter(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    inputs = load(workload, progress=False).X_test.tolist()
    rows = run_http(url, rate, duration, inputs, seed=seed, timeout=timeout)
    write_csv(rows, out)
    lat = np.array([r["latency_ms"] for r in rows if r["status"] == 200])
    acc = accounting(rows)
    deg = sum(r["degraded"] for r in rows)
    other = f"{acc['other']} {acc['other_by_status']}" if acc["other"] else "0"
    typer.echo(f"sent {acc['sent']} = answered {acc['answered_200']} + rejected 503 {acc['rejected_503']} + other "
               f"{other} + no answer {acc['lost']}; degraded {deg}")
    if lat.size:
        s = summary(lat)
        typer.echo(f"p50 {s['p50']:.1f} ms, p99 {s['p99']:.1f} ms, p99.9 {s['p999']:.1f} ms -> {out}")
    if acc["lost"]:
        typer.echo(f"{acc['lost']} requests got no HTTP answer (connection refused or timed out)", err=True)
    if plots is not None and lat.size:
        for p in plot(rows, plots):
            typer.echo(f"wrote {p}")
