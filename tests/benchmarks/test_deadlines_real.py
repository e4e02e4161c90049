"""The real-server run of benchmarks/deadlines.py (`--real`, benchmarks/deadlines_real.py): its client against a
canned server, the CPU reading against the process's own clock, and the per-point figures against counts done
here by hand on answers made up to cover every kind (the run itself is a benchmark, never in CI)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import time

import numpy as np
import pytest


@pytest.fixture(scope="module")
def real(load_benchmark):
    return load_benchmark("deadlines_real")


def test_cpu_seconds_is_the_process_cpu_time(real):
    before, clock0 = real.cpu_seconds(os.getpid()), time.process_time()
    t_end = time.process_time() + 0.3
    x = 0.0
    while time.process_time() < t_end:  # burn CPU
        x += math.sqrt(x + 1.0)
    spent, read = time.process_time() - clock0, real.cpu_seconds(os.getpid()) - before
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert spent >= 0.3 and abs(read - spent) <= 3 * tick + 0.02
    waited = real.wait_seconds(os.getpid())  # run-queue time of its threads: a clock that only moves forward
    assert 0 <= waited <= real.wait_seconds(os.getpid())


def test_the_client_sends_every_arrival_with_its_target_and_input(real):
    from gencc.loadgen.arrivals import poisson_arrivals
    from gencc.loadgen.client import FixedServer

    bodies = [json.dumps({"input": [k]}).encode() for k in range(7)]
    with FixedServer(body=b'{"output": [1.0, 2.0], "degraded": false, "latency_ms": 1.0}') as srv:
        rows, lags = asyncio.run(real._drive(srv.port, 300.0, 0.4, bodies, 2, 100.0, 5.0))
    n = len(poisson_arrivals(300.0, 0.4, np.random.default_rng(2)))  # the same draw
    assert len(rows) == len(lags) == n > 60
    assert [r["input"] for r in rows] == [(i + 97 * 2) % 7 for i in range(n)]
    assert all(r["status"] == 200 and 0 < r["latency_ms"] < 5000 and json.loads(r["body"])["output"] == [1, 2]
               for r in rows)
    assert np.all(lags >= 0)


def _ans(status, latency, output=None, degraded=False, server=None):
    body = b"" if output is None else json.dumps({"output": list(output), "degraded": degraded,
                                                   "latency_ms": server}).encode()
    return status, latency, body


def test_judge_and_point_count_as_by_hand(real):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(4, 5)) * 3  # the model's outputs on 4 inputs
    top = ref.argmax(axis=1)
    wrong = [(t + 1) % 5 for t in top]
    near = ref + 1e-6  # float32 rounding: equal
    far = ref + 0.05  # not the model's
    onehot = np.eye(5)
    _unrun = (504, 20.0, json.dumps({"error": "deadline cannot be met: no worker was free in time"}).encode())
    made = [  # (input, (status, client ms, body)); target 100 ms
        [(0, _ans(200, 40.0, near[0], server=35.0)), (1, _ans(200, 99.0, far[1], server=97.0)),
         (2, _ans(200, 100.5, onehot[top[2]], True, server=99.9)),
         (3, (504, 101.0, json.dumps({"error": "deadline", "latency_ms": 100.4}).encode()))],
        [(0, _ans(200, 130.0, ref[0], server=60.0)), (1, _ans(200, 60.0, onehot[wrong[1]], True, server=58.0)),
         (2, _ans(503, 3.0, None)), (3, _unrun), (0, _ans(0, 10_000.0))],
    ]
    draws = []
    for d, cpu, wait in zip(made, (0.2, 0.7), (0.1, 0.5), strict=True):
        rows = [{"input": k, "status": s, "latency_ms": ms, "body": b} for k, (s, ms, b) in d]
        draws.append({"judged": real.judge(rows, ref, 100.0), "lags": np.array([0.5, 3.0, 1.0]), "cpu_s": cpu,
                      "wait_s": wait, "wall_s": 2.0, "loadavg": 1.5})
    kinds = [j["kind"] for d in draws for j in d["judged"]]
    assert kinds == ["exact", "exact", "degraded", "504", "exact", "degraded", "503", "504", "0"]
    assert [j["inside"] for d in draws for j in d["judged"]] == [True, True, False, False, False, True, False,
                                                                 False, False]
    p = real.point(draws, 100.0, idle_cpu_per_s=10.0)
    assert p["n"] == 9 and p["inside"] == pytest.approx(3 / 9)
    assert (p["draw_min"], p["draw_max"]) == pytest.approx((1 / 5, 2 / 4))
    assert (p["exact"], p["degraded"], p["504"], p["other"]) == pytest.approx((3 / 9, 2 / 9, 2 / 9, 2 / 9))
    assert p["equal"] == (2, 3) and p["max_diff"] == pytest.approx(0.05)  # the far one is not the model's
    assert p["agree"] == (1, 2)
    assert p["late_client"] == pytest.approx(30.0)  # 130 ms, a 200; the lost request (status 0) is no answer
    assert p["late_server"] == pytest.approx(0.4)  # the 504 the server sent at 100.4 ms (not a late 200)
    assert p["504_ms"] == pytest.approx((60.5, 101.0))
    assert p["late_200s"] == 0 and p["unrun"] == 1  # the 504 at 20 ms said its deadline could not be met
    assert p["cpu_ms"] == pytest.approx(1000 * 0.9 / 9) and p["cpu_above_idle_ms"] == pytest.approx(860 / 9)
    assert p["wait_per_s"] == pytest.approx(1000 * 0.6 / 4)
    assert p["lag_p99"] == pytest.approx(np.percentile([0.5, 3.0, 1.0] * 2, 99))
    answers, timing, per_draw = real.rows_md("sgcc", 0.5, p)
    assert answers.startswith("| sgcc | 0.5 | 9 | 0.3333 | 0.2000 - 0.5000 |") and "0.6667 (2/3)" in answers
    assert timing.startswith("| sgcc | 0.5 | +30.0 | +0.4 | 0 | 60.5 / 101.0 | 1/2 |")
    assert timing.endswith("| 100.00 | 95.56 | 150 |")
    assert per_draw == ["| sgcc | 0.5 | 0 | 4 | 0.5000 | +1.0 | +0.4 | 100 | 50 | 1.5 |",
                        "| sgcc | 0.5 | 1 | 5 | 0.2000 | +30.0 | -40.0 | 350 | 250 | 1.5 |"]


@pytest.mark.parametrize("argv, says", [
    (["--real", "--real-loads", "0"], "--real-loads"),
    (["--real", "--real-schemes", "sgcc", "nope"], "'nope'"),
])
def test_bad_real_options_exit_2_before_any_work(load_benchmark, capsys, argv, says):
    deadlines = load_benchmark("deadlines")
    with pytest.raises(SystemExit) as e:
        deadlines.main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err
