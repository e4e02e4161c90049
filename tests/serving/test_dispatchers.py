"""Serving policies in the simulator (virtual time, deterministic service): exactly-once answers, dropped
copies, degraded answers equal to the code's decode, coded hedges, retries after faults."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gencc
from gencc.engine import Task, VirtualWorkers
from gencc.faults import Faults, PersistentStragglers, ServiceTimes
from gencc.serving import (
    CodedDispatcher,
    HedgedDispatcher,
    ReplicatedDispatcher,
    Request,
    UncodedDispatcher,
    make_dispatcher,
    simulate_load,
    systematic_slots,
)

from .serving_helpers import lin


def env(W=12, service=0.01, slow=None, faults=None, fns=None):
    return VirtualWorkers(W, ServiceTimes(samples=[service]), slow, faults, fns)


def submit_at(e, disp, times, xs=None):
    reqs = []
    for i, t in enumerate(times):
        r = Request(i, None if xs is None else xs[i], float(t))
        reqs.append(r)
        e.call_later(t, lambda r=r: disp.submit(r))
    e.run(until=100)
    return reqs


def test_uncoded_takes_least_loaded_worker_and_answers_once():
    e = env(W=3)
    d = UncodedDispatcher(e)
    reqs = submit_at(e, d, [0, 0, 0, 0])  # three idle workers, then one queues behind a busy worker
    assert [r.status for r in reqs] == [200] * 4
    assert sorted(round(r.latency, 6) for r in reqs) == [0.01, 0.01, 0.01, 0.02]
    assert len({r.tasks[0].worker for r in reqs[:3]}) == 3 and d.pending == 0


def test_replication_cancels_the_queued_copy():
    e = env(W=2)
    d = ReplicatedDispatcher(e)
    # both workers busy with request 0's copies; request 1's two copies queue; then workers free at 0.01
    reqs = submit_at(e, d, [0, 0.001])
    assert [r.status for r in reqs] == [200, 200]
    assert len(e.executed) == 4 and e.dropped == 0  # copies already running cannot be dropped


def test_replication_drops_copy_queued_behind_a_slow_task():
    e = env(W=2)
    d = ReplicatedDispatcher(e)
    hold = Task(fn="f", on_done=lambda t: None)
    e.send(0, hold)
    e.send(0, Task(fn="f", on_done=lambda t: None))  # worker 0 has two tasks: 20 ms of work
    reqs = submit_at(e, d, [0])
    assert reqs[0].latency == pytest.approx(0.01)
    assert e.dropped == 1  # the copy queued on worker 0 never ran


def test_hedged_sends_second_copy_after_delay_only_when_late():
    e = env(W=2)
    d = HedgedDispatcher(e, initial_delay=0.005)
    reqs = submit_at(e, d, [0])
    assert len(reqs[0].tasks) == 2 and reqs[0].latency == pytest.approx(0.01)
    e = env(W=2)
    d = HedgedDispatcher(e, initial_delay=0.02)
    reqs = submit_at(e, d, [0])
    assert len(reqs[0].tasks) == 1


@pytest.mark.parametrize("code", [gencc.GCC(4, 6), gencc.BACC(4, 6, beta=gencc.GCC(4, 6).beta), gencc.ParM(4, 2)])
def test_systematic_slots_found(code):
    s = systematic_slots(code)
    assert s is not None and len(set(s)) == 4
    E = code.encoding_matrix
    for k, n in enumerate(s):
        assert np.allclose(E[n], np.eye(4)[k])
    assert systematic_slots(gencc.BACC(4, 6)) is None  # Chebyshev-2 workers miss every alpha


def test_coded_degraded_answer_equals_decode_and_direct_answers_are_exact():
    rng = np.random.default_rng(0)
    K, N = 4, 6
    code = gencc.GCC(K, N)
    X = rng.normal(size=(K, 3)).astype(np.float32)
    e = env(W=N, fns={"f": lin})
    # worker of the first request is slow: it straggles for 10x
    d = CodedDispatcher(e, code, max_wait=1.0)
    e.send(0, Task(fn="f", on_done=lambda t: None))
    e.send(0, Task(fn="f", on_done=lambda t: None))
    e.send(0, Task(fn="f", on_done=lambda t: None))
    d.least_loaded = lambda exclude=(): min(set(range(N)) - set(exclude))  # request 0 lands on worker 0
    reqs = submit_at(e, d, [0, 0, 0, 0], xs=X)
    assert all(r.status == 200 for r in reqs)
    late = [r for r in reqs if r.degraded]
    assert len(late) == 1 and late[0].tasks[0].worker == 0
    got = {t.slot: t.output for t in late[0].group.tasks if t.ok}
    got.update({r.slot: r.output for r in reqs if not r.degraded})
    R = late[0].decoded_from
    assert len(R) == N - 1 and set(R) <= set(got)
    k = systematic_slots(code).index(late[0].slot)  # its position (members are ordered when the group forms)
    expect = code.decode(np.stack([got[s] for s in R]), R)[k]
    assert np.allclose(late[0].output, expect)
    # for linear f the served pipeline must equal D_R E_R f(X), computed from the matrices alone
    Xp = np.empty_like(X)
    for r, x in zip(reqs, X, strict=True):
        Xp[systematic_slots(code).index(r.slot)] = x
    Y_R = code.encoding_matrix[R] @ lin(Xp)  # GCC's select decoder (N <= 1.5K) picks its D from the results
    ref = code.decoding_matrix(R, Y_R) @ Y_R
    assert np.allclose(late[0].output, ref[k], atol=1e-5)
    for r, x in zip(reqs, X, strict=True):
        if not r.degraded:
            assert np.allclose(r.output, lin(x[None])[0], atol=1e-6)
    assert e.dropped == 1  # the late member's own task, queued behind the two busy ones, was dropped


def test_parm_recovers_a_late_member_through_its_parity():
    K = 4
    code = gencc.ParM(K, 2)  # parity None: the parity workers run f, exact for linear f
    X = np.arange(12, dtype=np.float32).reshape(K, 3)
    e = env(W=6, fns={"f": lin})
    d = CodedDispatcher(e, code, max_wait=1.0)
    e.send(0, Task(fn="f", on_done=lambda t: None))
    d.least_loaded = lambda exclude=(): min(set(range(6)) - set(exclude))  # deterministic placement
    reqs = submit_at(e, d, [0, 0, 0, 0], xs=X)
    assert reqs[0].degraded and not any(r.degraded for r in reqs[1:])
    assert np.allclose(reqs[0].output, lin(X[:1])[0], atol=1e-5)


def test_partial_group_flushes_after_max_wait_and_pads():
    K, N = 4, 6
    e = env(W=N, fns={"f": lin})
    d = CodedDispatcher(e, gencc.GCC(K, N), max_wait=0.02)
    X = np.ones((2, 3), dtype=np.float32)
    reqs = submit_at(e, d, [0, 0.001], xs=X)
    assert all(r.status == 200 and not r.degraded for r in reqs)
    g = reqs[0].group
    assert g.formed and g.done and g.tasks == []  # everyone answered before the flush: no coded work sent


def test_coded_hedge_sends_coded_work_only_for_late_groups():
    K, N = 4, 6
    e = env(W=N)
    d = CodedDispatcher(e, gencc.GCC(K, N), mode="hedge", initial_delay=0.015, max_wait=1.0)
    reqs = submit_at(e, d, [0, 0, 0, 0])
    assert all(r.status == 200 for r in reqs) and reqs[0].group.tasks == []
    for spare in (0, 1):
        e = env(W=N)
        d = CodedDispatcher(e, gencc.GCC(K, N), mode="hedge", initial_delay=0.015, max_wait=1.0, spare=spare)
        for _ in range(3):
            e.send(0, Task(fn="f", on_done=lambda t: None))
        d.least_loaded = lambda exclude=(): min(set(range(6)) - set(exclude))
        reqs = submit_at(e, d, [0, 0, 0, 0])
        g = reqs[0].group
        assert reqs[0].degraded and len(g.tasks) == 1 + spare  # one coded task per late member, plus spares
        assert reqs[0].latency == pytest.approx(0.025)


@given(st.sampled_from(["uncoded", "replication", "hedged", "parm", "bacc", "gcc", "sgcc", "gcc-hedge", "sgcc-hedge",
                        "parm-hedge"]),
       st.floats(0.1, 1.2), st.integers(0, 5))
def test_every_request_answered_exactly_once_under_load_and_faults(scheme, load, seed):
    answers: dict[int, int] = {}
    W = 8
    e = VirtualWorkers(W, ServiceTimes(0.01), PersistentStragglers(W, 0.2, 10, 0.2, seed=seed),
               Faults(raise_p=0.05, nan_p=0.02, hang_p=0.02, crash_p=0.002, hang_s=0.3), seed=seed)

    def make(env):
        d = make_dispatcher(scheme, env, K=4, request_timeout=5.0, seed=seed)
        d.on_answer = lambda r: answers.__setitem__(r.id, answers.get(r.id, 0) + 1)
        return d

    reqs = simulate_load(make, e, load * W / 0.01 / 2.8, 2.0, seed=seed, drain=10)
    assert reqs and all(r.status in (200, 503, 504) for r in reqs)
    assert all(answers.get(r.id) == 1 for r in reqs) and len(answers) == len(reqs)
    assert sum(r.status == 200 for r in reqs) >= 0.5 * len(reqs)


def test_bad_configuration_is_rejected_with_a_reason():
    with pytest.raises(ValueError, match="slow fraction"):
        PersistentStragglers(3, 1.5)
    with pytest.raises(ValueError, match="distinct workers"):
        CodedDispatcher(env(W=4), gencc.GCC(4, 6))
    with pytest.raises(ValueError, match="unknown scheme"):
        make_dispatcher("nope", env())
    with pytest.raises(ValueError, match="sum to at most 1"):
        Faults(raise_p=0.7, nan_p=0.7)
