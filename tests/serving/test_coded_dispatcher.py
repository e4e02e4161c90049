"""When a coded group decodes: from every result its coded tasks return (not the first K), with a deadline;
and the accuracy that buys on the digits CNN under persistent stragglers (simulator, real models)."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.engine import Task, VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import CodedDispatcher, Request, make_dispatcher, simulate_load

from .serving_helpers import lin


def late_group(busy_coded: int, **kw):
    """K = 4, N = 6 on 6 workers (10 ms tasks): request 0's worker is busy 30 ms, the worker of the second
    coded task `busy_coded` tasks; returns the requests and the worker of that coded task."""
    K, N = 4, 6
    e = VirtualWorkers(N, ServiceTimes(samples=[0.01]), functions={"f": lin})
    d = CodedDispatcher(e, gencc.GCC(K, N), max_wait=1.0, **kw)
    for _ in range(3):
        e.send(0, Task(fn="f", on_done=lambda t: None))
    for _ in range(busy_coded):
        e.send(5, Task(fn="f", on_done=lambda t: None))
    d.least_loaded = lambda exclude=(): min(set(range(N)) - set(exclude))  # request k on worker k, coded on 4, 5
    X = np.random.default_rng(0).normal(size=(K, 3)).astype(np.float32)
    reqs = []
    for i in range(K):
        r = Request(i, X[i], 0.0)
        reqs.append(r)
        e.call_later(0.0, lambda r=r: d.submit(r))
    e.run(until=10)
    return reqs, d


def test_decode_waits_for_every_coded_result_due():
    # the second coded task is 10 ms behind the first: the decode waits for it (before: decoded at K results)
    reqs, d = late_group(busy_coded=1)
    late = [r for r in reqs if r.degraded]
    assert len(late) == 1 and late[0] is reqs[0]
    assert len(late[0].decoded_from) == 5 and late[0].latency == pytest.approx(0.02)
    # the decode of those 5 results, recomputed from the group's inputs (f linear: exact up to rounding)
    g, R = late[0].group, late[0].decoded_from
    Xg = np.stack([g.members[i].x for i in g.source])
    expect = d.code.decode(lin(d.code.encode(Xg))[R], R)[g.pos[0]]
    assert np.allclose(late[0].output, expect, atol=1e-4)


def test_decode_deadline_caps_the_wait():
    # a coded task stuck 100 ms behind others: decode at the deadline with what has returned (K results)
    reqs, _ = late_group(busy_coded=10, decode_wait=0.015)
    assert reqs[0].degraded and len(reqs[0].decoded_from) == 4
    assert reqs[0].latency == pytest.approx(0.015)
    reqs, _ = late_group(busy_coded=10, decode_wait=0.0)  # no wait: the first K results decode (the old rule)
    assert reqs[0].degraded and reqs[0].latency == pytest.approx(0.01)
    with pytest.raises(ValueError, match="decode_wait"):
        late_group(busy_coded=0, decode_wait=-1.0)


def test_lone_member_with_a_slow_worker_is_decoded():
    # a group flushed with one member gets GCC's minimum of 2 coded results (one alone cannot be decoded: the
    # member then waited for its slow worker)
    K, N = 4, 6
    e = VirtualWorkers(N, ServiceTimes(samples=[0.01]), functions={"f": lin})
    d = CodedDispatcher(e, gencc.GCC(K, N), max_wait=0.005)
    for _ in range(3):
        e.send(0, Task(fn="f", on_done=lambda t: None))
    d.least_loaded = lambda exclude=(): min(set(range(N)) - set(exclude))
    r = Request(0, np.ones(3, dtype=np.float32), 0.0)
    e.call_later(0.0, lambda: d.submit(r))
    e.run(until=10)
    assert r.degraded and len(r.group.tasks) == 2 and r.latency == pytest.approx(0.015)
    assert np.allclose(r.output, lin(np.ones((1, 3)))[0], atol=1e-4)  # pads repeat it: the curve is constant


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("torch")
    from gencc.workloads import load

    return load("digits-cnn", progress=False)


@pytest.mark.parametrize(("scheme", "floor"), [("gcc", 0.55), ("sgcc", 0.75)])
def test_degraded_answers_agree_with_f_under_persistent_stragglers(digits, scheme, floor):
    """W = 12, K = 8, 10% of workers slow x10, 30% load, real CNN in the simulator: decoded answers' top-1
    agreement with f (this seeded run: 0.58 GCC, 0.50 when decoding at the first K results)."""
    W, s = 12, 0.042
    X = digits.X_test[np.random.default_rng(8).integers(len(digits.X_test), size=4000)]
    e = VirtualWorkers(W, ServiceTimes(s), PersistentStragglers(W, 0.1, 10.0, 1.0, seed=0), functions={"f": digits.f})
    reqs = simulate_load(lambda env: make_dispatcher(scheme, env, K=8, max_wait=0.05, request_timeout=120.0), e,
                         0.3 * W / (s * 1.9), 15.0, inputs=X, drain=60)
    dk = [r for r in reqs if r.status == 200 and r.degraded]
    assert all(r.status == 200 for r in reqs) and len(dk) >= 30
    truth = np.argmax(digits.f(np.stack([r.x for r in dk])), axis=1)
    agreement = np.mean(truth == np.argmax(np.stack([r.output for r in dk]), axis=1))
    assert agreement >= floor


def test_cover_copy_at_the_deadline_is_the_gates_copies_on_fast_idle_workers():
    """sgcc-parity's cover rule: member 0's own worker and both coded tasks are stuck behind other work, so at
    the decode deadline it cannot be recovered; with a gate it is held and gets the gate's two copies, on idle
    workers (not 1-3, which have queued work) other than the one the gate saw slow (6), answered exactly by the
    first (before: one copy, on the first worker outside the group, 1)."""
    from gencc.serving import Gate

    K, N, W = 4, 6, 9
    e = VirtualWorkers(W, ServiceTimes(samples=[0.01]), functions={"f": lin})
    gate = Gate(0.0)
    for w in (2, 3, 7, 8) * 6:  # the gate's view of worker speed: 10 ms tasks, worker 6's last one 100 ms
        gate.observe(Task(worker=w, ok=True, t_start=0.0, t_end=0.01))
    gate.observe(Task(worker=6, ok=True, t_start=0.0, t_end=0.1))
    d = CodedDispatcher(e, gencc.SystematicGCC(K, N, parity=lin), max_wait=1.0, decode_wait=0.015, cover=True,
                        order=False, gate=gate)
    for w in (0, 4, 5):
        for _ in range(3):
            e.send(w, Task(fn="f", on_done=lambda t: None))
    d.least_loaded = lambda exclude=(): min(set(range(W)) - set(exclude), default=-1)
    X = np.random.default_rng(1).normal(size=(K, 3)).astype(np.float32)
    reqs = [Request(i, X[i], 0.0) for i in range(K)]
    for r in reqs:
        e.call_later(0.0, lambda r=r: d.submit(r))
    for w in (1, 2, 3):  # queued behind members 1-3: busy at the deadline
        e.call_later(0.001, lambda w=w: e.send(w, Task(fn="f", on_done=lambda t: None)))
    e.run(until=10)
    r = reqs[0]
    copies = [t for t in r.tasks if t.kind == "copy"]
    assert r.gate == "held" and not r.degraded and r.status == 200
    assert sorted(t.worker for t in copies) == [7, 8] and d.copies == 2
    assert r.latency == pytest.approx(0.025) and np.allclose(r.output, lin(X[:1])[0])
    assert all(not q.degraded and q.latency == pytest.approx(0.01) for q in reqs[1:])
