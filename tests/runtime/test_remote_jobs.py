"""Coded jobs over model replicas gencc does not run (`gencc.run(None, X, code, upstreams=[...])`,
`RemoteExecutor`): the replicas are real Open Inference Protocol servers on 127.0.0.1 (tests/engine/oip_replica.py)
serving a model defined here, stopped here. A coded job over 8 replicas matches f within its code's accuracy; a
replica slowed by its own model code, one killed mid-job and one answering NaN are stragglers, never used, and the
job ends without waiting for them; a job the fleet cannot run is refused before any task goes out."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import gencc
from gencc.codes.registry import make_code
from gencc.errors import ConfigError
from gencc.runtime import Hedged, RemoteExecutor, Replicated, Uncoded, metrics

from ..engine.oip_replica import Replica, dead_url

K, N = 4, 8


def model(X: Any) -> np.ndarray:
    """The replicas' model: smooth, not linear, so a decode is close to f but not equal."""
    X = np.asarray(X, dtype=np.float64)
    return np.stack([np.tanh(X).sum(axis=1), X[:, 0] * X[:, 1], np.sin(X[:, 2]) - X[:, 3]], axis=1)


class Slow:
    """The model, `sleep_s` slower per call: the replica's own slowness, not gencc's injection."""

    def __init__(self, sleep_s: float):
        self.sleep_s = sleep_s

    def __call__(self, X: Any) -> np.ndarray:
        time.sleep(self.sleep_s)
        return model(X)


class Entered(Slow):
    """The slow model, saying when a call has come in (the test kills its replica then, mid-call)."""

    def __init__(self, sleep_s: float):
        super().__init__(sleep_s)
        self.entered = threading.Event()

    def __call__(self, X: Any) -> np.ndarray:
        self.entered.set()
        return super().__call__(X)


@pytest.fixture
def replicas():
    made: list[Replica] = []

    def make(models: list[Any], **kw: Any) -> list[Replica]:
        new = [Replica(m, name="m", **kw) for m in models]
        made.extend(new)
        return new

    yield make
    for r in made:
        r.kill()


def _X(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(K, 4)).astype(np.float32)


def test_a_coded_job_over_the_replicas_matches_f(replicas) -> None:
    reps = replicas([model] * N)
    urls = [r.url for r in reps]
    X = _X()
    Y = model(X)
    r = gencc.run(None, X, gencc.GCC(K=K, N=N), upstreams=urls, seed=0)  # the fleet checked, built, closed
    assert sorted(r.returned.tolist()) == list(range(N)) and r.stragglers == {}
    assert metrics.rel_mse(r.outputs, Y) < 1e-3 and metrics.agreement(r.outputs, Y) == 1.0
    assert sum(x.calls for x in reps) == N  # one request per task, each task on its own replica
    with RemoteExecutor(urls) as ex:
        assert (ex.in_shape, ex.out_shape, ex.n_replicas) == ((4,), (3,), N)
        for code in (Uncoded(K), Replicated(K, N), Hedged(K, N, 5.0), gencc.Replication(K=K, N=N)):
            r = gencc.run(None, X, code, ex, seed=0)
            np.testing.assert_allclose(r.outputs, Y, rtol=1e-5, atol=1e-6)  # copies: the replicas' own answers
        for code in (gencc.GCC(K=K, N=N), gencc.BACC(K=K, N=N), make_code("sgcc", K, N)):
            for seed in range(3):
                X = _X(seed)
                r = gencc.run(None, X, code, ex, wait_for=N, seed=seed)
                assert r.stragglers == {}, (code.name, r.stragglers)
                Y = model(X)
                assert metrics.rel_mse(r.outputs, Y) < 0.05, code.name
                assert metrics.agreement(r.outputs, Y) >= 0.75, code.name
        res = list(gencc.stream(None, [_X(s) for s in range(4)], gencc.GCC(K=K, N=N), ex, max_in_flight=2, seed=0))
        assert [metrics.rel_mse(r.outputs, model(_X(s))) < 1e-3 for s, r in enumerate(res)] == [True] * 4


def test_more_workers_than_replicas_share_them_round_robin(replicas) -> None:
    reps = replicas([model] * 4)
    r = gencc.run(None, _X(), gencc.GCC(K=K, N=N), upstreams=[x.url for x in reps], seed=0)
    assert r.stragglers == {} and metrics.rel_mse(r.outputs, model(_X())) < 1e-3
    assert [x.calls for x in reps] == [2, 2, 2, 2]  # worker n on replica n % 4


@pytest.mark.slow  # waits out a replica's 5 s calls
def test_a_slow_replica_is_a_straggler_the_job_does_not_wait_for(replicas) -> None:
    """Replica 0 sleeps 5 s in its own model: uncoded (input 0 on replica 0) waits for it; the coded job
    stops at 7 of 8 results and decodes without it."""
    reps = replicas([Slow(5.0)] + [model] * (N - 1))
    X = _X()
    with RemoteExecutor([r.url for r in reps]) as ex:
        t0 = time.perf_counter()
        r = gencc.run(None, X, Uncoded(K), ex, seed=0)
        assert time.perf_counter() - t0 >= 4.9
        for seed in range(2):
            t0 = time.perf_counter()
            r = gencc.run(None, X, gencc.GCC(K=K, N=N), ex, wait_for=N - 1, seed=seed)
            took = time.perf_counter() - t0
            assert took < 3.0, took  # far from the slow replica's 5 s, on a loaded machine too
            assert 0 in r.stragglers and r.stragglers[0].startswith("late") and 0 not in r.returned.tolist()
            assert metrics.rel_mse(r.outputs, model(X)) < 0.05
        t0 = time.perf_counter()  # a deadline stops it the same way
        r = gencc.run(None, X, gencc.BACC(K=K, N=N), ex, deadline=0.5, seed=0)
        assert time.perf_counter() - t0 < 3.0 and 0 in r.stragglers


def test_a_replica_killed_mid_job_and_one_answering_nan_are_stragglers_never_used(replicas) -> None:
    entered = Entered(5.0)
    reps = replicas([model, model, entered] + [model] * (N - 3))
    reps[5].mode = "nan"
    X = _X()
    with RemoteExecutor([r.url for r in reps]) as ex:
        killer = threading.Thread(target=lambda: entered.entered.wait(10) and reps[2].kill(), daemon=True)
        killer.start()
        t0 = time.perf_counter()
        r = gencc.run(None, X, gencc.GCC(K=K, N=N), ex, seed=0)  # waits for every worker: none hangs it
        took = time.perf_counter() - t0
        killer.join(10)
        assert took < 3.0, took  # the killed replica's request ends at once, not after its 5 s call
        assert r.stragglers[2].startswith("lost") and "non-finite" in r.stragglers[5]
        assert set(r.returned.tolist()) == set(range(N)) - {2, 5}
        assert metrics.rel_mse(r.outputs, model(X)) < 0.05
        reps[6].mode = "garbage"  # a body that is not JSON: failed, never used
        r = gencc.run(None, X, gencc.GCC(K=K, N=N), ex, seed=1)
        assert {2, 5, 6} <= set(r.stragglers) and not {2, 5, 6} & set(r.returned.tolist())
        assert metrics.rel_mse(r.outputs, model(X)) < 0.1


def test_a_job_the_fleet_cannot_run_is_refused_before_any_work(replicas) -> None:
    (r,) = replicas([model])
    ints = replicas([lambda X: np.asarray(X, dtype=np.float64)[:, :3]] * 2, datatype="INT32")
    X = _X()
    with pytest.raises(ConfigError, match="unreachable") as e:
        gencc.run(None, X, Uncoded(K), upstreams=[r.url, dead_url("m")])
    assert e.value.field == "upstreams"
    with RemoteExecutor([r.url]) as ex:
        with pytest.raises(ValueError, match="pass f=None"):
            gencc.run(model, X, Uncoded(K), ex)
        with pytest.raises(ValueError, match="in_shape=\\(4,\\)"):
            gencc.run(None, np.zeros((K, 5)), Uncoded(K), ex)
        with pytest.raises(ConfigError, match="parity model") as e:
            gencc.run(None, X, gencc.ParM(K=K, k=2, parity=model), ex)
        assert e.value.field == "code"
    with pytest.raises(ValueError, match="not both"):
        gencc.run(None, X, Uncoded(K), RemoteExecutor([r.url]), upstreams=[r.url])
    calls = r.calls
    with RemoteExecutor([i.url for i in ints]) as ex:
        with pytest.raises(ConfigError, match="INT32") as e:  # a mix of integer inputs is not an input
            gencc.run(None, X[:2], gencc.GCC(K=2, N=2), ex)
        assert e.value.field == "code" and sum(i.calls for i in ints) == 0
        Xi = np.arange(8.0).reshape(2, 4)
        out = gencc.run(None, Xi, Uncoded(2), ex).outputs  # copies of whole numbers travel as they are
        np.testing.assert_array_equal(out, Xi[:, :3])
    assert r.calls == calls  # none of the refused jobs sent a task
