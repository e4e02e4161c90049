"""LocalExecutor with fewer threads than workers: a job's tasks as a few batched calls of f, each logical worker
keeping its own latency, faults and failures; on a model gencc never saw (a torch module defined here)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

import gencc
from gencc.engine import shared_threads
from gencc.engine.threads import WorkerThreads
from gencc.runtime import JobFailed, JobTimeout, LocalExecutor, run

from .runtime_helpers import Faulty, reference, smooth

INF = np.inf


class Calls:
    """A batched numpy callable around f that counts the rows of each call."""

    batched = True

    def __init__(self, f):
        self.f, self.sizes = f, []

    def __call__(self, X):
        self.sizes.append(len(X))
        return self.f(X)


@pytest.fixture(scope="module")
def one():
    e = LocalExecutor(max_threads=1)
    yield e
    e.close()


def test_one_thread_runs_a_job_as_one_call_of_a_model_gencc_never_saw(one, X):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).double().eval()

    def model(Z):
        with torch.no_grad():
            return net(torch.as_tensor(np.asarray(Z, dtype=float))).numpy()

    f = Calls(model)
    code = gencc.GCC(K=6, N=10)
    r = run(f, X, code, one, order=False)
    assert f.sizes == [10] and r.returned.tolist() == list(range(10))
    np.testing.assert_allclose(r.outputs, reference(code, X, range(10), f=model), atol=1e-10)


def test_shared_thread_keeps_each_workers_latency(one, X):
    code = gencc.GCC(K=6, N=12)
    lat = np.zeros(12)
    lat[[2, 5, 9]] = INF  # never delivered: these workers straggle, their thread-mates do not
    r = run(smooth, X, code, one, wait_for=9, latency=lat, order=False)
    assert r.returned.tolist() == [w for w in range(12) if w not in (2, 5, 9)]
    assert all(r.stragglers[w].startswith("late") for w in (2, 5, 9))
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)
    again = run(smooth, X, code, one, order=False)  # the stragglers' workers serve the next job at once
    assert again.returned.tolist() == list(range(12))


def test_a_raising_input_fails_only_its_own_task_in_a_batch(X):
    code = gencc.GCC(K=6, N=12)
    f = Faulty([(code.encode(X)[4], "raise")])
    with LocalExecutor(max_threads=2) as e:
        r = run(f, X, code, e, order=False)
    assert r.stragglers == {4: "raised: RuntimeError: injected fault"}
    np.testing.assert_allclose(r.outputs, reference(code, X, [w for w in range(12) if w != 4]), atol=1e-12)


def test_executor_options_are_checked():
    with pytest.raises(ValueError, match="blas_threads"):
        LocalExecutor(blas_threads="many")
    with pytest.raises(ValueError, match="task_timeout"):
        LocalExecutor(task_timeout=0)
    with pytest.raises(ValueError, match="max_threads"):
        LocalExecutor(max_threads=0)


def test_the_default_executor_batches_a_model_gencc_never_saw(X):
    """`gencc.run` without an executor: a torch module through `gencc.as_model` runs its job as batched calls
    (one per pool thread at most), the outputs those of the decode of every worker's result."""
    torch = pytest.importorskip("torch")
    from gencc.runtime.local import batch_threads

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin, self.sizes = torch.nn.Linear(4, 3), []

        def forward(self, x):
            self.sizes.append(len(x))
            return torch.tanh(self.lin(x))

    net = Net()
    model = gencc.as_model(net, input_shape=(4,))
    code = gencc.GCC(K=6, N=10)
    r = run(model, X, code, order=False)
    assert sum(net.sizes) == 10 and len(net.sizes) <= batch_threads()
    net.sizes.clear()
    want = reference(code, X, range(10), f=lambda Z: model(np.asarray(Z, dtype=np.float32)))
    assert net.sizes == [10]  # the reference: one call on the ten coded inputs
    np.testing.assert_allclose(r.outputs, want, atol=1e-5)


def test_a_function_on_one_input_runs_on_a_shared_pool_where_a_hung_call_holds_only_its_task(X):
    """A per-input f on the default executor: each call one input, on at most `shared_threads()` threads whatever
    N; a call that hangs is a straggler (the others' tasks go to the other threads) and the job is answered."""
    code = gencc.GCC(K=6, N=8)
    stuck, release = code.encode(X)[3], threading.Event()

    class One:  # not batched: called on one input at a time
        def __init__(self):
            self.threads, self.lock = set(), threading.Lock()

        def __call__(self, x):
            with self.lock:
                self.threads.add(threading.get_ident())
            if np.array_equal(x, stuck):
                release.wait(10)
            return smooth(np.asarray(x)[None])[0]

    f = One()
    with LocalExecutor() as e:
        t0 = time.perf_counter()
        r = run(f, X, code, e, order=False, wait_for=7)
        took = time.perf_counter() - t0
        release.set()
    assert took < 5 and 3 not in r.returned and len(r.returned) == 7
    assert 1 <= len(f.threads) <= min(8, shared_threads())
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)


def test_threads_stay_few_at_a_thousand_workers():
    """K = 100, N = 1,000: a per-input and a batched f each run with O(1) threads (at most 64 in the process)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 4))
    code = gencc.GCC(K=100, N=1000)
    seen = []

    def plain(x):
        seen.append(threading.active_count())
        return np.asarray(x) * 2.0

    def batched(Z):
        seen.append(threading.active_count())
        return np.asarray(Z) * 2.0

    batched.batched = True
    with LocalExecutor() as e:
        for f in (plain, batched):
            r = run(f, X, code, e, order=False, wait_for=900)
            assert len(r.returned) == 900
            np.testing.assert_allclose(r.outputs, reference(code, X, r.returned, f=lambda Z: 2 * Z), atol=1e-8)
    assert max(seen) <= 64


def test_a_hung_batch_fails_its_job_and_the_workers_recover(X):
    """A batched call that hangs: the job stops at its timeout (a JobTimeout, never a hang of the caller); the
    job's cancel abandons the thread and a fresh one serves the workers. With task_timeout the hung call's
    tasks fail as hung, so the job fails at once with those reasons."""
    code = gencc.GCC(K=6, N=8)
    f = Faulty([(code.encode(X)[3], "hang")], hang_s=2.0)
    with LocalExecutor() as e:
        e.close_timeout = 0.1  # the abandoned thread ends after its call: not waited for
        t = time.perf_counter()
        with pytest.raises(JobTimeout):
            run(f, X, code, e, order=False, timeout=0.2)
        assert time.perf_counter() - t < 1.5  # at its timeout, not after the hang
        r = run(smooth, X, code, e, order=False)  # the same workers, served by a fresh thread
        assert r.returned.tolist() == list(range(8))
    with LocalExecutor(task_timeout=0.2) as e:
        e.close_timeout = 0.1
        t = time.perf_counter()
        with pytest.raises(JobFailed) as err:
            run(f, X, code, e, order=False, timeout=10)
        assert time.perf_counter() - t < 1.5
        assert sorted(err.value.stragglers) == list(range(8))
        assert all("hung: no result after 0.2 s" in v for v in err.value.stragglers.values())
        assert run(smooth, X, code, e, order=False).returned.tolist() == list(range(8))


def test_results_delivered_together_still_stop_at_exactly_wait_for(X):
    """The default executor delivers a job's results in one go: the collector still stops after the first
    `wait_for` of them (the rest are late stragglers, never used) and decodes those alone."""
    code = gencc.GCC(K=6, N=12)
    with LocalExecutor() as e:
        for wait_for in (7, 9, 12):
            r = run(smooth, X, code, e, wait_for=wait_for, order=False)
            assert len(r.returned) == wait_for and len(r.stragglers) == 12 - wait_for
            assert all(v.startswith("late") for v in r.stragglers.values())
            assert set(r.returned) | set(r.stragglers) == set(range(12))
            np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)
        r = run(smooth, X, code, e, deadline=5.0, order=False)  # a deadline policy: every result, well before it
        assert r.returned.tolist() == list(range(12)) and r.latency < 2.0


def test_results_delivered_together_are_taken_in_the_jobs_random_dispatch_order(X):
    """A thread runs its workers' ready tasks in worker order; the first `wait_for` of results that finish together
    are the first dispatched (the job's random order), not always the lowest-numbered workers, whose complement
    is a block of stragglers at the edge of the decoder's interval."""
    code = gencc.GCC(K=6, N=12)
    with LocalExecutor() as e:
        taken = {tuple(run(smooth, X, code, e, wait_for=10, order=False, seed=s).returned.tolist())
                 for s in range(8)}
    assert len(taken) > 1, taken


def test_a_job_leaves_no_cyclic_garbage(X):
    """A job's tasks, batch and completions are freed by reference counting when it returns (no task is left
    for the cyclic garbage collector, whose full passes get slow in a process holding a large model)."""
    import gc

    from gencc.engine import Task
    from gencc.runtime.executor import EngineBatch

    code = gencc.GCC(K=6, N=12)
    with LocalExecutor() as e:
        run(smooth, X, code, e, wait_for=9)
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                run(smooth, X, code, e, wait_for=9)
            time.sleep(0.05)  # the worker thread has let go of the last job's tasks
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = [o for o in gc.garbage if isinstance(o, (Task, EngineBatch))]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert left == []


def test_a_cheap_per_input_f_at_large_n_runs_claimed_tasks_one_call_each_and_stops_at_exactly_wait_for(monkeypatch):
    """A cheap per-input f on 300 workers: shared threads claim many tasks at once and the collector takes their
    results in blocks, yet every call is one input, the job uses exactly its first wait_for results, each
    worker's arrival is its own, and the decode matches the reference from the results it used."""
    code = gencc.GCC(K=60, N=300)
    X = np.random.default_rng(3).normal(size=(60, 4))
    calls, lock = [], threading.Lock()

    def one(x):  # per input, defined here: not a model gencc ships
        with lock:  # a job's coded inputs are rows of one array: its base (kept alive here) names the job
            calls.append((x.base, np.shape(x)))
        return smooth(np.asarray(x)[None])[0]

    claims, claim = [], WorkerThreads._claim  # each claim's size, as the shared threads take them

    def spy(self) -> int:
        claims.append(claim(self))
        return claims[-1]

    monkeypatch.setattr(WorkerThreads, "_claim", spy)
    with LocalExecutor() as e:
        for _ in range(3):  # the later jobs' threads claim several tasks each (their calls are cheap by then)
            r = run(one, X, code, e, order=False, wait_for=250)
            assert len(r.returned) == 250 and not any(w in r.stragglers for w in r.returned)
            assert len(r.arrivals) >= 250
            np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-10)
    # every call one input, at most one call per worker and job (a call of the job before may still end during
    # the next one: counted per job, not per window of time)
    with lock:
        assert {shape for _, shape in calls} == {(4,)}
        per_job = Counter(id(job) for job, _ in calls)
    assert len(per_job) == 3 and max(per_job.values()) <= 300
    # claims while the jobs ran, not after: a call's seconds include its waits for the GIL, so the last four
    # (which `_claim` reads) may all be long on a loaded machine once the master decodes
    assert claims and max(claims) > 1


def test_a_per_input_f_that_returns_nan_or_inf_is_a_straggler_though_the_shared_threads_leave_the_check_to_the_job():
    """The shared pool's lean call does not check each output finite (`Workers.check_finite` False): the job's
    collector checks the outputs delivered together. A per-input f returning NaN, inf, a wrong shape or raising
    on chosen coded inputs: those workers are stragglers with their reasons, wherever their rows fall among the
    results delivered together, and the decode matches the reference from the results it used."""
    code = gencc.GCC(K=8, N=16)
    X = np.random.default_rng(5).normal(size=(8, 4))
    Xt = code.encode(X)
    bad = {2: "nan", 5: "inf", 9: "shape", 12: "raise"}

    def one(x):  # per input, defined here: not a model gencc ships
        y = smooth(np.asarray(x)[None])[0]
        for n, kind in bad.items():
            if np.array_equal(x, Xt[n]):
                if kind == "raise":
                    raise RuntimeError("bad input")
                if kind == "shape":
                    return y[:2]
                return y * (np.nan if kind == "nan" else np.inf)
        return y

    with LocalExecutor() as e:
        for _ in range(4):  # the later jobs' threads claim several tasks each: the rows come back together
            r = run(one, X, code, e, order=False)  # every worker's result judged
            assert r.returned.tolist() == [n for n in range(16) if n not in bad]
            assert r.stragglers[2] == r.stragglers[5] == "non-finite output (NaN or inf)"
            assert r.stragglers[9].startswith("wrong shape") and r.stragglers[12].startswith("raised: RuntimeError")
            np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-10)
        assert not e._workers.check_finite
