"""benchmarks/http_tail.py's independent client and its tables, against a server the test starts on a model the
test defines (the measurements themselves are a benchmark, never run in CI)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def tail():
    sys.path.insert(0, str(BENCH))  # its `from measure import machine`
    try:
        spec = importlib.util.spec_from_file_location("http_tail_bench", BENCH / "http_tail.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


def test_client_measures_a_server(tail, tmp_path):
    from gencc.serving import Service, create_app, start_in_thread

    W = np.random.default_rng(0).normal(size=(12, 3))

    def model(x):
        return np.tanh(np.asarray(x, dtype=np.float64).reshape(len(x), -1) @ W)

    X = np.random.default_rng(1).normal(size=(40, 12)).astype(np.float32)
    svc = Service.build(model, "uncoded", 4, data=X, service_ms=5.0)
    server, th, port = start_in_thread(create_app(svc))
    try:
        np.save(tmp_path / "x.npy", X)
        got = tail.client(f"http://127.0.0.1:{port}", rate=40.0, duration=1.0, data=tmp_path / "x.npy", seed=0)
        seconds, runs = tail.task_runs(port)  # the server's normal-state tasks, from /metrics
    finally:
        server.should_exit = True
        th.join()
        svc.close()
    assert got["requests"] > 10 and got["not_200"] == 0 and got["degraded"] == 0.0
    assert 5.0 <= got["p50"] <= got["p99"] <= got["p999"] and got["gap"] == pytest.approx(got["p999"] - got["p50"])
    assert "gencc" not in tail.client.__code__.co_names  # the client speaks HTTP only
    assert runs == got["requests"] and 0.0045 <= seconds / runs < 0.05  # one task each, 5 ms injected (0.9 fixed)


def test_tables(tail):
    base = {"requests": 4500, "not_200": 0, "degraded": 0.0, "p50": 50.0, "p99": 400.0, "task_ms": 52.46}
    rows = [{"model": "m", "scheme": "uncoded", **base, "p999": 550.0, "gap": 500.0},
            {"model": "m", "scheme": "default", **base, "degraded": 0.05, "p999": 150.0, "gap": 100.0}]
    text = tail.default_table(rows)
    assert "| m | default | 4,500 | 0 | 5.0% | 50 | 400 | 150 | 100 | 0.20 | yes |" in text
    sim = {"p50": 40.0, "p99": 200.0, "p999": 300.0}
    rows = [{"scheme": "uncoded", "load": 0.3, **base, "p999": 600.0, "gap": 550.0, "sim": sim},
            {"scheme": "hedged", "load": 0.3, **base, "p999": 300.0, "gap": 250.0, "sim": sim},
            {"scheme": "sgcc", "default": True, "load": 0.3, **base, "p999": 330.0, "gap": 280.0, "sim": sim}]
    text = tail.sweep_table(rows)
    assert "| 0.3 | sgcc (default) | 4,500 | 52.5 | 50 | 400 | 330 | 0.51 | 1.10 | 40 / 200 | 1.25, 2.00 |" in text


@pytest.mark.parametrize("argv", [["nope"], ["sweep", "--loads", "2"], ["default", "--duration", "0"],
                                  ["default", "--models", "resnet"], ["sweep", "--requests", "5"]])
def test_bad_arguments(tail, argv, capsys):
    with pytest.raises(SystemExit) as e:
        tail.main(argv)
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err
