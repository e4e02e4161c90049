"""Latency targets in virtual time: every request is answered by its deadline (exactly, decoded from what has
arrived, or 504 at it), earliest deadline first where requests wait, and no redundancy spent on a lost target.
References: hand-computed schedules on one worker, the model's own outputs, and counts of the tasks run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import Gate
from gencc.serving._policy.sim import simulate_load
from gencc.serving.dispatch import DEADLINE_MARGIN, Request
from gencc.serving.service import make_dispatcher

from .serving_helpers import lin


def fixed(seconds: float) -> ServiceTimes:
    """Every task takes exactly `seconds`."""
    return ServiceTimes(samples=[seconds])


class SlowWorkers:
    """Workers in `slow` run `factor` times slower, always (a deterministic straggler)."""

    def __init__(self, slow: tuple[int, ...], factor: float = 100.0):
        self.slow, self.factor = slow, factor

    def multiplier(self, w: int, t: float) -> float:
        return self.factor if w in self.slow else 1.0


def run_requests(disp, env, arrivals: list[tuple[float, float]], x=None) -> list[Request]:
    """Submit requests at the given (arrival, target after arrival) times; run until all are answered."""
    reqs = []
    for i, (t, target) in enumerate(arrivals):
        r = Request(i, None if x is None else x[i], t, deadline=t + target)
        reqs.append(r)
        env.deliver(t - env.t, lambda r=r: disp.submit(r))
    env.run(until=1e3)
    assert all(r.status for r in reqs)
    return reqs


@pytest.mark.parametrize("schedule", ["edf", "fifo"])
def test_one_worker_serves_earliest_deadline_first_and_504s_exactly_at_the_deadline(schedule):
    """One worker, 1 s per task. r0 (target 10 s) starts at 0; r1 arrives at 0.1 with 4.9 s left, r2 at 0.2
    with 2.3 s left. EDF runs r2 on [1, 2] and r1 on [2, 3]: all inside. FIFO runs r1 on [1, 2], so r2 could
    only finish at 3 > 2.5: a 504 at exactly 2.5, its running task abandoned (its result is not awaited)."""
    env = VirtualWorkers(1, fixed(1.0), seed=0)
    disp = make_dispatcher("uncoded", env, schedule=schedule, queue_depth=1)
    r0, r1, r2 = run_requests(disp, env, [(0.0, 10.0), (0.1, 4.9), (0.2, 2.3)])
    assert (r0.status, r0.t_done) == (200, 1.0)
    if schedule == "edf":
        assert [(r.status, r.t_done) for r in (r2, r1)] == [(200, 2.0), (200, 3.0)]
        assert [t.owner.id for t in env.executed] == [0, 2, 1]
    else:
        assert (r1.status, r1.t_done) == (200, 2.0)
        assert r2.status == 504 and r2.t_done == pytest.approx(2.5, abs=1e-9) and "deadline" in r2.error
        assert [t.owner.id for t in env.executed] == [0, 1, 2] and r2.tasks[0].cancelled


def test_edf_answers_a_request_it_can_no_longer_serve_at_once_without_running_it():
    """One worker busy until 1 s; r1 waits with a 1.5 s target but a task takes 1 s: when the worker frees at 1.0
    only 0.5 s is left, so r1 gets its 504 then (before its deadline) and nothing runs for it."""
    env = VirtualWorkers(1, fixed(1.0), seed=0)
    disp = make_dispatcher("uncoded", env, schedule="edf", queue_depth=1)
    r0, r1 = run_requests(disp, env, [(0.0, 5.0), (0.0, 1.5)])
    assert r0.status == 200
    assert r1.status == 504 and r1.t_done == pytest.approx(1.0) and "cannot be met" in r1.error
    assert disp.expired == 1 and [t.owner.id for t in env.executed] == [0] and not r1.tasks


def test_a_later_arrival_with_an_earlier_deadline_is_answered_at_its_own_deadline():
    """Deadlines are not in arrival order: the sweep follows the earliest one, not the first to arrive."""
    env = VirtualWorkers(1, fixed(10.0), seed=0)
    disp = make_dispatcher("uncoded", env)
    reqs = run_requests(disp, env, [(0.0, 8.0), (0.5, 3.0), (1.0, 0.25)])
    assert [(r.status, round(r.t_done, 9)) for r in reqs] == [(504, 8.0), (504, 3.5), (504, 1.25)]


@pytest.mark.parametrize("scheme", ["uncoded", "hedged", "replication", "sgcc"])
@pytest.mark.parametrize("load", [0.7, 1.2])
def test_no_answer_after_its_deadline_at_any_load(scheme, load):
    """Poisson load up to 1.2x uncoded's capacity with persistent stragglers (10% of the time x10), target 2x
    the service time: every request is answered by its deadline, 200 or 504; the 504s of requests that waited
    in vain come at the deadline, none after."""
    W, s = 12, 0.05
    env = VirtualWorkers(W, ServiceTimes(s), PersistentStragglers(W, 0.1, 10.0, 1.0, seed=3), seed=3)
    target = 2 * s

    def make(e):
        return make_dispatcher(scheme, e, schedule="edf")

    reqs = simulate_load(make, env, rate=load * W / (s * 1.9), duration=20.0, seed=3, deadline_ms=target * 1000)
    late = [r.t_done - r.deadline for r in reqs]
    assert len(reqs) > 1000 and all(r.status in (200, 504) for r in reqs)
    assert max(late) <= 1e-6
    inside = np.mean([r.in_target for r in reqs])
    assert inside > (0.25 if scheme == "replication" and load > 1 else 0.9)  # replication: twice the work
    if scheme == "sgcc":  # late members are decoded by their deadline (timing only: no values)
        assert any(r.degraded for r in reqs)


def coded_group(scheme: str, gate: Gate | None = None, exact_only: bool = False, target: float = 0.2):
    """8 requests of a linear model on W = N = 12 workers, workers 0 and 1 always 100x slow (5 s a task):
    members on them would wait 5 s for their own result. Every coded task leaves with the group and nothing
    more (no late copies), so only a decode can answer them in time."""
    env = VirtualWorkers(12, fixed(0.05), SlowWorkers((0, 1)), functions={"f": lin}, seed=0)
    disp = make_dispatcher(scheme, env, K=8, decode_wait=10.0, max_wait=0.01, gate=gate, redundancy=None)
    X = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    reqs = []
    for i in range(8):
        r = Request(i, X[i], 0.0, deadline=target, exact_only=exact_only)
        reqs.append(r)
        env.deliver(0.0, lambda r=r: disp.submit(r))
    env.run(until=30.0)
    slow = [r for r in reqs if any(t.worker in (0, 1) and t.kind == "systematic" for t in r.tasks)]
    assert slow, "no member landed on a slow worker"
    return reqs, slow, disp


def test_a_straggling_member_is_decoded_at_its_deadline_with_its_uncertainty():
    """SGCC, no gate: the member whose own worker is slow is answered at its 0.2 s target from the results that
    arrived, `degraded`, within 4 estimated sd of the model's own output; the others exactly, before it."""
    reqs, slow, disp = coded_group("sgcc")
    for r in reqs:
        assert r.status == 200 and r.t_done <= r.deadline + 1e-9
        want = lin(r.x[None])[0]
        if r in slow:
            assert r.degraded and r.t_done == pytest.approx(0.2) and math.isfinite(r.uncertainty)
            assert np.abs(np.asarray(r.output) - want).max() <= 4 * r.uncertainty
        elif not r.degraded:
            np.testing.assert_allclose(r.output, want, rtol=1e-6, atol=1e-6)
    assert disp.rescued >= len(slow)


def test_exact_only_and_an_untrusting_gate_give_504_at_the_deadline():
    """The same straggler: exact_only refuses the decode, and a gate that trusts no decode (threshold inf) holds
    it; either way a 504 at exactly 0.2 s (and a gate at 0 sends it)."""
    for kw in ({"exact_only": True}, {"gate": Gate(math.inf)}):
        reqs, slow, _ = coded_group("sgcc", **kw)
        for r in slow:
            assert r.status == 504 and r.t_done == pytest.approx(0.2) and not r.degraded
        assert all(r.status == 200 and not r.degraded for r in reqs if r not in slow)
        if "gate" in kw:
            assert all(r.gate == "held" for r in slow)
    reqs, slow, _ = coded_group("sgcc", gate=Gate(0.0))
    assert all(r.status == 200 and r.degraded and r.gate == "passed" for r in slow)


@pytest.mark.parametrize("target, hedges", [(0.04, False), (0.08, True), (0.5, True)])
def test_no_hedge_for_a_request_whose_target_is_lost(target, hedges):
    """Hedged requests, 50 ms tasks, the hedge after 50 ms: with a 40 ms target no hedge could return in time,
    so none is sent (the request gets its 504); with 80 ms the hedge leaves early, 1.25 task times before the
    deadline (a worker is idle; after 50 ms it would be too late), and answers; with 500 ms it is sent after
    50 ms and answers."""
    env = VirtualWorkers(2, fixed(0.05), SlowWorkers((0,), factor=100.0), seed=0)
    disp = make_dispatcher("hedged", env, initial_delay=0.05)
    warm = run_requests(disp, env, [(0.0, 100.0), (0.0, 100.0)])  # task times known
    assert all(r.status == 200 for r in warm)
    t0 = env.t + 10.0  # worker 0 is idle again; each request lands on one of the two, alone
    reqs = run_requests(disp, env, [(t0 + 10.0 * i, target) for i in range(8)])
    on_slow = [r for r in reqs if r.tasks[0].worker == 0]
    assert on_slow
    sent = [t for r in on_slow for t in r.tasks if t.kind == "hedge"]
    assert bool(sent) == hedges
    if hedges:
        at = target - DEADLINE_MARGIN * 0.05 if target < 0.1 else 0.05  # the latest useful moment, or 50 ms
        assert all(t.t_sent - t.owner.t_arrival == pytest.approx(at) for t in sent)
    assert all((r.status == 200) == hedges and r.t_done <= r.deadline + 1e-9 for r in on_slow)


def test_overload_edf_carries_more_inside_the_target_than_fifo_and_wastes_less():
    """1.5x uncoded's capacity, target 4x the service time: FIFO queues grow and every worker runs requests
    already too late; EDF answers the hopeless ones 504 unrun, so more requests make their target and it
    runs far fewer tasks for requests that miss (those it starts in time but that run long)."""
    W, s = 8, 0.05

    def run(schedule):
        env = VirtualWorkers(W, ServiceTimes(s), seed=5)

        def make(e):
            return make_dispatcher("uncoded", e, schedule=schedule, queue_depth=1)

        reqs = simulate_load(make, env, rate=1.5 * W / s, duration=10.0, seed=5, deadline_ms=4 * s * 1000)
        wasted = sum(1 for t in env.executed if t.owner.status != 200 or not t.owner.in_target)
        return np.mean([r.in_target for r in reqs]), wasted / len(env.executed)

    (edf_in, edf_waste), (fifo_in, fifo_waste) = run("edf"), run("fifo")
    assert edf_in > fifo_in + 0.2
    assert edf_waste < 0.5 * fifo_waste


def test_the_configuration_checks_the_target_and_the_schedule():
    from gencc.errors import ConfigError
    from gencc.serving import ServiceConfig

    assert ServiceConfig().queueing == "fifo" and ServiceConfig(deadline_ms=100).queueing == "edf"
    assert ServiceConfig(deadline_ms=100, schedule="fifo").queueing == "fifo"
    for bad, field in (({"deadline_ms": 0}, "deadline_ms"), ({"deadline_ms": float("inf")}, "deadline_ms"),
                       ({"schedule": "lifo"}, "schedule")):
        with pytest.raises(ConfigError) as e:
            ServiceConfig(**bad)
        assert e.value.field == field
    env = VirtualWorkers(2, fixed(1.0), seed=0)
    with pytest.raises(ValueError, match="schedule"):
        make_dispatcher("uncoded", env, schedule="lifo")
    with pytest.raises(ValueError, match="queue_depth"):
        make_dispatcher("uncoded", env, queue_depth=0)
