"""The remote backend on the engine, against real HTTP servers on loopback (tests/engine/oip_replica.py) serving a
model defined here: a worker's queued tasks go to its replica as one request, and a replica that keeps failing
(or is lost) leaves the rotation until its ready route answers."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from gencc.engine import Task, make_pool
from gencc.engine.remote_backend import RemoteBackend

from .oip_replica import linear

X = np.random.default_rng(1).normal(size=(20, 4)).astype(np.float32)


def _run(backend: RemoteBackend, worker: int, x: np.ndarray) -> np.ndarray:
    return backend.run(worker, Task(worker, x), 0.0, 1.0, "", 0.0, threading.Event())


def _until(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_a_workers_queued_tasks_go_to_its_replica_as_one_batch(replicas) -> None:
    gate = threading.Event()

    def held(x):  # the first request waits until the test has queued more behind it
        gate.wait(10)
        y = linear(x)
        y[x[:, 0] > 50] = np.nan  # an input the model overflows on: its own row only is not finite
        return y

    (a,) = replicas(1, model=held, max_batch=3)
    pool = make_pool(1, RemoteBackend([a.url]), mark_dead=False)
    done: list[Task] = []
    finished = threading.Event()
    rows = [X[0], X[1], X[2], X[3], X[4] + np.float32(100.0), X[5]]

    def on_done(t: Task) -> None:
        done.append(t)
        if len(done) == len(rows):
            finished.set()

    try:
        tasks = [Task(x=r, fn="f", on_done=on_done) for r in rows]
        pool.send(0, tasks[0])
        assert _until(lambda: bool(a.batches))  # the first request is in the model
        pool.send_many((0, t) for t in tasks[1:])
        gate.set()
        assert finished.wait(10)
        assert a.batches == [1, 3, 2]  # the head alone, then the queue in requests of the replica's max batch
        for t, r in zip(tasks, rows, strict=True):
            if r[0] > 50:
                assert (t.ok, t.reason) == (False, "nan")
            else:
                assert t.ok
                np.testing.assert_array_equal(t.output, linear(r[None]).astype(np.float32)[0])
    finally:
        gate.set()
        pool.close()


def test_a_replica_failing_requests_in_a_row_leaves_the_rotation_until_its_ready_route_answers(replicas) -> None:
    a, b = replicas(2)
    backend = RemoteBackend([a.url, b.url], eject_after=3, probe_s=0.05)
    try:
        a.mode = "unready"  # 503 to inference and to its ready route
        for _ in range(3):
            with pytest.raises(Exception, match="answered 503"):
                _run(backend, 0, X[0])
        assert not backend.can_serve(0) and backend.can_serve(1)
        state = backend.replica_states()[0]
        assert (state["state"], state["ejections"]) == ("out", 1) and "3 failed requests in a row" in state["why"]
        posts = a.posts
        with pytest.raises(ConnectionError, match="out of rotation"):
            _run(backend, 0, X[0])
        time.sleep(0.3)  # probes meanwhile: its ready route still says 503
        assert a.posts == posts and not backend.can_serve(0)  # no request went to it
        np.testing.assert_array_equal(_run(backend, 1, X[1]), linear(X[1:2]).astype(np.float32)[0])
        a.mode = "500"  # ready again, failing still: the probe puts it back on trial, its next failure takes it out
        assert _until(lambda: backend.can_serve(0), 5.0)
        with pytest.raises(Exception, match="answered 500"):
            _run(backend, 0, X[0])
        assert backend.replica_states()[0]["ejections"] == 2
        a.mode = "ok"  # recovered: back, and its first answer ends the trial
        assert _until(lambda: backend.can_serve(0), 5.0)
        np.testing.assert_array_equal(_run(backend, 0, X[2]), linear(X[2:3]).astype(np.float32)[0])
        assert backend.replica_states()[0]["failures_in_a_row"] == 0
    finally:
        backend.close()


def test_a_lost_replica_stays_dead_on_the_engine_until_it_answers_ready(replicas) -> None:
    a, b = replicas(2)
    backend = RemoteBackend([a.url, b.url], probe_s=0.05)
    pool = make_pool(2, backend, restart_s=0.05)
    done: list[Task] = []
    lock = threading.Lock()

    def on_done(t: Task) -> None:
        with lock:
            done.append(t)

    try:
        a.mode = "unready"
        a.kill()  # its port refuses connections: the task is lost, the worker dead
        pool.send(0, Task(x=X[0], fn="f", on_done=on_done))
        assert _until(lambda: len(done) == 1)
        assert (done[0].ok, done[0].reason) == (False, "crash")
        time.sleep(0.4)  # many restart periods: the engine keeps it dead, its replica still out
        assert bool(pool.dead[0]) and np.isinf(pool.loads()[0]) and not backend.can_serve(0)
        assert pool.restarts[0] == 0
    finally:
        pool.close()
        backend.close()


def test_a_replica_that_recovers_gets_its_worker_back(replicas) -> None:
    (a,) = replicas(1)
    backend = RemoteBackend([a.url], eject_after=2, probe_s=0.05)
    pool = make_pool(1, backend, restart_s=0.05)
    done: list[Task] = []

    try:
        a.mode = "unready"
        for i in range(2):  # two failed requests: stragglers, and the replica leaves the rotation
            pool.send(0, Task(x=X[i], fn="f", on_done=done.append))
            assert _until(lambda n=i + 1: len(done) == n)
        assert [t.reason for t in done] == ["raise", "raise"] and not backend.can_serve(0)
        posts = a.posts
        pool.send(0, Task(x=X[2], fn="f", on_done=done.append))  # lost at once, with no request: the worker dies
        assert _until(lambda: len(done) == 3) and done[-1].reason == "crash" and a.posts == posts
        assert _until(lambda: bool(pool.dead[0]))
        a.mode = "ok"
        assert _until(lambda: not bool(pool.dead[0]))
        assert pool.restarts[0] == 1
        pool.send(0, Task(x=X[5], fn="f", on_done=done.append))
        assert _until(lambda: len(done) == 4) and done[-1].ok
        np.testing.assert_array_equal(done[-1].output, linear(X[5:6]).astype(np.float32)[0])
    finally:
        pool.close()
        backend.close()
