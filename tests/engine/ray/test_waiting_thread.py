"""RayWorkers' waiting thread outlives any exception: every call out then fails as lost (a straggler for its
task, never a hang) and the thread goes on serving the next calls. Here on a backend of the test's own that
answers like Ray's (refs that become ready), so no Ray starts; tests/runtime/test_ray.py does the same on Ray."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np

from gencc.engine import Task
from gencc.engine.ray.workers import RayWorkers


class Ref:
    """A call's answer, ready after `delay` seconds."""

    def __init__(self, value: np.ndarray, delay: float):
        self.value, self.ready_at = value, time.monotonic() + delay


class FakeBackend:
    """What RayWorkers asks of a RayBackend, without Ray: each call answers 2 x its input after 0.2 s."""

    def __init__(self, n: int):
        self.restarts, self.states = [0] * n, ["alive"] * n
        self.fail_waits = 0  # the next `wait` calls that raise
        self.stray = 0  # the next `wait` calls that return a ref nobody sent (a bug past Ray's own wait)

    def submit(self, worker, task, *injected):
        ref = Ref(2 * np.asarray(task.x), 0.2)
        task.key = SimpleNamespace(ref=ref, slot=worker)
        return task.key

    def wait(self, refs, timeout):
        if self.fail_waits:
            self.fail_waits -= 1
            raise RuntimeError("injected: the wait failed")
        if self.stray:
            self.stray -= 1
            return [Ref(np.zeros(1), 0.0)]
        time.sleep(min(timeout, 0.001))
        return [r for r in refs if r.ready_at <= time.monotonic()]

    def result(self, call):
        return call.ref.value

    def check_actors(self):
        return 0

    def drop(self, call):
        pass

    def cancel(self, task):
        pass

    def close(self):
        pass


def run_one(pool: RayWorkers, worker: int, x: float) -> Task:
    done = threading.Event()
    task = Task(worker, np.array([x]), on_done=lambda t: done.set())
    pool.post(lambda: pool.send(worker, task))
    assert done.wait(10)
    return task


def test_an_exception_in_the_waiting_thread_loses_the_calls_out_and_the_thread_goes_on() -> None:
    backend = FakeBackend(2)
    pool = RayWorkers(2, backend, mark_dead=False)
    try:
        assert run_one(pool, 0, 1.0).output.tolist() == [2.0]
        backend.fail_waits = 1  # Ray's wait raises, with a call out
        t = run_one(pool, 1, 3.0)
        assert (t.ok, t.reason) == (False, "crash") and "ray.wait failed" in t.error, t.error
        backend.stray = 1  # past Ray's wait: an error nobody foresaw (a KeyError)
        t = run_one(pool, 1, 3.0)
        assert (t.ok, t.reason) == (False, "crash") and "the waiting thread failed" in t.error, t.error
        assert pool.wait_failures == 2 and pool._waiter.is_alive()
        lose_all = pool._lose_all

        def broken(why: str) -> None:  # failing the calls fails too: the thread goes on, the call is waited on
            pool._lose_all = lose_all
            raise RuntimeError("injected: failing the calls failed")

        pool._lose_all = broken
        backend.stray = 1
        done = threading.Event()
        lost = Task(0, np.array([5.0]), on_done=lambda t: done.set())
        pool.post(lambda: pool.send(0, lost))
        deadline = time.monotonic() + 10
        while pool.wait_failures < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert done.wait(10) and lost.output.tolist() == [10.0] and pool._waiter.is_alive()
        assert [run_one(pool, w, 4.0).output.tolist() for w in (0, 1)] == [[8.0], [8.0]]
    finally:
        pool.close()
