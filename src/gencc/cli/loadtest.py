"""`gencc loadtest`: open-loop Poisson load against a running server, one CSV row per request, percentiles
beside the server's own histogram, and PNGs."""

from __future__ import annotations

import ipaddress
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlparse

import typer

from .options import check_out_dir, check_out_file, number, out_dir, out_file, refuse
from .options import seed as check_seed

if TYPE_CHECKING:
    import numpy as np

#: most requests one loadtest may send
MAX_REQUESTS = 200_000
#: the share of requests that must be answered (200) for `gencc loadtest` to exit 0
MIN_ANSWERED = 0.9


def loadtest_command(
    url: Annotated[str, typer.Option(help="the server, e.g. http://127.0.0.1:8000")],
    rate: Annotated[float, typer.Option(help="requests per second (Poisson, open loop)", callback=number(above=0))],
    duration_ms: Annotated[float, typer.Option(help="ms of arrivals", callback=number(above=0))],
    out: Annotated[Path, typer.Option(help="CSV file, one row per request", callback=out_file)],
    workload: Annotated[str, typer.Option(help="workload whose test inputs are sent")] = "digits-cnn",
    data: Annotated[Path | None, typer.Option(help="send these inputs instead (your model's): .npy / .npz, "
                                                   "shape (n, *input shape)")] = None,
    plot: Annotated[Path | None, typer.Option(help="folder for the figures (PNG: percentiles and CDF)",
                                              callback=out_dir)] = None,
    timeout_ms: Annotated[float, typer.Option(help="ms before a request counts as unanswered",
                                              callback=number(above=0))] = 30000.0,
    seed: Annotated[int, typer.Option(help="seeds the arrival times", callback=check_seed)] = 0,
    api_key: Annotated[str | None, typer.Option(envvar="GENCC_API_KEY", show_default=False,
                                                help="the server's API key (sent as a Bearer token)")] = None,
) -> None:
    """Send open-loop Poisson load to URL/predict; write one CSV row per request and print percentiles, the
    generator's lag against its schedule and its own cost, and the server's own histogram over the run. The
    server's model metadata is read first: inputs of another shape are refused before any is sent. Exits with
    status 1, the failures grouped by kind on stderr, when fewer than 90% of the requests were answered."""
    import numpy as np

    from ..workloads import workload_spec

    host = _check_url(url)
    duration, timeout = duration_ms / 1e3, timeout_ms / 1e3  # the load generator takes seconds
    if rate * duration > MAX_REQUESTS:
        raise refuse("--rate", f"rate x duration must stay under {MAX_REQUESTS} requests, got "
                               f"{rate:g}/s x {duration:g} s")
    if workload is not None:
        try:
            workload_spec(workload)
        except ValueError as e:
            raise refuse("--workload", str(e)) from None
    from .model import load_cli_inputs

    X = None if data is None else load_cli_inputs(data)
    try:
        if not ipaddress.ip_address(host).is_loopback:
            typer.echo(f"note: sending load to non-loopback {host}", err=True)
    except ValueError:
        pass
    _check_reachable(url, min(timeout, 5.0))
    from ..loadgen.load import accounting, failures, histogram_quantiles, run_http, summary, write_csv
    from ..loadgen.load import plot as draw
    from ..workloads import load

    X = _fitting_inputs(url, api_key, min(timeout, 5.0), X, data, workload)
    inputs = (load(workload, progress=False).X_test if X is None else X).tolist()
    before = _scrape(url, api_key)
    rep: dict = {}
    rows = run_http(url, rate, duration, inputs, seed=seed, timeout=timeout, api_key=api_key, report=rep)
    after = _scrape(url, api_key)
    check_out_file("--out", out)  # again: the folder may have gone while the load ran
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
    if before is not None and after is not None:
        h = histogram_quantiles(before, after)
        if h["count"]:
            typer.echo(f"server histogram (/metrics, arrival to answer): {h['count']} answers, p50 {h['p50']:.1f} "
                       f"ms, p99 {h['p99']:.1f} ms")
    late = " (BEHIND SCHEDULE)" if rep["behind"] else ""
    typer.echo(f"client: lag p50 {rep['lag_p50_ms']:.2f} ms, p99 {rep['lag_p99_ms']:.2f} ms, max "
               f"{rep['lag_max_ms']:.1f} ms, {rep['late']} late{late}; "
               f"{rep['client_cpu_ms_per_request']:.3f} ms CPU per request")
    if acc["lost"]:
        typer.echo(f"{acc['lost']} requests got no HTTP answer (connection refused or timed out)", err=True)
    if plot is not None and lat.size:
        check_out_dir("--plot", plot)
        for p in draw(rows, plot):
            typer.echo(f"wrote {p}")
    if acc["answered_200"] < MIN_ANSWERED * acc["sent"]:
        typer.echo(f"only {acc['answered_200']} of {acc['sent']} requests were answered (200), under "
                   f"{MIN_ANSWERED:.0%}; the failures by kind:", err=True)
        for kind in failures(rows):
            typer.echo(f"  {kind}", err=True)
        raise typer.Exit(1)


def _fitting_inputs(url: str, api_key: str | None, timeout: float, X: np.ndarray | None, data: Path | None,
                    workload: str) -> np.ndarray | None:
    """The inputs to send (--data's, or None for the workload's test inputs) checked against the shape the
    server's model takes (its Open Inference Protocol metadata; unchecked when the server does not say): --data
    rows of the same size are reshaped to it, anything else is refused naming --data and the shape to give."""
    from ..loadgen.load import served_input
    from ..workloads import workload_spec

    served = served_input(url, api_key, timeout)
    if served is None:
        return X
    name, want = served
    have = tuple(X.shape[1:]) if X is not None else tuple(workload_spec(workload).in_shape)
    if have == want:
        return X
    shape = f"[B, {', '.join(map(str, want))}]"
    if X is not None and math.prod(have) == math.prod(want):
        return X.reshape(len(X), *want)
    got = f"[B, {', '.join(map(str, have))}]"
    if X is None:
        raise refuse("--data", f"the server's model {name!r} takes inputs of shape {shape}, and the built-in "
                               f"{workload} inputs sent without --data have shape {got}: give --data FILE (.npy or "
                               f".npz) with inputs of shape {shape}")
    raise refuse("--data", f"{data} holds inputs of shape {got}; the server's model {name!r} takes {shape}: give "
                           f"--data FILE with inputs of shape {shape}")


def _scrape(url: str, api_key: str | None) -> str | None:
    """The server's /metrics text (None when it has none or refuses)."""
    import httpx

    try:
        r = httpx.get(url.rstrip("/") + "/metrics", timeout=5.0,
                      headers={"Authorization": f"Bearer {api_key}"} if api_key else None)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def _check_url(url: str) -> str:
    """The host of `url` (http or https, a host, a port in 1..65535 if given), else the usage error."""
    parsed = urlparse(url)
    example = "look like http://127.0.0.1:8000"
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise refuse("--url", f"--url must {example}, got {url!r}")
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise refuse("--url", f"the port of --url must lie in 1..65535, got {url!r}")
    if parsed.query or parsed.fragment:
        raise refuse("--url", f"--url is the server's address (requests go to URL/predict); drop the query or "
                              f"fragment of {url!r}")
    return parsed.hostname


def _check_reachable(url: str, timeout: float) -> None:
    """Refuse a server that cannot be reached (refused, unknown host, no answer) before any load is sent; any
    HTTP answer to GET URL/healthz, even an error status, counts as reachable."""
    import httpx

    try:
        httpx.get(url.rstrip("/") + "/healthz", timeout=timeout)  # any answer (401 included) is reachable
    except httpx.TransportError as e:
        why = "connection refused" if isinstance(e, httpx.ConnectError) and "refused" in str(e).lower() else \
            f"{type(e).__name__}: {e}"
        raise refuse("--url", f"cannot reach {url} ({why}); start the server first, e.g. `gencc serve`") from None
