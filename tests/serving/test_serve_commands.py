"""`gencc serve` and `gencc loadtest` as a user runs them: bad input exits 2 with a short message; a real
loadtest over loopback writes one CSV row per request and the PNGs."""

from __future__ import annotations

import csv
import socket

import pytest
from serving_helpers import start_server
from typer.testing import CliRunner

from gencc.cli import app

pytest.importorskip("fastapi")
runner = CliRunner()


@pytest.mark.parametrize("args, word", [
    (["serve", "--scheme", "nope"], "--scheme"),
    (["serve", "--port", "0"], "--port"),
    (["serve", "--workers", "0"], "positive"),
    (["serve", "--workload", "nope"], "unknown workload"),
    (["serve", "--scheme", "gcc", "--workers", "8", "--K", "8"], "more workers"),
    (["serve", "--scheme", "sgcc-parity", "--workers", "9", "--K", "8"], "groups of 8"),
    (["serve", "--check-results", "maybe"], "--check-results"),
    (["serve", "--scheme", "uncoded", "--check-results", "on"], "eager coded schemes"),
    (["serve", "--scheme", "gcc-hedge", "--packed-parity"], "--packed-parity applies to parm and sgcc-parity"),
    (["loadtest", "--url", "ftp://x", "--rate", "1", "--duration", "1", "--out", "x.csv"], "--url"),
    (["loadtest", "--url", "http://127.0.0.1:1", "--rate", "-1", "--duration", "1", "--out", "x.csv"], "positive"),
    (["loadtest", "--url", "http://127.0.0.1:1", "--rate", "1e6", "--duration", "10", "--out", "x.csv"], "under"),
])
def test_bad_input_exits_2_with_a_message(args, word):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert word in r.output and "Traceback" not in r.output


def test_serve_refuses_a_busy_port_before_loading_the_model():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = runner.invoke(app, ["serve", "--workload", "digits-cnn", "--port", str(busy.getsockname()[1])])
    assert r.exit_code == 2, r.output
    assert "cannot listen on 127.0.0.1:" in r.output and "Traceback" not in r.output


def test_loadtest_against_a_live_server_writes_csv_and_plots(tmp_path):
    from gencc.serving import Service
    from gencc.serving.app import create_app

    svc = Service.build("digits-cnn", "gcc-hedge", workers=6, K=4, service_ms=3.0, max_wait_ms=5)
    server, th, port = start_server(create_app(svc))
    out = tmp_path / "load.csv"
    r = runner.invoke(app, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "40", "--duration", "1",
                            "--out", str(out), "--plots", str(tmp_path / "png")])
    server.should_exit = True
    th.join(20)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) > 15 and {row["status"] for row in rows} == {"200"}
    assert {row["scheme"] for row in rows} == {"gcc-hedge"}
    assert len({row["id"] for row in rows}) == len(rows)
    assert (tmp_path / "png" / "percentiles.png").stat().st_size > 1000
    assert "p99.9" in r.output
    assert f"sent {len(rows)} = answered {len(rows)} + rejected 503 0 + other 0 + no answer 0" in r.output
