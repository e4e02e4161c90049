"""The soak suite (benchmarks/soak.py): its code path for a second or two (the soak itself is a benchmark, never
run in CI)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from gencc.engine import ThreadBackend, Workers
from gencc.faults import ServiceTimes
from gencc.serving import Service, make_dispatcher

from ..serving.serving_helpers import lin

IN = (3, 4)


@pytest.fixture(scope="module")
def soak(load_benchmark):
    return load_benchmark("soak")


@pytest.mark.parametrize("http", [False, True])
def test_soak_reports_p99_and_rss_per_interval(soak, http, capsys):
    if http:
        pytest.importorskip("uvicorn")
    svc = Service(Workers(12, ThreadBackend({"f": lin}, dtype=np.float32), ServiceTimes(0.002)),
                  lambda env: make_dispatcher("gcc", env, K=8, max_wait=0.02))
    svc.in_shape, svc.workload = IN, SimpleNamespace(in_shape=IN)
    X = np.random.default_rng(0).normal(size=(32, *IN)).astype(np.float32)
    rows = soak.soak(svc, rate=100.0, duration=1.5, minute_s=0.5, X=X, http=http)
    assert [r["minute"] for r in rows] == [1, 2, 3]
    assert 90 <= sum(r["requests"] for r in rows) <= 210  # Poisson(150)
    assert all(r["ok"] == r["requests"] and not r["other"] for r in rows)
    assert all(0 < r["p50_ms"] <= r["p99_ms"] < 1000 and math.isfinite(r["rss_mb"]) for r in rows)
    ratio, growth = soak.report(rows, "smoke")
    assert ratio == rows[-1]["p99_ms"] / rows[0]["p99_ms"] and growth == rows[-1]["rss_mb"] - rows[0]["rss_mb"]
    assert "p99 last / first minute" in capsys.readouterr().out


def test_soak_refuses_bad_arguments(soak, capsys):
    for argv in (["--load", "1.5"], ["--minutes", "0"], ["--rate", "-1"], ["--minutes", "0.001"], ["--crash-p", "1"],
                 ["--wrong-worker", "12"], ["--health-s", "0"]):
        with pytest.raises(SystemExit) as e:
            soak.main(argv)
        assert e.value.code == 2


def test_soak_counts_wrong_answers_and_reads_health(soak):
    """Answers are scored against the truth given (here a class no answer can have: every exact answer counts as
    wrong), and the health is read every `health_s` seconds."""
    svc = Service(Workers(12, ThreadBackend({"f": lin}, dtype=np.float32), ServiceTimes(0.002)),
                  lambda env: make_dispatcher("uncoded", env))
    svc.in_shape, svc.workload = IN, SimpleNamespace(in_shape=IN)
    X = np.random.default_rng(0).normal(size=(32, *IN)).astype(np.float32)
    rows = soak.soak(svc, rate=60.0, duration=1.0, minute_s=0.5, X=X, truth=np.full(len(X), -1), health_s=0.1)
    assert all(r["wrong"] == r["ok"] > 0 and r["degraded"] == 0 for r in rows)
    assert all(set(r["health"]) == {"ok"} and r["min_live"] == 12 for r in rows)
