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
