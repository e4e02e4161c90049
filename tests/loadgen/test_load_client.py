"""The load generator measures the server, not itself: its own cost against a trivial server, its lag against
the schedule (and the warning when it falls behind), keep-alive reuse and retry, errors as status 0, and the
server-histogram quantiles it compares with."""

from __future__ import annotations

import logging
import socket

import numpy as np
import pytest

from gencc.loadgen.client import FixedServer
from gencc.loadgen.load import LATE_MS, client_cost, histogram_quantiles, run_http, schedule_report


def test_own_cost_is_under_half_a_millisecond_per_request():
    rep = client_cost(rate=1000, duration=1.0)
    assert rep["answered"] == rep["requests"] > 800
    assert rep["client_cpu_ms_per_request"] < 0.5, rep
    assert rep["connections"] < rep["requests"] / 10  # keep-alive: connections are reused


def test_rows_keep_the_schedule_and_reuse_connections():
    rep: dict = {}
    with FixedServer() as srv:
        rows = run_http(f"http://127.0.0.1:{srv.port}", rate=200, duration=1.0, inputs=[[0.5] * 4], report=rep)
        assert srv.requests == len(rows)
    assert [r["id"] for r in rows] == list(range(len(rows))) and {r["status"] for r in rows} == {200}
    assert {r["scheme"] for r in rows} == {"fixed"}
    # open loop: Poisson times inside the duration; a request leaves at its time plus its lag (on a loaded machine
    # the last ones may leave after the duration), so the schedule is the send time less the lag (both rounded
    # to the microsecond)
    due = np.array([r["send_s"] - r["lag_ms"] / 1e3 for r in rows])
    assert np.all(np.diff(due) >= -2e-6) and due[-1] < 1.0
    assert all(r["lag_ms"] >= 0 for r in rows) and rep["requests"] == len(rows)
    assert rep["lag_p50_ms"] <= rep["lag_p99_ms"] <= rep["lag_max_ms"]


def test_falling_behind_schedule_is_reported_and_warned(caplog):
    """One connection to a server that takes 20 ms per answer, at 200 req/s: requests wait for the connection,
    leave late, and the generator says so."""
    caplog.set_level(logging.WARNING, logger="gencc.loadgen.load")
    rep: dict = {}
    with FixedServer(delay_s=0.02) as srv:
        rows = run_http(f"http://127.0.0.1:{srv.port}", rate=200, duration=0.5, inputs=[[0.0]], max_connections=1,
                        report=rep)
    assert {r["status"] for r in rows} == {200}
    assert rep["behind"] and rep["late"] > len(rows) / 2 and rep["lag_max_ms"] > 100
    assert sum(r["lag_ms"] > LATE_MS for r in rows) == rep["late"]
    assert any("fell behind its schedule" in rec.getMessage() for rec in caplog.records)


def test_a_connection_closed_by_the_server_is_retried_once():
    rep: dict = {}
    with FixedServer(per_connection=1) as srv:  # a reused connection is closed under its second request
        rows = run_http(f"http://127.0.0.1:{srv.port}", rate=100, duration=0.5, inputs=[[0.0]], report=rep)
    assert {r["status"] for r in rows} == {200}, {r["error"] for r in rows}
    assert rep["connections"] > len(rows) / 2  # the retries went on fresh connections


def test_no_server_is_status_0_with_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        rows = run_http(f"http://127.0.0.1:{port}", rate=50, duration=0.2, inputs=[[0.0]], timeout=2)
    assert rows and {r["status"] for r in rows} == {0}
    assert all(r["error"].startswith("ConnectError") for r in rows)


def test_unanswered_requests_time_out():
    with FixedServer(delay_s=5.0) as srv:
        rows = run_http(f"http://127.0.0.1:{srv.port}", rate=20, duration=0.2, inputs=[[0.0]], timeout=0.3)
    assert rows and {r["status"] for r in rows} == {0}
    assert all(r["error"].startswith("ReadTimeout") for r in rows)
    assert all(250 <= r["latency_ms"] < 1500 for r in rows)


def test_schedule_report_fields():
    rep = schedule_report(np.array([0.1, 0.2, 10.0, 0.3]), cpu_s=0.002)
    assert rep["late"] == 1 and rep["behind"] and rep["lag_max_ms"] == 10.0
    assert rep["client_cpu_ms_per_request"] == pytest.approx(0.5)
    assert not schedule_report(np.zeros(200), 0.0)["behind"]


def metrics_text(counts: dict[str, float], name: str = "gencc_request_latency_seconds") -> str:
    return "\n".join(f'{name}_bucket{{le="{le}"}} {v}' for le, v in counts.items()) + f"\n{name}_count 0\n"


def test_histogram_quantiles_interpolate_inside_buckets():
    before = metrics_text({"0.01": 10, "0.02": 10, "0.05": 10, "+Inf": 10})
    after = metrics_text({"0.01": 60, "0.02": 110, "0.05": 110, "+Inf": 110})  # 50 in (0, 10ms], 50 in (10, 20]
    q = histogram_quantiles(before, after, qs=(0.5, 0.99, 0.25))
    assert q["count"] == 100
    assert q["p50"] == pytest.approx(10.0)  # the 50th answer sits on the 10 ms edge
    assert q["p99"] == pytest.approx(10 + 10 * 49 / 50)  # Prometheus' histogram_quantile, by hand
    assert q["p25"] == pytest.approx(5.0)
    empty = histogram_quantiles(after, after)
    assert empty["count"] == 0 and np.isnan(empty["p50"])


@pytest.mark.slow  # loads the digits inputs (torch)
def test_loadtest_prints_the_servers_histogram_beside_its_own_figures(tmp_path):
    pytest.importorskip("fastapi")
    from typer.testing import CliRunner

    from gencc.cli import app as cli
    from gencc.engine import ThreadBackend, Workers
    from gencc.serving import Service, create_app, make_dispatcher, start_in_thread

    def mean(x):  # a model gencc never saw, on the digits inputs' shape
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1).mean(axis=1, keepdims=True)

    mean.batched = True
    svc = Service(Workers(4, ThreadBackend({"f": mean}, dtype=np.float32)), lambda env: make_dispatcher("uncoded", env))
    server, th, port = start_in_thread(create_app(svc, in_shape=(1, 8, 8)))
    try:
        r = CliRunner().invoke(cli, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "40", "--duration-ms",
                                     "500", "--out", str(tmp_path / "load.csv")])
    finally:
        server.should_exit = True
        th.join(20)
    assert r.exit_code == 0, r.output
    n = int(r.output.split("sent ")[1].split()[0])
    assert f"answered {n} +" in r.output and f"server histogram (/metrics, arrival to answer): {n} answers" in r.output
    assert "client: lag p50" in r.output and "ms CPU per request" in r.output
    assert "lag_ms" in (tmp_path / "load.csv").read_text().splitlines()[0]


def test_loadtest_sends_your_own_inputs_from_data(tmp_path):
    pytest.importorskip("fastapi")
    from typer.testing import CliRunner

    from gencc.cli import app as cli
    from gencc.engine import ThreadBackend, Workers
    from gencc.serving import Service, create_app, make_dispatcher, start_in_thread

    seen = []

    def norm(x):  # a model gencc never saw, on inputs of shape (3,)
        x = np.asarray(x, dtype=np.float64)
        seen.extend(map(tuple, x))
        return np.linalg.norm(x, axis=1, keepdims=True)

    norm.batched = True
    X = np.random.default_rng(0).normal(size=(20, 3))
    np.save(tmp_path / "mine.npy", X)
    runner = CliRunner()
    bad = runner.invoke(cli, ["loadtest", "--url", "http://127.0.0.1:9", "--rate", "5", "--duration-ms", "1000",
                              "--out", str(tmp_path / "x.csv"), "--data", str(tmp_path / "none.npy")])
    # refused before the server is tried
    assert bad.exit_code == 2 and "does not exist" in " ".join(bad.output.replace("│", " ").split())
    svc = Service(Workers(2, ThreadBackend({"f": norm}, dtype=np.float32)), lambda env: make_dispatcher("uncoded", env))
    server, th, port = start_in_thread(create_app(svc, in_shape=(3,)))
    try:
        r = runner.invoke(cli, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "40", "--duration-ms", "500",
                                "--out", str(tmp_path / "load.csv"), "--data", str(tmp_path / "mine.npy")])
    finally:
        server.should_exit = True
        th.join(20)
    assert r.exit_code == 0, r.output
    rows = (tmp_path / "load.csv").read_text().splitlines()
    assert len(rows) > 1 and seen  # the server computed on the file's rows
    rows_f32 = {tuple(np.float32(v) for v in x) for x in X}
    assert all(tuple(np.float32(v) for v in s) in rows_f32 for s in seen)


def test_failures_are_grouped_by_kind_without_the_echoed_input():
    """Each kind of failure once, most frequent first, with its count: the input a detail echoes and the row or
    item index it names are not part of the kind."""
    from gencc.loadgen.load import failure_kind, failures

    rows = ([{"status": 422, "error": f"'input'[{i}][2] nests deeper than inputs of shape [13] (rank 1): a number "
                                      f"belongs there, found [[0.0, 0.{i}, 0.125"} for i in range(30)]
            + [{"status": 422, "error": "'input' has 12 items: this model takes inputs of shape [13]"}] * 2
            + [{"status": 0, "error": "ReadTimeout: no answer within 30 s"}] + [{"status": 503, "error": ""}]
            + [{"status": 200, "error": ""}] * 5)
    assert failures(rows) == [
        "422 x 30: 'input'[i][i] nests deeper than inputs of shape [13] (rank 1): a number belongs there",
        "422 x 2: 'input' has 12 items: this model takes inputs of shape [13]",
        "no answer x 1: ReadTimeout: no answer within 30 s", "503 x 1"]
    assert failures(rows, most=1)[1:] == ["4 more of 3 other kinds"]
    assert failure_kind(400, "input 'input' has shape [2, 4]; model 'm' takes [B, 3]") == \
        "400: input 'input' has shape [2, 4]; model 'm' takes [B, 3]"
