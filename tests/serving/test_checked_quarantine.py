"""Quarantine at every W: a quarantined worker gets no task and none of its results is used, also at W = N
(its slot queues on a healthy worker), and `Service.health` counts it out."""

from __future__ import annotations

import numpy as np
import pytest

from gencc.engine import Task, ThreadBackend, VirtualWorkers, Workers
from gencc.faults import ServiceTimes, WrongResults
from gencc.serving import Request, Service, make_dispatcher

from .serving_helpers import lin

IN = (3, 4)
rng = np.random.default_rng(1)
X_TRAIN = rng.normal(size=(400, *IN)).astype(np.float32)
X = rng.normal(size=(64, *IN)).astype(np.float32)


def _tasks(reqs):
    """Every task sent for these requests (theirs and their groups'), read from the requests, not the pool."""
    groups = {id(r.group): r.group for r in reqs if r.group is not None}
    return [t for r in reqs for t in r.tasks] + [t for g in groups.values() for t in g.tasks]


def _no_wrong_answer_after_quarantine(reqs, d, F, worker):
    """Every answer to a request that arrived after `worker` was quarantined is f exactly, or decoded from
    results none of which came from `worker`; no task was sent to it after then, and a task it had queued
    before that ran after then had its result dropped."""
    tasks = _tasks(reqs)
    t_q = d.quarantined_at[worker]
    after = [r for r in reqs if r.t_arrival > t_q]
    assert len(after) >= 100
    assert [r.status for r in after] == [200] * len(after)
    for r in after:
        if r.degraded:
            assert all(d._worker(r.group, s) != worker for s in r.decoded_from)
        else:
            assert np.allclose(r.output, F[r.id], rtol=1e-3, atol=1e-3), r
    assert not [t for t in tasks if t.worker == worker and t.t_sent > t_q]  # it gets no task after then
    # what it had queued before may still run (real threads): every such result is dropped, never used
    late = [t for t in tasks if t.worker == worker and t.t_start > t_q]
    assert all(not t.ok and t.reason == "quarantined" for t in late), late


def test_quarantine_removes_a_worker_at_w_equal_n():
    W, K = 12, 8  # N = 12 = W: the old rule (exclude only when W > N) kept using the bad worker
    env = VirtualWorkers(W, ServiceTimes(samples=[0.01]), functions={"f": lin}, wrong=WrongResults(workers=[3],
                                                                                                    scale=5.0))
    d = make_dispatcher("gcc", env, K=K, max_wait=0.02, check="on", check_data=(lin, X_TRAIN))
    assert d.N == W
    xs = [X[i % len(X)] for i in range(800)]
    reqs = [Request(i, x, i * 0.004) for i, x in enumerate(xs)]  # 250 req/s, 4 s
    for r in reqs:
        env.call_later(r.t_arrival, lambda r=r: d.submit(r))
    env.run(until=100)
    assert d.quarantined == {3}
    _no_wrong_answer_after_quarantine(reqs, d, lin(np.stack(xs)), 3)
    assert d.errors == {}


def test_a_quarantined_workers_late_result_is_dropped_and_verification_runs_elsewhere():
    env = VirtualWorkers(12, ServiceTimes(samples=[0.01]), functions={"f": lin})
    d = make_dispatcher("gcc", env, K=8, max_wait=0.02, check="on", check_data=(lin, X_TRAIN))
    d.quarantined = {5}
    t = Task(x=X[0], fn="f", kind="copy", owner=Request(0, X[0], 0.0))
    t.ok, t.worker, t.output = True, 5, np.zeros(2)
    d._done(t)
    assert not t.ok and t.reason == "quarantined" and d.failures["quarantined"] == 1
    for _ in range(50):  # a verification never lands on a worker excluded from it, nor on a quarantined one
        w = d._pick(set(range(11)) - {5}, hard=True)
        assert w == 11
    assert d._pick(set(range(12)) - {5}, hard=True) == -1
    assert d._pick(set(range(12)) - {5}, hard=False) not in (5, -1)  # a group's slot queues on a healthy worker


@pytest.mark.slow
def test_service_at_w12_k8_with_check_on_answers_nothing_wrong_after_quarantine():
    svc = Service.build("digits-cnn", "gcc", workers=12, K=8, service_ms=3.0, max_wait_ms=10, check="on",
                        wrong=WrongResults(workers=[5], scale=5.0))
    Xt = svc.workload.X_test[:48]
    reqs: list = []
    try:
        for _ in range(20):  # until 5 rounds arrived after the quarantine (bounded: 960 requests)
            futs = [svc.submit(x) for x in Xt]
            reqs += [f.result(timeout=60) for f in futs]
            t_q = svc.dispatcher.quarantined_at.get(5)
            if t_q is not None and sum(r.t_arrival > t_q for r in reqs) >= 5 * len(Xt):
                break
        h = svc.health()
    finally:
        svc.close()
    for i, r in enumerate(reqs):
        r.id = i % len(Xt)  # the index of its input
    d = svc.dispatcher
    assert d.quarantined == {5} and h["quarantined"] == [5] and h["live"] == 11 and h["status"] == "degraded"
    _no_wrong_answer_after_quarantine(reqs, d, svc.workload.f(Xt), 5)


def test_health_counts_quarantined_workers_out():
    svc = Service(Workers(12, ThreadBackend({"f": lin})),
                  lambda env: make_dispatcher("gcc", env, K=8, check="on", check_data=(lin, X_TRAIN)))
    try:
        assert svc.health()["status"] == "ok"
        svc.dispatcher.quarantined_view = (4,)
        h = svc.health()
        assert (h["status"], h["live"], h["alive"], h["quarantined"]) == ("degraded", 11, 12, [4])
    finally:
        svc.close()
