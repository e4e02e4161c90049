"""The http-tail suite (benchmarks/http_tail.py): its independent client and its tables, against a server the
test starts on a model the test defines (the measurements themselves are a benchmark, never run in CI)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tail(load_benchmark):
    return load_benchmark("http_tail")


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
    rows = [{"scheme": "uncoded", "load": 0.3, **base, "cpu_ms": 3.0, "p999": 600.0, "gap": 550.0, "sim": sim,
             "seeds": {0: 600.0, 1: 500.0}},
            {"scheme": "hedged", "load": 0.3, **base, "cpu_ms": 3.1, "p999": 300.0, "gap": 250.0, "sim": sim,
             "seeds": {0: 300.0, 1: 400.0}},
            {"scheme": "sgcc", "default": True, "load": 0.3, **base, "cpu_ms": 4.25, "p999": 330.0, "gap": 280.0,
             "sim": sim, "seeds": {0: 150.0, 1: 440.0}}]
    text = tail.sweep_table(rows)
    assert "| 0.3 | sgcc (default) | 4,500 | 52.5 | 4.2 | 50 | 400 | 330 | 0.51 | **1.10** | 40 / 200 | 1.25, 2.00 |" \
        in text
    assert "| 0.3 | 600 / 300 / 150 | 500 / 400 / 440 | 0.50, 1.10 |" in text  # each seed against its own best


def test_points_pool_every_seed(tail, monkeypatch, tmp_path):
    monkeypatch.setattr(tail, "predict", lambda scheme, rate, task_ms, overhead: {"p50": task_ms, "p99": 0.0,
                                                                                  "p999": float(overhead.size)})
    rng = np.random.default_rng(0)
    rows = []
    for scheme in ("uncoded", "hedged", "sgcc"):
        for load in (0.3, 0.9):
            for seed in range(3):
                lat = rng.lognormal(4, 1, size=500 + 100 * seed)
                rows.append({"scheme": scheme, "default": scheme == "sgcc", "load": load, "rate": 40 * load,
                             "seed": seed, "requests": lat.size, "not_200": 0, "latencies": lat.tolist(),
                             "p999": float(np.percentile(lat, 99.9)), "task_ms": 50.0 + seed,
                             "server_cpu_s": 0.002 * lat.size, "front_door_ms": [5.0, 6.0]})
    points = tail.pooled(rows)
    assert len(points) == 6
    got = next(p for p in points if p["scheme"] == "hedged" and p["load"] == 0.9)
    mine = [r for r in rows if r["scheme"] == "hedged" and r["load"] == 0.9]
    every = np.concatenate([r["latencies"] for r in mine])
    assert got["requests"] == every.size == 1800
    assert got["p999"] == pytest.approx(np.percentile(every, 99.9)) and got["p50"] == pytest.approx(np.median(every))
    assert got["seeds"] == {r["seed"]: r["p999"] for r in mine}
    assert got["cpu_ms"] == pytest.approx(2.0) and got["task_ms"] == pytest.approx(51.0)
    assert got["sim"]["p50"] == pytest.approx(51.0) and got["front_door_p50"] == 5.5
    tail.sweep_figure(points, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv", [["nope"], ["sweep", "--loads", "2"], ["default", "--duration", "0"],
                                  ["default", "--models", "resnet"], ["sweep", "--requests", "5"],
                                  ["sweep", "--seeds", "0"], ["sweep", "--from-raw", "no/such.json"],
                                  ["sweep", "--from-raw", str(Path(__file__))]])
def test_bad_arguments(tail, argv, capsys):
    with pytest.raises(SystemExit) as e:
        tail.main(argv)
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err
