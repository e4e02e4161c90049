"""gencc.engine.VirtualWorkers: the engine in virtual time (durations exact, no clock)."""

from __future__ import annotations

import numpy as np
import pytest

from gencc.engine import Task, VirtualWorkers
from gencc.faults import Faults, PersistentStragglers, ServiceTimes


def test_fifo_queues_in_virtual_time():
    e = VirtualWorkers(2, ServiceTimes(samples=[0.5]))
    ends = []
    for _ in range(3):
        e.send(0, Task(x=None, on_done=lambda t: ends.append((t.worker, e.now()))))
    e.send(1, Task(x=None, on_done=lambda t: ends.append((t.worker, e.now()))))
    e.run()
    assert ends == [(0, 0.5), (1, 0.5), (0, 1.0), (0, 1.5)]


def test_cancelled_queued_task_is_dropped_and_slow_workers_take_longer():
    e = VirtualWorkers(1, ServiceTimes(samples=[1.0]), PersistentStragglers(1, fraction=0.5, factor=4.0,
                                                                              mean_slow_s=1e9, seed=0))
    slow = e.stragglers.slow(0, 0.0)
    done = []
    e.send(0, Task(on_done=done.append))
    dropped = Task(on_done=done.append)
    e.send(0, dropped)
    dropped.cancel()
    e.run()
    assert done[0].t_end == pytest.approx(4.0 if slow else 1.0) and e.dropped == 1 and len(done) == 1


def test_functions_really_run_and_faults_fail_tasks():
    def f(X):
        return np.asarray(X, dtype=float) + 1

    e = VirtualWorkers(1, ServiceTimes(samples=[0.1]), functions={"f": f})
    out = []
    e.send(0, Task(x=np.zeros(2), fn="f", on_done=out.append))
    e.run()
    assert out[0].ok and out[0].output.tolist() == [1.0, 1.0]
    e = VirtualWorkers(1, ServiceTimes(samples=[0.1]), faults=Faults(raise_p=1.0))
    e.send(0, Task(on_done=out.append))
    e.run()
    assert not out[1].ok and out[1].reason == "raise"


def test_a_delay_holds_the_outcome_and_inf_never_delivers():
    e = VirtualWorkers(1, ServiceTimes(samples=[0.2]))
    got = []
    e.send(0, Task(delay=0.3, on_done=lambda t: got.append(e.now())))
    e.send(0, Task(delay=np.inf, on_done=lambda t: got.append(-1)))
    e.run()
    assert got == [pytest.approx(0.5)]


def test_tasks_running_at_once_share_one_batched_call():
    """Outputs as one call per task gives them; the tasks running when the first finishes share its call; a task
    of another function, or one started after, gets its own; a failing input fails its own task only."""
    calls = []

    def f(X):
        X = np.asarray(X, dtype=float)
        calls.append(len(X))
        if np.any(X < 0):
            raise ValueError("negative input")
        return X * 2 + 1

    def g(X):
        return -np.asarray(X, dtype=float)

    def go(batch):
        calls.clear()
        e = VirtualWorkers(4, ServiceTimes(samples=[0.1]), functions={"f": f, "g": g}, batch=batch)
        out = []
        for w, x in enumerate(([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])):
            e.send(w, Task(x=np.array(x), fn="f", on_done=out.append))
        e.send(3, Task(x=np.array([7.0, 8.0]), fn="g", on_done=out.append))
        e.send(0, Task(x=np.array([9.0, 10.0]), fn="f", on_done=out.append))  # starts after the first three
        e.run()
        return [(t.worker, t.t_end, t.output.tolist()) for t in out], list(calls)

    one, many = go(False), go(True)
    assert one[0] == many[0] and one[1] == [1] * 4 and many[1] == [3, 1]
    assert sorted(o for _, _, o in many[0]) == sorted([[3.0, 5.0], [7.0, 9.0], [11.0, 13.0], [-7.0, -8.0],
                                                       [19.0, 21.0]])
    for batch in (False, True):
        e = VirtualWorkers(2, ServiceTimes(samples=[0.1]), functions={"f": f}, batch=batch)
        out = []
        e.send(0, Task(x=np.array([1.0]), fn="f", on_done=out.append))
        e.send(1, Task(x=np.array([-1.0]), fn="f", on_done=out.append))
        with pytest.raises(ValueError, match="negative"):
            e.run()
        assert [t.output.tolist() for t in out] == [[3.0]]  # the good task's output came first, as alone
