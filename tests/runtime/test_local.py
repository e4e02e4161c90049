"""run / stream / baselines on the LocalExecutor (threads, and processes once)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gencc
from gencc.runtime import (
    Hedged,
    JobFailed,
    JobTimeout,
    LocalExecutor,
    Replicated,
    RunResult,
    Uncoded,
    run,
    stream,
)

from .runtime_helpers import Faulty, Flaky, TinyNet, reference, smooth, smooth_one

INF = np.inf


def test_wait_for_all_equals_decode_of_everything(ex, X):
    code = gencc.GCC(K=6, N=12)
    r = run(smooth, X, code, ex, order=False)
    assert isinstance(r, RunResult)
    assert r.returned.tolist() == list(range(12)) and r.stragglers == {}
    np.testing.assert_allclose(r.outputs, reference(code, X, range(12)), atol=1e-12)
    assert set(r.timings) == {"encode", "dispatch", "first_result", "decode", "total"}


def test_order_restores_callers_order(ex, X):
    code = gencc.BACC(K=6, N=12)
    r = run(smooth, X, code, ex)  # order=True: chain ordering, undone on the way out
    perm = gencc.order_inputs(X)
    np.testing.assert_allclose(r.outputs, reference(code, X, range(12), perm=perm), atol=1e-12)


def test_unbatched_function(ex, X):
    code = gencc.GCC(K=6, N=8)
    r = run(smooth_one, X, code, ex, order=False)
    np.testing.assert_allclose(r.outputs, reference(code, X, range(8)), atol=1e-12)


def test_wait_for_takes_the_first_results(ex, X):
    code = gencc.GCC(K=6, N=12)
    lat = np.array([0, 0, 0, INF, 0, 0, 0, 0, INF, 0, 0, INF])
    r = run(smooth, X, code, ex, wait_for=9, latency=lat, order=False)
    assert r.returned.tolist() == [0, 1, 2, 4, 5, 6, 7, 9, 10]
    assert set(r.stragglers) == {3, 8, 11} and all(v.startswith("late") for v in r.stragglers.values())
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)


def test_deadline_stops_without_the_late_ones(ex, X):
    code = gencc.GCC(K=6, N=10)
    lat = np.where(np.arange(10) % 3 == 0, INF, 0.0)
    r = run(smooth, X, code, ex, deadline=1.0, latency=lat, order=False)
    assert r.returned.tolist() == [1, 2, 4, 5, 7, 8]
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)


def test_never_fewer_than_decodable(ex, X):
    code = gencc.GCC(K=6, N=10)  # cubic spline: decodes from 2 results
    lat = np.full(10, INF)
    lat[[3, 5]] = 0.2
    r = run(smooth, X, code, ex, wait_for=2, deadline=0.01, latency=lat, order=False)
    assert r.returned.tolist() == [3, 5]
    np.testing.assert_allclose(r.outputs, reference(code, X, [3, 5]), atol=1e-12)


def test_hard_timeout_raises(ex, X):
    with pytest.raises(JobTimeout, match="hard timeout"):
        run(smooth, X, gencc.GCC(K=6, N=8), ex, latency=np.full(8, INF), timeout=0.3)


@pytest.fixture(scope="module")
def isolated():
    """A thread per worker: each task its own call of f, so a hang or a wrong shape stays with its worker (the
    default runs a batched f's tasks as one batched call, which shares them: tests/runtime/test_batching.py)."""
    e = LocalExecutor(max_threads=64)
    yield e
    e.close_timeout = 0.1  # the hung worker's abandoned thread sleeps on (a daemon): not waited for
    e.close()


def test_faults_are_stragglers(isolated, X):
    ex = isolated
    code = gencc.GCC(K=6, N=12)
    Xt = code.encode(X)
    kinds = {1: "raise", 4: "nan", 7: "shape", 10: "hang"}
    f = Faulty([(Xt[w], k) for w, k in kinds.items()], hang_s=20.0)
    healthy = [w for w in range(12) if w not in kinds]
    lat = np.zeros(12)
    lat[healthy] = 0.3  # the faults answer first, so they are judged (not merely late) before the stop
    r = run(f, X, code, ex, wait_for=8, latency=lat, order=False)
    assert r.returned.tolist() == healthy
    assert "raised: RuntimeError: injected fault" == r.stragglers[1]
    assert r.stragglers[4].startswith("non-finite")
    assert r.stragglers[7].startswith("wrong shape") and "(2,)" in r.stragglers[7]
    assert r.stragglers[10].startswith("late")
    np.testing.assert_allclose(r.outputs, reference(code, X, healthy), atol=1e-12)
    assert np.all(np.isfinite(r.outputs))


def test_all_workers_fail_raises_with_reasons(ex, X):
    code = gencc.GCC(K=6, N=6)
    f = Faulty([(x, "raise") for x in code.encode(X)])
    with pytest.raises(JobFailed, match="cannot decode") as e:
        run(f, X, code, ex, order=False)
    assert set(e.value.stragglers) == set(range(6))


def test_lcc_waits_for_its_threshold(ex):
    X = np.random.default_rng(1).normal(size=(3, 4))
    code = gencc.LCC(K=3, N=8, degree=2)  # threshold (K-1) deg + 1 = 5

    def poly(Z):
        return np.stack([Z[:, 0] ** 2 + Z[:, 1], Z[:, 2] * Z[:, 3]], axis=1)

    poly.batched = True
    lat = np.array([0.0, INF, 0.0, 0.0, INF, 0.1, 0.0, 0.2])
    r = run(poly, X, code, ex, deadline=0.01, latency=lat, order=False)
    assert len(r.returned) == 5 and {1, 4}.isdisjoint(r.returned.tolist())
    np.testing.assert_allclose(r.outputs, poly(X), atol=1e-8)


def test_seeded_latency_model_is_reproducible(ex, X):
    code = gencc.GCC(K=6, N=12)
    model = gencc.Bimodal(p=0.3, factor=1000.0, base=0.001)  # a slow worker takes 1 s: never among the first
    a = run(smooth, X, code, ex, wait_for=6, latency=model, seed=7, order=False)
    b = run(smooth, X, code, ex, wait_for=6, latency=model, seed=7, order=False)
    slow = model.sample(12, np.random.default_rng(7)) > 0.5
    assert set(a.returned.tolist()).isdisjoint(np.flatnonzero(slow).tolist())
    assert set(a.returned.tolist()) <= set(np.flatnonzero(~slow).tolist())
    assert len(a.returned) == len(b.returned) == 6


def test_torch_in_torch_out(ex):
    torch = pytest.importorskip("torch")
    X = torch.randn(6, 4, dtype=torch.float32, generator=torch.Generator().manual_seed(0))

    def tf(Z):
        return torch.stack([torch.sin(Z.sum(1)), torch.cos(Z[:, 0])], dim=1)

    tf.batched = True
    r = run(tf, X, gencc.GCC(K=6, N=12), ex)
    assert isinstance(r.outputs, torch.Tensor) and r.outputs.dtype == torch.float32
    assert r.outputs.shape == (6, 2) and torch.all(torch.isfinite(r.outputs))


def test_factory_executor_builds_torch_model_once(X):
    pytest.importorskip("torch")
    Xw = np.random.default_rng(2).normal(size=(5, 6))
    with LocalExecutor(factory=TinyNet()) as e:
        code = gencc.GCC(K=5, N=10)
        r = run(None, Xw, code, e, order=False)
        f = TinyNet()()
        np.testing.assert_allclose(r.outputs, reference(code, Xw, range(10), f=f), atol=1e-10)
        assert e._local_f is not None and e._local_f is e._bind(None)


def test_processes_backend(X):
    code = gencc.GCC(K=6, N=8)
    f = Faulty([(code.encode(X)[2], "raise")])
    with LocalExecutor(processes=2, factory=lambda: None) as bad:
        with pytest.raises(ValueError, match="picklable"):
            run(smooth, X, code, bad)
    with LocalExecutor(processes=2) as e:
        r = run(f, X, code, e, order=False, timeout=120)
        assert r.stragglers == {2: "raised: RuntimeError: injected fault"}
        np.testing.assert_allclose(r.outputs, reference(code, X, [0, 1, 3, 4, 5, 6, 7]), atol=1e-12)
        with pytest.raises(ValueError, match="another function"):
            run(smooth, X, code, e)


def test_stream_keeps_order(ex):
    rng = np.random.default_rng(3)
    batches = [rng.normal(size=(6, 4)) for _ in range(7)]
    code = gencc.GCC(K=6, N=12)
    lat = gencc.ShiftedExponential(shift=0.001, rate=500.0)
    out = list(stream(smooth, iter(batches), code, ex, max_in_flight=3, seed=5, latency=lat, order=False))
    assert len(out) == 7
    for Xb, r in zip(batches, out, strict=True):
        np.testing.assert_allclose(r.outputs, reference(code, Xb, r.returned), atol=1e-12)


def test_uncoded_waits_for_all_and_is_exact(ex, X):
    r = run(smooth, X, Uncoded(6), ex, latency=np.array([0, 0, 0.05, 0, 0, 0]))
    np.testing.assert_allclose(r.outputs, smooth(X), atol=1e-12)
    assert r.returned.tolist() == list(range(6)) and r.N == 6
    f = Faulty([(X[3], "raise")])
    with pytest.raises(JobFailed, match="cannot decode"):
        run(f, X, Uncoded(6), ex)


def test_replication_first_replica_wins(ex, X):
    lat = np.zeros(12)
    lat[[0, 8]] = INF  # worker 6 holds input 0's other replica, worker 2 input 2's
    r = run(smooth, X, Replicated(6, 12), ex, latency=lat)
    np.testing.assert_allclose(r.outputs, smooth(X), atol=1e-12)
    assert 6 in r.returned and 0 not in r.returned and 2 in r.returned
    assert r.stragglers[0].startswith("late") and r.stragglers[8].startswith("late")


def test_hedged_resends_to_spares(ex, X):
    # one spare per input: on a loaded machine several inputs may still be unfinished at the hedge, and with
    # fewer spares than those the copies of inputs 1 and 4 could be crowded out (a 60 s timeout)
    lat = np.zeros(12)
    lat[[1, 4]] = INF
    r = run(smooth, X, Hedged(6, 12, hedge_delay=0.05), ex, latency=lat)
    np.testing.assert_allclose(r.outputs, smooth(X), atol=1e-12)
    returned = set(r.returned.tolist())
    assert {1, 4}.isdisjoint(returned) and len(returned & set(range(6, 12))) >= 2
    assert r.stragglers[1].startswith("late")


def test_hedged_resends_a_failed_input_at_once(ex, X):
    # it fails twice: a batched call that raises is retried input by input, and the input's own call fails too
    f = Flaky([X[2]], times=2)
    # the hedge delay is far beyond the timeout: only the immediate re-send of the failed input can finish
    r = run(f, X, Hedged(6, 8, hedge_delay=60.0), ex, timeout=10)
    np.testing.assert_allclose(r.outputs, smooth(X), atol=1e-12)
    assert r.stragglers[2].startswith("raised") and 6 in r.returned


def test_hedge_delay_default_needs_latency(ex, X):
    with pytest.raises(ValueError, match="hedge_delay"):
        run(smooth, X, Hedged(6, 8), ex)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"X": np.zeros((5, 4))}, "first dimension K=6"),
        ({"X": np.full((6, 4), np.nan)}, "non-finite"),
        ({"X": np.array([["a"] * 4] * 6)}, "numeric"),
        ({"wait_for": 13}, r"wait_for must be an integer in \[2, N=12\]"),
        ({"wait_for": 1}, "wait_for"),
        ({"deadline": -1.0}, "deadline"),
        ({"timeout": 0}, "timeout"),
        ({"latency": np.zeros(5)}, "one delay per worker"),
        ({"latency": -np.ones(12)}, "non-negative"),
        ({"code": "gcc"}, "gencc Code"),
        ({"f": 3}, "callable"),
        ({"order": "nope"}, "order"),
        ({"executor": object()}, "Executor"),
    ],
)
def test_bad_input_is_a_value_error(ex, X, kwargs, match):
    args = {"f": smooth, "X": X, "code": gencc.GCC(K=6, N=12), "executor": ex, **kwargs}
    with pytest.raises(ValueError, match=match):
        run(**args)


def test_bad_baseline_and_executor_arguments(X):
    with pytest.raises(ValueError, match="own stop rule"):
        run(smooth, X, Uncoded(6), wait_for=3)
    with pytest.raises(ValueError, match="N >= K"):
        Replicated(6, 4)
    with pytest.raises(ValueError, match="hedge_delay"):
        Hedged(6, 8, hedge_delay=-1)
    with pytest.raises(ValueError, match="processes"):
        LocalExecutor(processes=-1)
    with pytest.raises(ValueError, match="max_in_flight"):
        list(stream(smooth, [X], gencc.GCC(6, 8), max_in_flight=0))


def test_close_waits_for_running_tasks_and_gives_up_on_hung_ones():
    """A task inside f when the executor closes finishes before close returns (a torch forward still running
    at interpreter exit can abort the process); a hung f is abandoned after `close_timeout`."""
    import threading
    import time

    from gencc.runtime.executor import Task

    started, done = threading.Event(), threading.Event()

    def slow(x):
        started.set()
        time.sleep(0.3)
        done.set()
        return x

    ex = LocalExecutor()
    batch = ex.submit(slow, [Task(0, np.zeros(2))])
    assert started.wait(5)
    batch.cancel([0])
    ex.close()
    assert done.is_set()
    with pytest.raises(RuntimeError, match="closed"):
        ex.submit(slow, [Task(1, np.zeros(2))])

    hung = threading.Event()
    ex = LocalExecutor()
    ex.close_timeout = 0.2
    ex.submit(lambda x: hung.wait(30) or x, [Task(0, np.zeros(2))])
    t0 = time.perf_counter()
    ex.close()
    assert time.perf_counter() - t0 < 5
    hung.set()


def test_hedge_reaches_spare_workers_a_fresh_executor_has_not_started_yet(X):
    lat = np.zeros(8)
    lat[1] = INF
    with LocalExecutor() as e:  # the first tasks use workers 0..5; the hedge needs 6 and 7
        r = run(smooth, X, Hedged(6, 8, hedge_delay=0.02), e, latency=lat)
    np.testing.assert_allclose(r.outputs, smooth(X), atol=1e-12)
    assert 1 not in r.returned.tolist() and set(r.returned.tolist()) & {6, 7}


def test_injected_faults_are_stragglers_and_a_crashed_worker_is_replaced(X):
    from gencc.faults import Faults

    code = gencc.GCC(K=6, N=12)
    with LocalExecutor(faults=Faults(raise_p=0.2, nan_p=0.1, crash_p=0.1), seed=1) as e:
        for _ in range(3):  # later jobs run on the workers that crashed before
            r = run(smooth, X, code, e, order=False)
            assert r.stragglers and len(r.returned) + len(r.stragglers) == 12
            for reason in r.stragglers.values():
                assert reason in ("raised: injected raise", "non-finite output (NaN or inf)", "lost: worker crashed")
            np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)
    with pytest.raises(ValueError, match="faults must be"):
        LocalExecutor(faults=0.1)


def test_stream_with_one_job_in_flight_runs_each_job_in_the_callers_thread(ex):
    """max_in_flight=1 overlaps nothing, so no pool thread runs the jobs: f sees no gencc-job thread alive, and each
    result is the one `run` gives for its batch (every worker waited for: the decode is deterministic)."""
    rng = np.random.default_rng(4)
    batches = [rng.normal(size=(6, 4)) for _ in range(4)]
    code = gencc.GCC(K=6, N=12)
    job_threads = []

    def f(x):
        job_threads.extend(t.name for t in threading.enumerate() if t.name.startswith("gencc-job"))
        return smooth(x)

    f.batched = True
    out = list(stream(f, iter(batches), code, ex, max_in_flight=1, seed=9))
    assert job_threads == [] and len(out) == 4
    for Xb, r in zip(batches, out, strict=True):
        assert r.returned.tolist() == list(range(12))
        np.testing.assert_array_equal(r.outputs, run(smooth, Xb, code, ex).outputs)
    assert len(list(stream(f, batches, code, ex, max_in_flight=2))) == 4
    assert job_threads  # with two in flight, the pool's threads run the jobs


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_inputs_in_their_own_order_are_not_aliased_by_the_outputs(ex, kind):
    """Replication (never ordered) and order=False take the inputs in the caller's order without a copy in and
    out of a permutation: the outputs are still a new array of X's kind, equal to f on each input."""
    Xn = np.random.default_rng(4).normal(size=(4, 3))
    if kind == "torch":
        torch = pytest.importorskip("torch")
        X = torch.as_tensor(Xn)

        def f(Z):
            return torch.as_tensor(np.asarray(Z)) * 3.0
    else:
        X = Xn

        def f(Z):
            return np.asarray(Z) * 3.0

    f.batched = True
    for code, order in ((gencc.Replication(4, 8), True), (gencc.Replication(4, 4), False), (gencc.Uncoded(4), True)):
        r = run(f, X, code, ex, order=order)
        out = np.asarray(r.outputs)
        assert type(r.outputs) is type(X)
        np.testing.assert_allclose(out, Xn * 3.0, rtol=1e-12)
        assert not np.shares_memory(out, Xn) and not r.missing.size
        out[:] = 0.0  # the caller's X is its own
        assert np.all(np.asarray(X) == Xn)


def test_replication_decodes_when_a_replica_of_each_input_is_back(ex):
    """Replication(4, 8): worker 1 never answers, its replica (worker 5) does, so the job decodes input 1 from it;
    with both replicas of input 1 failing the job cannot decode, and says which workers failed."""
    X = np.random.default_rng(5).normal(size=(4, 3))

    def f(Z):
        return np.asarray(Z) * 2.0

    f.batched = True
    code = gencc.Replication(4, 8)
    lat = np.zeros(8)
    lat[1] = INF
    r = run(f, X, code, ex, wait_for=7, latency=lat)
    np.testing.assert_allclose(r.outputs, X * 2.0, rtol=1e-12)
    assert 1 in r.stragglers and 5 in r.returned.tolist() and not r.missing.size

    def bad(Z):
        Z = np.asarray(Z)
        if np.any(Z == X[1]):
            raise ValueError("input 1 fails")
        return Z * 2.0

    with pytest.raises(JobFailed, match="worker 1: raised.*worker 5: raised"):
        run(bad, X, code, ex)


def test_a_jobs_clocks_start_when_the_executor_is_ready(monkeypatch, X):
    """`Executor.prepare` (a RayExecutor's actors starting) runs before the job's clock starts, so its start-up
    never counts against the job's timeout. Virtual time: prepare moves the job's clock on by 100 s."""
    import types

    import gencc.runtime.collect as collect_mod

    offset = [0.0]
    clock = types.SimpleNamespace(perf_counter=lambda: time.perf_counter() + offset[0])
    monkeypatch.setattr(collect_mod, "time", clock)

    class SlowStart(LocalExecutor):
        prepared: list[int] = []

        def prepare(self, f, num_workers):
            self.prepared.append(num_workers)
            offset[0] += 100.0

    with SlowStart() as e:
        r = run(smooth, X, gencc.GCC(K=6, N=12), e, order=False, timeout=60)
    assert SlowStart.prepared == [12]
    assert r.stragglers == {} and r.timings["first_result"] < 60
