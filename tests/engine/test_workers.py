"""gencc.engine.Workers: long-lived workers with FIFO queues, dropping, preemption, crashes, injection."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from gencc.engine import Task, ThreadBackend, Workers
from gencc.faults import Faults, ServiceTimes


def double(X):
    return 2 * np.asarray(X, dtype=float)


double.batched = True


def wait_for(cond, timeout: float = 30.0) -> None:
    """Poll until cond() holds (a generous bound: these run on a loaded 2-core machine)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


@pytest.fixture
def make():
    made = []

    def build(n=2, fns=None, **kw):
        w = Workers(n, ThreadBackend(fns or {"f": double}), **kw)
        made.append(w)
        return w

    yield build
    for w in made:
        w.close(timeout=2)


def test_each_worker_runs_its_queue_in_order_and_reports_on_the_control_thread(make):
    w = make(2)
    done, threads, tasks = [], set(), []

    def on_done(t):
        done.append((t.worker, t.slot))
        tasks.append(t)
        threads.add(threading.current_thread().name)

    for i in range(6):
        w.send(i % 2, Task(x=np.full(2, i), fn="f", on_done=on_done, slot=i))
    wait_for(lambda: len(done) == 6)
    assert [s for wk, s in done if wk == 0] == [0, 2, 4] and [s for wk, s in done if wk == 1] == [1, 3, 5]
    assert threads == {"gencc-worker-control"}
    assert all(t.ok and np.array_equal(t.output, 2 * t.x) for t in tasks)
    assert len(w.executed) == 6 and all(r.ok and r.fn == "f" for r in w.executed) and w.counts["ok"] == 6


def test_a_cancelled_queued_task_is_dropped_before_it_starts(make):
    gate = threading.Event()
    w = make(1, {"f": double, "block": lambda X: gate.wait(30) and X})
    done = []
    w.send(0, Task(x=np.ones(1), fn="block", on_done=done.append))
    queued = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, queued)
    assert w.loads()[0] == 2
    queued.cancel()
    assert w.loads()[0] == 1  # the load count follows the cancel at once
    gate.set()
    wait_for(lambda: w.dropped == 1 and len(done) == 1)
    assert queued not in done and w.loads()[0] == 0


def test_preempt_stops_a_running_task_and_hands_the_queue_to_a_fresh_thread(make):
    hung = threading.Event()
    w = make(1, {"f": double, "hang": lambda X: hung.wait(30) and X}, preempt=True)
    done = []
    stuck = Task(x=np.ones(1), fn="hang", on_done=done.append)
    w.send(0, stuck)
    wait_for(lambda: w.running == 1)
    nxt = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, nxt)
    stuck.cancel()  # the hung call goes on in its old thread; the worker is free again
    wait_for(lambda: nxt in done, timeout=10)
    assert stuck not in done and len(w.threads) == 2
    hung.set()


def test_without_preempt_a_started_task_runs_to_the_end_and_is_delivered(make):
    w = make(1, {"f": lambda X: time.sleep(0.05) or np.asarray(X, dtype=float)})
    done = []
    t = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, t)
    wait_for(lambda: w.running == 1)
    t.cancel()
    wait_for(lambda: done == [t])
    assert t.ok


def test_a_failing_f_is_a_failed_task_not_a_dead_worker(make):
    def bad(X):
        raise RuntimeError("no")

    w = make(1, {"f": double, "bad": bad})
    done = []
    w.send(0, Task(x=np.ones(1), fn="bad", on_done=done.append))
    w.send(0, Task(x=np.ones(1), fn="f", on_done=done.append))
    wait_for(lambda: len(done) == 2)
    assert (done[0].ok, done[0].reason, done[0].error) == (False, "raise", "RuntimeError: no")
    assert done[1].ok and not w.dead[0]


def test_an_injected_crash_kills_the_worker_and_fails_what_it_held(make):
    w = make(2, faults=Faults(crash_p=1.0))
    done = []
    for _ in range(3):
        w.send(0, Task(x=np.ones(1), fn="f", on_done=done.append))
    wait_for(lambda: len(done) == 3)
    assert all(t.reason == "crash" for t in done) and w.dead[0] and np.isinf(w.loads()[0])
    late = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, late)  # a dead worker fails new work at once
    wait_for(lambda: late in done)
    assert late.reason == "crash"


def test_service_time_keeps_the_worker_busy_and_a_delay_holds_the_outcome(make):
    w = make(1, service=ServiceTimes(samples=[0.05]))
    done = []
    t0 = w.now()
    w.send(0, Task(x=np.ones(1), fn="f", on_done=done.append, delay=0.05))
    wait_for(lambda: done)
    assert done[0].ok and done[0].t_end - t0 >= 0.1 - 1e-3


def test_grow_adds_idle_workers_and_closed_workers_refuse_work(make):
    w = make(1)
    w.grow(3)
    assert w.n_workers == 3 and w.loads().tolist() == [0.0, 0.0, 0.0]
    w.close(timeout=2)
    with pytest.raises(RuntimeError, match="closed"):
        w.send(0, Task(x=np.ones(1)))
    with pytest.raises(ValueError, match="at least one worker"):
        Workers(0, ThreadBackend())


class Counting:
    """A batched f that counts its calls and the rows of each; rows below zero make the whole batch raise."""

    batched = True

    def __init__(self):
        self.sizes = []

    def __call__(self, X):
        X = np.asarray(X, dtype=float)
        self.sizes.append(len(X))
        if np.any(X < 0):
            raise ValueError("negative input")
        return 2 * X


def test_a_thread_serving_several_workers_runs_their_ready_tasks_as_one_call(make):
    f = Counting()
    w = make(4, {"f": f}, threads=1)
    done = []
    w.send_many([(k, Task(x=np.full(3, k), fn="f", on_done=done.append)) for k in range(4)])
    wait_for(lambda: len(done) == 4)
    assert f.sizes == [4] and sorted(t.worker for t in done) == [0, 1, 2, 3]
    assert all(t.ok and np.array_equal(t.output, np.full(3, 2.0 * t.worker)) for t in done)
    assert w.counts["ok"] == 4 and w.running == 0 and w.loads().tolist() == [0.0] * 4


def test_a_thread_takes_its_workers_heads_in_worker_order_whatever_the_order_they_were_queued(make):
    """A thread serving 70 workers gets tasks for a few of them, out of order (a set of 64, 1, 9 and 33 iterates
    in that order): its call stacks the head task of each in worker order; a worker's second task waits for the
    next call."""
    calls = []
    gate = threading.Event()

    def f(X):
        gate.wait(10)
        calls.append(np.asarray(X)[:, 0].tolist())
        return 2 * np.asarray(X, dtype=float)

    f.batched = True
    w = make(70, {"f": f}, threads=1)
    done = []
    w.send(0, Task(x=np.full(2, -1.0), fn="f", on_done=done.append))  # holds the thread while the rest queue up
    wait_for(lambda: w.running == 1)
    order = [64, 1, 9, 33, 64]
    w.send_many([(k, Task(x=np.full(2, float(k) + 0.5 * (i == 4)), fn="f", on_done=done.append))
                 for i, k in enumerate(order)])
    gate.set()
    wait_for(lambda: len(done) == 6)
    assert calls == [[-1.0], [1.0, 9.0, 33.0, 64.0], [64.5]]
    assert all(t.ok for t in done) and w.running == 0 and sum(w.loads()) == 0


def test_a_failing_batch_is_retried_task_by_task_so_only_the_bad_input_fails(make):
    f = Counting()
    w = make(3, {"f": f}, threads=1)
    done = []
    w.send_many([(k, Task(x=np.full(2, -1.0 if k == 1 else k), fn="f", on_done=done.append)) for k in range(3)])
    wait_for(lambda: len(done) == 3)
    by = {t.worker: t for t in done}
    assert f.sizes == [3, 1, 1, 1] and by[0].ok and by[2].ok and np.array_equal(by[2].output, [4.0, 4.0])
    assert (by[1].ok, by[1].reason, by[1].error) == (False, "raise", "ValueError: negative input")


def test_a_block_task_shares_a_call_with_single_tasks_and_keeps_its_rows(make):
    """A block (several inputs travelling as one task) is stacked with the call's other tasks and gets its rows
    back; a non-finite row leaves the block ok (its owner judges rows); when the call raises, each row of the
    block is called on its own and gets its output or its exception."""
    f = Counting()
    w = make(3, {"f": f}, threads=1)
    done = []
    xb = np.array([[0.0, 1.0], [np.nan, 2.0], [3.0, 4.0]])
    w.send_many([(0, Task(x=xb, fn="f", on_done=done.append, block=True)),
                 (1, Task(x=np.full(2, 7.0), fn="f", on_done=done.append))])
    wait_for(lambda: len(done) == 2)
    by = {t.worker: t for t in done}
    assert f.sizes == [4] and by[0].ok and by[1].ok and w.counts["ok"] == 2
    np.testing.assert_array_equal(by[0].output, 2 * xb)
    np.testing.assert_array_equal(by[1].output, [14.0, 14.0])
    done.clear()
    f.sizes.clear()
    xb = np.array([[1.0, 1.0], [-1.0, 2.0], [3.0, 4.0]])  # the middle row makes the call raise
    w.send_many([(0, Task(x=xb, fn="f", on_done=done.append, block=True)),
                 (1, Task(x=np.full(2, 7.0), fn="f", on_done=done.append))])
    wait_for(lambda: len(done) == 2)
    by = {t.worker: t for t in done}
    assert f.sizes == [4, 1, 1, 1, 1] and by[0].ok and by[1].ok
    rows = by[0].output
    assert type(rows) is list and isinstance(rows[1], ValueError)
    np.testing.assert_array_equal(rows[0], [2.0, 2.0])
    np.testing.assert_array_equal(rows[2], [6.0, 8.0])


def test_workers_sharing_a_thread_keep_their_own_delays(make):
    w = make(2, threads=1)
    done = []
    t0 = w.now()
    slow = Task(x=np.ones(1), fn="f", on_done=done.append, delay=0.4)
    w.send(0, slow)
    fast = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(1, fast)
    nxt = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, nxt)  # worker 0 is busy until its delay has passed; worker 1 is not held by it
    wait_for(lambda: len(done) == 3)
    assert done[0] is fast and fast.t_end - t0 < 0.3
    assert slow.t_end - t0 >= 0.4 - 1e-3 and nxt.t_start >= slow.t_end - 1e-3


def test_a_crashed_worker_is_re_created_after_restart_s(make):
    def lost(X):
        raise ConnectionError("backend lost")

    w = make(2, {"f": double, "lost": lost}, restart_s=0.2)
    done = []
    w.send(0, Task(x=np.ones(1), fn="lost", on_done=done.append))
    wait_for(lambda: done)
    assert done[0].reason == "crash" and w.dead[0] and not w.dead[1] and w.restarts.tolist() == [0, 0]
    wait_for(lambda: not w.dead[0], timeout=10)
    assert w.restarts.tolist() == [1, 0]
    again = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, again)
    wait_for(lambda: again in done)
    assert again.ok and sum(t.is_alive() for t in w.threads) == 2  # the crashed thread ended, a fresh one serves


def test_a_hung_call_is_abandoned_after_task_timeout_and_the_worker_serves_on(make):
    hung = threading.Event()
    w = make(2, {"f": double, "hang": lambda X: hung.wait(30) and X}, task_timeout=0.2, max_abandoned=1)
    done = []
    stuck = Task(x=np.ones(1), fn="hang", on_done=done.append)
    w.send(0, stuck)
    wait_for(lambda: stuck in done, timeout=10)
    assert (stuck.ok, stuck.reason) == (False, "hang") and "abandoned" in stuck.error and len(w.abandoned) == 1
    after = Task(x=np.ones(1), fn="f", on_done=done.append)
    w.send(0, after)
    wait_for(lambda: after in done)
    assert after.ok and not w.dead.any()
    second = Task(x=np.ones(1), fn="hang", on_done=done.append)
    w.send(1, second)  # past max_abandoned: its worker is marked dead, no third thread is spent on it
    wait_for(lambda: second in done, timeout=10)
    assert second.reason == "hang" and w.dead.tolist() == [False, True] and len(w.abandoned) == 2
    hung.set()  # the abandoned threads end: worker 1 is served again
    wait_for(lambda: not w.dead.any(), timeout=10)
    assert w.restarts.tolist() == [0, 1]


def test_executed_is_a_short_record_without_inputs_or_outputs(make):
    w = make(1, keep=5)
    done = []
    for i in range(20):
        w.send(0, Task(x=np.full(1000, i), fn="f", on_done=done.append))
    wait_for(lambda: len(done) == 20)
    assert len(w.executed) == 5 and w.counts["ok"] == 20
    assert all(not hasattr(r, "x") and not hasattr(r, "output") and r.ok and r.t_end >= r.t_start
               for r in w.executed)


def test_blas_threads_are_capped_while_the_workers_run_and_restored_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    w = Workers(2, ThreadBackend({"f": double}), blas_threads=1)
    try:
        assert all(i["num_threads"] == 1 for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas")
    finally:
        w.close(timeout=2)
    assert [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"] == before
    with pytest.raises(ValueError, match="blas_threads"):
        Workers(1, ThreadBackend(), blas_threads=0)


def test_shared_threads_serve_every_worker_with_few_threads_and_keep_each_workers_order_and_delay(make):
    """Shared threads: 40 workers on 2 threads, each worker's queue in order, one task per call, and a worker's
    injected delay a hold that never blocks the thread (40 tasks delayed 0.3 s each finish together)."""
    calls = []

    def one(x):  # per input
        calls.append(np.asarray(x).shape)
        return 2 * np.asarray(x, dtype=float)

    w = make(40, threads=2, shared=True)
    done = []
    t0 = time.perf_counter()
    for i in range(80):  # the task's own callable, taking one input
        w.send(i % 40, Task(x=np.full(3, i), fn=one, delay=0.3, slot=i, on_done=lambda t: done.append(t)))
    wait_for(lambda: len(done) == 80)
    took = time.perf_counter() - t0
    assert len(w._wake) == 2 and len({id(q) for q in w._wake}) == 1  # two threads, one wake-up queue
    assert all(t.ok and np.array_equal(t.output, 2 * t.x) for t in done)
    for k in range(40):
        assert [t.slot for t in done if t.worker == k] == [k, k + 40]
    assert took < 0.3 * 80 / 2 / 2  # two rounds of holds, not a thread's sleep per task
    assert all(s == (3,) for s in calls)  # each call one input


def test_a_hung_call_on_shared_threads_holds_only_its_task_and_preempt_replaces_its_thread(make):
    release = threading.Event()

    def one(x):
        if x[0] == 0:
            release.wait(10)
        return np.asarray(x, dtype=float)

    w = make(6, threads=2, shared=True, preempt=True)
    done = []
    tasks = [Task(x=np.full(2, i), fn=one, slot=i, on_done=lambda t: done.append(t)) for i in range(6)]
    for i, t in enumerate(tasks):
        w.send(i, t)
    wait_for(lambda: len(done) == 5)  # every task but the hung one, on the other thread
    assert sorted(t.slot for t in done) == [1, 2, 3, 4, 5]
    old = {t.ident for t in w.threads if t.is_alive()}
    tasks[0].cancel()
    wait_for(lambda: len(w.abandoned) == 1)
    w.send(0, Task(x=np.full(2, 7), fn=one, slot=7, on_done=lambda t: done.append(t)))
    wait_for(lambda: len(done) == 6)
    assert done[-1].ok and done[-1].worker == 0 and {t.ident for t in w.threads if t.is_alive()} - old
    release.set()


def test_shared_threads_need_a_count(make):
    with pytest.raises(ValueError, match="thread count"):
        Workers(2, ThreadBackend(), shared=True)


def _cheap_then(w, one, n):
    """Run n cheap tasks on shared workers w (one worker each) so their recent seconds per call are small."""
    done = []
    for i in range(n):
        w.send(i, Task(x=np.full(2, 0.5), fn=one, on_done=lambda t: done.append(t)))
    wait_for(lambda: len(done) == n)


def test_shared_threads_claim_several_cheap_calls_and_each_task_keeps_its_own_call_and_times(make):
    """A cheap f: a shared thread claims several idle workers' tasks at once and runs them in a loop, one call
    each, every task with its own start and end (within a thread, one call after another); a slow f claims
    one at a time, so its calls spread over the threads."""
    calls = []

    def one(x):
        calls.append((threading.get_ident(), np.asarray(x).shape))
        if x[0] < 0:
            time.sleep(0.005)  # slower than CHUNK_S
        return 3 * np.asarray(x, dtype=float)

    w = make(200, threads=2, shared=True)
    _cheap_then(w, one, 50)
    assert w._claim() > 1
    done = []
    w.send_many((i, Task(x=np.full(2, i), fn=one, slot=i, on_done=lambda t: done.append(t))) for i in range(200))
    wait_for(lambda: len(done) == 200)
    assert all(t.ok and np.array_equal(t.output, 3 * t.x) for t in done)
    assert all(shape == (2,) for _, shape in calls)  # one input per call
    spans = sorted((r.t_start, r.t_end) for r in list(w.executed)[-200:])
    assert all(a < b for a, b in spans) and len({a for a, _ in spans}) == 200  # each its own call's times
    _cheap_then(w, lambda x: one(-np.abs(x)), 4)
    assert w._claim() == 1  # the calls got slow: one at a time


def test_a_slow_call_hands_what_its_thread_claimed_and_finished_to_the_other_threads(make):
    """A thread that claimed cheap tasks behind a call that turns slow gives them back (another thread runs them)
    and has the task it finished before that call delivered, long before the slow call returns."""
    release = threading.Event()

    def one(x):
        if x[0] == 1:
            release.wait(10)
        return np.asarray(x, dtype=float)

    w = make(40, threads=2, shared=True)
    _cheap_then(w, one, 40)
    assert w._claim() > 20
    done = []
    # worker 0's task finishes, worker 1's call hangs, workers 2..19 were claimed behind it
    w.send_many((i, Task(x=np.full(2, i), fn=one, slot=i, on_done=lambda t: done.append(t))) for i in range(20))
    wait_for(lambda: len(done) == 19, timeout=5)
    assert sorted(t.slot for t in done) == [0, *range(2, 20)] and all(t.ok for t in done)
    release.set()
    wait_for(lambda: len(done) == 20)
    assert done[-1].slot == 1 and done[-1].ok


def test_a_claimed_task_cancelled_before_its_call_is_dropped_and_its_worker_serves_on(make):
    release, started = threading.Event(), threading.Event()
    seen = []

    def one(x):
        seen.append(int(x[0]))
        if x[0] == 100:
            started.set()
            release.wait(10)
        return np.asarray(x, dtype=float)

    w = make(8, threads=1, shared=True, preempt=True)
    _cheap_then(w, one, 8)
    seen.clear()
    done = []
    tasks = [Task(x=np.full(2, 100 + i), fn=one, on_done=lambda t: done.append(t)) for i in range(4)]
    w.send_many(enumerate(tasks))
    started.wait(5)
    tasks[2].cancel()  # claimed behind the slow call (or, once it was given back, queued): never called
    release.set()
    wait_for(lambda: len(done) == 3)
    w.send(2, Task(x=np.full(2, 7.0), fn=one, on_done=lambda t: done.append(t)))
    wait_for(lambda: len(done) == 4)
    assert 102 not in seen and sorted(seen) == [7, 100, 101, 103] and w.dropped >= 1
    assert done[-1].worker == 2 and done[-1].ok


def test_a_shared_threads_lean_records_are_the_tasks_own_fields():
    """A shared pool's lean path (a per-input f, nothing injected) writes each record as a tuple of its own: it
    must read as `TaskRecord(record_fields(task))` would, field for field, for every task it ran."""
    from gencc.engine import make_pool
    from gencc.engine.task import as_record, record_fields

    def plus_one(x):  # a function of the test's own, one input at a time
        return np.asarray(x) + 1.0

    w = make_pool(4, ThreadBackend({"f": plus_one}), threads="shared", keep=100)
    try:
        done = []
        for i in range(40):
            w.send(i % 4, Task(x=np.full(3, float(i)), fn="f", on_done=done.append))
        wait_for(lambda: len(done) == 40)
        assert all(t.ok and np.array_equal(t.output, t.x + 1.0) for t in done)
        wait_for(lambda: len(w.executed) == 40)
        want = sorted(as_record(record_fields(t)) for t in done)
        assert sorted(w.executed) == want
    finally:
        w.close(timeout=2)
