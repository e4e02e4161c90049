"""`gencc serve` and `gencc loadtest` as a user runs them: bad input exits 2 with a short message; a real
loadtest over loopback writes one CSV row per request and the PNGs."""

from __future__ import annotations

import csv
import socket

import pytest
from typer.testing import CliRunner

from gencc.cli import app
from gencc.serving import start_in_thread as start_server

pytest.importorskip("fastapi")
runner = CliRunner()


def flat(output: str) -> str:
    """The output with the error box's borders and line breaks taken out."""
    return " ".join(" ".join(ln.strip(" │╭╮╰╯─") for ln in output.splitlines()).split())


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """Relative outputs (--out x.csv) land in the test's own temporary folder."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("args, word", [
    (["serve", "--scheme", "nope"], "--scheme"),
    (["serve", "--port", "0"], "--port"),
    (["serve", "--workers", "0"], "'--workers'"),
    (["serve", "--workload", "nope"], "unknown workload"),
    (["serve", "--scheme", "gcc", "--workers", "8", "--K", "8"], "more workers"),
    (["serve", "--scheme", "sgcc-parity", "--workers", "9", "--K", "8"], "groups of 8"),
    (["serve", "--check-results", "maybe"], "--check-results"),
    (["serve", "--scheme", "uncoded", "--check-results", "on"], "eager coded schemes"),
    (["serve", "--scheme", "gcc-hedge", "--packed-parity"], "packed parity applies to the schemes "
                                                                   "with a parity model (parm and sgcc-parity"),
    (["serve", "--max-batch", "0"], "'--max-batch'"),
    (["serve", "--max-body", "100"], "'--max-body'"),
    (["serve", "--redundancy", "sometimes"], "'--redundancy'"),
    (["loadtest", "--url", "ftp://x", "--rate", "1", "--duration-ms", "1000", "--out", "x.csv"], "--url"),
    (["loadtest", "--url", "http://127.0.0.1:1", "--rate", "-1", "--duration-ms", "1000", "--out", "x.csv"],
     "'--rate'"),
    (["loadtest", "--url", "http://127.0.0.1:1", "--rate", "1e6", "--duration-ms", "10000", "--out", "x.csv"], "under"),
])
def test_bad_input_exits_2_with_a_message(args, word, tmp_path, monkeypatch):
    from gencc.serving import service

    monkeypatch.setattr(service.Service, "build", lambda *a, **k: pytest.fail("the model loaded before the check"))
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert word in flat(r.output) and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []


def test_serve_refuses_a_busy_port_before_loading_the_model():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = runner.invoke(app, ["serve", "--workload", "digits-cnn", "--port", str(busy.getsockname()[1])])
    assert r.exit_code == 2, r.output
    assert "cannot listen on 127.0.0.1:" in r.output and "Traceback" not in r.output


def test_loadtest_against_a_live_server_writes_csv_and_plots(tmp_path):
    from gencc.serving import Service, create_app

    svc = Service.build("digits-cnn", "gcc-hedge", workers=6, K=4, service_ms=3.0, max_wait_ms=5)
    server, th, port = start_server(create_app(svc))
    out = tmp_path / "load.csv"
    r = runner.invoke(app, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "40", "--duration-ms", "1000",
                            "--out", str(out), "--plot", str(tmp_path / "png")])
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


def test_serve_logs_start_up_shutdown_and_errors(monkeypatch, caplog):
    """`gencc --log-level info serve` logs its address, scheme and workers, the app's shutdown, and an error that
    stops the server (uvicorn.run is replaced by a TestClient session, then by a crash)."""
    import logging

    import uvicorn
    from fastapi.testclient import TestClient

    served = {}

    def fake_run(app_, host, port, **kwargs):
        served.update(host=host, port=port, **kwargs)
        with TestClient(app_) as c:
            assert c.get("/healthz").json()["workers"] == 6

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(uvicorn, "run", fake_run)
    caplog.set_level(logging.INFO, logger="gencc")
    args = ["--log-level", "info", "serve", "--workers", "6", "--K", "4", "--port", str(port)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert served["log_level"] == "info" and served["port"] == port
    text = [(rec.name, rec.levelname, rec.getMessage()) for rec in caplog.records]
    assert ("gencc.cli.serve", "INFO", f"serving digits-cnn at http://127.0.0.1:{port}: scheme sgcc, 6 local "
            "workers, K=4, at most 1000 requests in flight") in text, text
    assert any(n == "gencc.serving._http.app" and m.startswith("shutting down: answering 0 requests")
               for n, _, m in text)
    assert any(n == "gencc.serving._http.app" and m == "shut down: sgcc service closed" for n, _, m in text)
    assert ("gencc.cli.serve", "INFO", f"stopped serving at http://127.0.0.1:{port}") in text

    def crash(*a, **k):
        raise RuntimeError("boom")

    caplog.clear()
    monkeypatch.setattr(uvicorn, "run", crash)
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and isinstance(r.exception, RuntimeError)
    errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert [rec.getMessage() for rec in errors] == [f"serving at http://127.0.0.1:{port} stopped on an error"]
    assert errors[0].exc_info[1] is r.exception


def test_loadtest_sends_nothing_to_a_server_that_refuses(tmp_path, monkeypatch):
    from gencc.loadgen import load

    monkeypatch.setattr(load, "run_http", lambda *a, **k: pytest.fail("load was sent"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    r = runner.invoke(app, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "10", "--duration-ms", "1000",
                            "--out", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "connection refused" in flat(r.output) and "Traceback" not in r.output, r.output
    assert not (tmp_path / "x.csv").exists()


def test_serve_max_batch_and_max_body_set_the_door(monkeypatch):
    """--max-batch caps a batch's inputs (a longer one is refused, 4xx) and --max-body the bytes of any body (413
    before parsing); a batch within both is answered."""
    import json

    import uvicorn
    from fastapi.testclient import TestClient

    seen = {}

    def fake_run(app_, host, port, **kwargs):
        one = [[[0.25] * 8] * 8]
        with TestClient(app_) as c:
            seen["ok"] = c.post("/predict/batch", json={"inputs": [one, one]}).status_code
            seen["long"] = c.post("/predict/batch", json={"inputs": [one] * 3}).status_code
            seen["big"] = c.post("/predict", content=json.dumps({"input": one}) + " " * 20_000,
                                 headers={"content-type": "application/json"}).status_code
            seen["max_body"] = app_.state.max_body_bytes

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(uvicorn, "run", fake_run)
    r = runner.invoke(app, ["serve", "--scheme", "uncoded", "--workers", "2", "--port", str(port), "--max-batch", "2",
                            "--max-body", "16000"])
    assert r.exit_code == 0, r.output
    assert seen == {"ok": 200, "long": 422, "big": 413, "max_body": 16000}


@pytest.mark.parametrize("scheme, warning", [
    ("uncoded", "--K is not used by --scheme uncoded (it codes no groups; every request goes to its own worker(s)); "
                "running without it"),
    ("hedged", "--K is not used by --scheme hedged (it codes no groups; every request goes to its own worker(s)); "
               "running without it"),
    ("gcc", None)])
def test_every_scheme_serves_with_the_shared_flags(scheme, warning, monkeypatch, caplog):
    """`gencc serve --scheme S --workers 12 --K 8` with injected slowness serves on 12 workers for every scheme; a
    scheme that does not use --K says so in one warning line (uvicorn.run is replaced by a TestClient session)."""
    import logging

    import uvicorn
    from fastapi.testclient import TestClient

    seen = {}

    def fake_run(app_, host, port, **kwargs):
        with TestClient(app_) as c:
            seen["workers"] = c.get("/healthz").json()["workers"]
            seen["status"] = c.post("/predict", json={"input": [[[0.0] * 8] * 8]}).status_code

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(uvicorn, "run", fake_run)
    caplog.set_level(logging.WARNING, logger="gencc.cli")
    r = runner.invoke(app, ["serve", "--scheme", scheme, "--workers", "12", "--K", "8", "--service-ms", "1",
                            "--slow-fraction", "0.1", "--slow-factor", "4", "--gate", "off", "--port", str(port)])
    assert r.exit_code == 0, r.output
    assert seen == {"workers": 12, "status": 200}
    assert [rec.getMessage() for rec in caplog.records if rec.name == "gencc.cli"] == ([warning] if warning else [])


def _picky_server(every: int):
    """A server of this test, not gencc's: /healthz answers 200; POST /predict answers 422 with a detail to every
    `every`-th request (1: to all) and 200 with an output to the others."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    api, seen = FastAPI(), [0]

    @api.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @api.post("/predict")
    def predict(body: dict) -> JSONResponse:
        seen[0] += 1
        if seen[0] % every == 0:
            return JSONResponse({"detail": "input must have shape (3,)"}, status_code=422)
        return JSONResponse({"output": [0.0], "scheme": "picky", "degraded": False})

    return api


@pytest.mark.parametrize("every, code", [(1, 1), (4, 1), (40, 0)])
def test_loadtest_exits_1_with_the_reasons_when_under_90_percent_are_answered(every, code, tmp_path):
    """All refused (422) or one in four: exit 1, the failures by kind (status, count, detail) on stderr; one in
    forty (97.5% answered): exit 0. The server has no model metadata (/v2/models): the inputs go unchecked."""
    server, th, port = start_server(_picky_server(every))
    try:
        r = runner.invoke(app, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "40",
                                "--duration-ms", "1000",
                                "--out", str(tmp_path / "x.csv"), "--workload", "digits-mlp"])
    finally:
        server.should_exit = True
        th.join(20)
    rows = list(csv.DictReader((tmp_path / "x.csv").open()))
    answered = sum(row["status"] == "200" for row in rows)
    assert r.exit_code == code, r.output
    assert (answered < 0.9 * len(rows)) == (code == 1) and len(rows) > 15
    if code:
        assert (f"only {answered} of {len(rows)} requests were answered (200), under 90%; the failures by kind:\n"
                f"  422 x {len(rows) - answered}: input must have shape (3,)\n") in r.stderr
        assert "Traceback" not in r.output
    else:
        assert "failures by kind" not in r.output


def test_serve_opt_builds_the_schemes_code_with_it(monkeypatch):
    """`gencc serve --scheme gcc-hedge --opt gcc.lam_dec=0.01` (the --opt of gencc run and sweep) serves with a GCC
    built with that option (Service.build is watched; uvicorn.run is replaced by a TestClient session)."""
    import uvicorn
    from fastapi.testclient import TestClient

    from gencc.serving import service

    seen, build = {}, service.Service.build.__func__

    def watched(cls, *a, **k):
        svc = build(cls, *a, **k)
        seen["code"] = svc.dispatcher.code
        return svc

    def fake_run(app_, host, port, **kwargs):
        with TestClient(app_) as c:
            seen["status"] = c.post("/predict", json={"input": [[[0.0] * 8] * 8]}).status_code

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(service.Service, "build", classmethod(watched))
    monkeypatch.setattr(uvicorn, "run", fake_run)
    r = runner.invoke(app, ["serve", "--scheme", "gcc-hedge", "--workers", "12", "--K", "8", "--gate", "off",
                            "--opt", "gcc.lam_dec=0.01", "--opt", "gcc.gaps=fit", "--port", str(port)])
    assert r.exit_code == 0, r.output
    assert seen["status"] == 200 and seen["code"].lam_dec == 0.01 and seen["code"].gaps == "fit"


def test_the_serving_guide_has_the_scheme_table_that_serve_help_points_to():
    """`gencc serve --scheme` lists the names and points to the serving guide, whose table says per scheme what it
    does and what was measured of it (gencc.serving.config.BAR, word for word)."""
    import re
    from pathlib import Path

    from gencc.serving.config import SCHEME_HELP, SCHEME_TABLE

    page = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "serving.md").read_text()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^\| `([\w-]+)` \| (.+?) \| (.+?) \|$", page,
                                                                          re.M)}
    assert set(rows) == set(SCHEME_TABLE), sorted(set(rows) ^ set(SCHEME_TABLE))
    for name, entry in SCHEME_TABLE.items():
        assert rows[name][0].strip() and rows[name][1] == entry.bar, (name, rows[name], entry.bar)
    assert all(name in SCHEME_HELP for name in SCHEME_TABLE) and "serving guide" in SCHEME_HELP


def _echoing_server():
    """A server of this test: /healthz 200, and every POST /predict refused (422) with a detail that echoes the
    request's input, as pydantic's do (two kinds, by the input's first number)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    api = FastAPI()

    @api.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @api.post("/predict")
    def predict(body: dict) -> JSONResponse:
        x = body["input"]
        what = "nests deeper than inputs of shape [13]" if isinstance(x[0], list) else "has 64 items"
        return JSONResponse({"detail": f"'input'[0] {what}, found {str(x)[:60]}"}, status_code=422)

    return api


def test_loadtest_groups_the_failures_by_kind_with_counts(tmp_path):
    """Every request refused with a detail echoing its input: one line per kind with its count, not one per
    distinct input."""
    server, th, port = start_server(_echoing_server())
    try:
        r = runner.invoke(app, ["loadtest", "--url", f"http://127.0.0.1:{port}", "--rate", "40",
                                "--duration-ms", "1000",
                                "--out", str(tmp_path / "x.csv"), "--workload", "digits-cnn"])
    finally:
        server.should_exit = True
        th.join(20)
    n = len(list(csv.DictReader((tmp_path / "x.csv").open())))
    assert r.exit_code == 1 and n > 15, r.output
    kinds = r.stderr.split("the failures by kind:\n")[1].splitlines()
    assert kinds == [f"  422 x {n}: 'input'[i] nests deeper than inputs of shape [13]"], r.stderr


def _norm_server():
    """gencc's server on a model taking inputs of shape (3,) (a norm; threads, no torch)."""
    import numpy as np

    from gencc.engine import ThreadBackend, Workers
    from gencc.serving import Service, create_app, make_dispatcher

    def norm(x):
        return np.linalg.norm(np.asarray(x, dtype=np.float64), axis=1, keepdims=True)

    norm.batched = True
    svc = Service(Workers(2, ThreadBackend({"f": norm}, dtype=np.float32)), lambda env: make_dispatcher("uncoded", env))
    return start_server(create_app(svc, in_shape=(3,), name="norm"))


def test_loadtest_refuses_inputs_the_servers_model_does_not_take_before_sending(tmp_path, monkeypatch):
    """The server's model takes [B, 3] (GET /v2/models): the built-in digits without --data, or a --data file of
    another shape, are refused (exit 2, three lines, the fix --data FILE with its shape) and nothing is sent; a
    file whose rows have 3 numbers in another shape is reshaped and sent."""
    import httpx
    import numpy as np

    from gencc.loadgen import load

    np.save(tmp_path / "wrong.npy", np.zeros((5, 4)))
    np.save(tmp_path / "flat.npy", np.ones((5, 1, 3)))
    sent = []
    real = load.run_http
    monkeypatch.setattr(load, "run_http", lambda *a, **k: sent.append(a[3]) or real(*a, **k))
    server, th, port = _norm_server()
    url = f"http://127.0.0.1:{port}"
    try:
        meta = httpx.get(url + "/v2/models").json()
        base = ["loadtest", "--url", url, "--rate", "20", "--duration-ms", "500", "--out", str(tmp_path / "x.csv")]
        digits = runner.invoke(app, base)
        wrong = runner.invoke(app, [*base, "--data", str(tmp_path / "wrong.npy")])
        assert sent == []
        flat_ = runner.invoke(app, [*base, "--data", str(tmp_path / "flat.npy")])
    finally:
        server.should_exit = True
        th.join(20)
    assert meta == {"models": [{"name": "norm", "versions": ["1"], "platform": "gencc",
                                "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3]}],
                                "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, -1]}]}]}
    for r, words in [(digits, "Error: Invalid value for '--data': the server's model 'norm' takes inputs of shape "
                              "[B, 3], and the built-in digits-cnn inputs sent without --data have shape "
                              "[B, 1, 8, 8]: give --data FILE (.npy or .npz) with inputs of shape [B, 3]"),
                     (wrong, f"Error: Invalid value for '--data': {tmp_path / 'wrong.npy'} holds inputs of shape "
                             "[B, 4]; the server's model 'norm' takes [B, 3]: give --data FILE with inputs of shape "
                             "[B, 3]")]:
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) <= 3 and lines[-1] == words, r.output
    assert flat_.exit_code == 0, flat_.output
    assert len(sent) == 1 and np.asarray(sent[0]).shape[1:] == (3,)
