"""Load-adaptive redundancy (gencc.serving.Redundancy) in virtual time: full coding at low load, plain dispatch
near saturation, full coding again once the queues drain; every request answered once, with f's exact output
(a model gencc does not ship: a small numpy net defined here)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import (
    DEFAULT_REDUNDANCY,
    Gate,
    Redundancy,
    Service,
    ServiceConfig,
    make_dispatcher,
    simulate_load,
)

W, K, S, F, X = 12, 8, 0.05, 0.1, 10.0
CAPACITY = W / (S * (1 - F + F * X))  # uncoded's, W / E[task time]: about 126 requests per second


class TinyNet:
    """8 inputs -> 10 logits through one tanh layer, batched numpy."""

    batched = True

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.A, self.B = rng.normal(size=(8, 16)), rng.normal(size=(16, 10))

    def __call__(self, Z):
        return np.tanh(np.asarray(Z, dtype=float).reshape(len(Z), -1) @ self.A) @ self.B


class Recording(VirtualWorkers):
    """VirtualWorkers that record (time, kind) of every task sent."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.sent: list[tuple[float, str]] = []

    def send(self, worker, task):
        self.sent.append((self.t, task.kind))
        super().send(worker, task)


def run(arrivals: np.ndarray, redundancy: Redundancy | None, scheme: str = "gcc", f=None, gate=None, seed: int = 0):
    env = Recording(W, ServiceTimes(S), PersistentStragglers(W, F, X, 1.0, seed=seed), seed=seed,
                    functions=None if f is None else {"f": f})
    answers: list[int] = []
    inputs = None if f is None else np.random.default_rng(3).normal(size=(len(arrivals), 8)).astype(np.float32)
    reqs = simulate_load(lambda e: make_dispatcher(scheme, e, K=K, seed=seed, gate=gate, redundancy=redundancy,
                                                   on_answer=lambda r: answers.append(r.id)),
                         env, 1.0, 1.0, inputs=inputs, arrivals=arrivals)
    return reqs, env, answers, inputs


def poisson(rate: float, t0: float, t1: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = t0 + np.cumsum(rng.exponential(1 / rate, size=int(rate * (t1 - t0) * 1.5) + 10))
    return t[t < t1]


def coded(env: Recording, t0: float = 0.0, t1: float = math.inf) -> int:
    return sum(1 for t, kind in env.sent if kind == "coded" and t0 <= t < t1)


def test_low_load_codes_every_group_in_full():
    arr = poisson(0.2 * CAPACITY, 0.0, 30.0, seed=1)
    _, full, _, _ = run(arr, None)
    _, adaptive, _, _ = run(arr, Redundancy(late="off"))
    assert coded(full) > 0.5 * len(arr)  # partial groups send at least two coded tasks: more than (N - K) / K
    assert coded(adaptive) >= 0.97 * coded(full)


def test_near_saturation_sends_plain_tasks_and_codes_again_when_load_drops():
    """Two seconds at 1.5x uncoded's capacity (the queues grow), then 20 s at 0.2: while the queues are long
    almost no coded task leaves; once they drained, groups are coded as fully as without the policy."""
    arr = np.concatenate([poisson(1.5 * CAPACITY, 0.0, 2.0, seed=2), poisson(0.2 * CAPACITY, 2.0, 22.0, seed=3)])
    _, full, _, _ = run(arr, None)
    _, adaptive, _, _ = run(arr, Redundancy(late="off"))
    burst_full, burst = coded(full, 0.5, 2.0), coded(adaptive, 0.5, 2.0)
    assert burst_full > 0.4 * np.sum((arr >= 0.5) & (arr < 2.0))  # without the policy: every group coded
    assert burst <= 0.2 * burst_full
    assert coded(adaptive, 10.0) >= 0.97 * coded(full, 10.0) > 0


def test_late_members_still_get_coded_tasks_near_saturation():
    """Without a gate the default `late` gives a member unanswered after the observed p90 a coded task even when
    the queues left no room at formation: fewer coded tasks than full coding, more than none."""
    arr = poisson(1.2 * CAPACITY, 0.0, 10.0, seed=4)
    _, full, _, _ = run(arr, None)
    _, eager_only, _, _ = run(arr, Redundancy(late="off"))
    _, adaptive, _, _ = run(arr, DEFAULT_REDUNDANCY)
    assert coded(eager_only) < coded(adaptive) < coded(full)


def copies(env: Recording) -> int:
    return sum(1 for _, kind in env.sent if kind == "copy")


def test_behind_a_gate_late_members_get_plain_copies_not_coded_tasks():
    """The default `late` ("auto") behind a gate: a late member gets plain copies at the p90 timer, no late coded
    task (the gate would hold its decode), and behind a gate that holds every decode no eager coded task either
    (its decodes would all be held); "coded" keeps the late coded tasks; every answer is f's own."""
    f = TinyNet()
    arr = poisson(1.0 * CAPACITY, 0.0, 10.0, seed=4)
    _, eager_only, _, _ = run(arr, Redundancy(late="off"), scheme="sgcc", f=f, gate=Gate(math.inf))
    reqs, auto, _, inputs = run(arr, DEFAULT_REDUNDANCY, scheme="sgcc", f=f, gate=Gate(math.inf))
    _, late_coded, _, _ = run(arr, Redundancy(late="coded"), scheme="sgcc", f=f, gate=Gate(math.inf))
    _, auto_passing, _, _ = run(arr, DEFAULT_REDUNDANCY, scheme="sgcc", f=f, gate=Gate(2.0))
    assert coded(auto) == 0 < coded(eager_only) < coded(late_coded)
    assert 0 < coded(auto_passing) <= coded(eager_only)  # a gate that may send decodes: eager coded tasks again
    assert copies(auto) > 0
    F = f(inputs)
    assert all(r.status == 200 and not r.degraded and np.allclose(r.output, F[r.id], rtol=1e-5, atol=1e-6)
               for r in reqs)


def test_a_gate_holding_every_decode_spends_no_coded_task_until_its_threshold_is_set():
    """A gate at threshold inf (no training inputs, or a calibration still running) holds every decode: groups
    form without coded tasks (fewer tasks per request, answers from the members' own workers and their late
    copies); once its threshold is set, groups code again."""
    f = TinyNet()
    arr = poisson(0.6 * CAPACITY, 0.0, 12.0, seed=11)
    gate = Gate(math.inf)
    env = Recording(W, ServiceTimes(S), PersistentStragglers(W, F, X, 1.0, seed=2), seed=2, functions={"f": f})
    env.deliver(6.0, lambda: setattr(gate, "threshold", 3.0))  # as a calibration ending at 6 s sets it
    inputs = np.random.default_rng(3).normal(size=(len(arr), 8)).astype(np.float32)
    reqs = simulate_load(lambda e: make_dispatcher("sgcc", e, K=K, seed=2, gate=gate), env, 1.0, 1.0,
                         inputs=inputs, arrivals=arr)
    assert coded(env, 0.0, 6.0) == 0 and coded(env, 6.1) > 0.1 * sum(arr >= 6.1)
    assert copies(env) > 0
    want = f(inputs)
    held = [r for r in reqs if r.t_arrival < 5.9]
    assert all(r.status == 200 and not r.degraded and np.allclose(r.output, want[r.id], rtol=1e-5, atol=1e-6)
               for r in held)
    assert all(r.status == 200 for r in reqs)


def test_late_copies_cut_the_tail_behind_a_gate():
    """Near uncoded's capacity with every decode held, late copies answer the late members sooner than late coded
    tasks whose decodes the gate holds: a lower p99."""
    f = TinyNet()
    arr = poisson(0.8 * CAPACITY, 0.0, 20.0, seed=8)
    p99 = {}
    for late in ("copy", "coded"):
        reqs, _, _, _ = run(arr, Redundancy(late=late), scheme="sgcc", f=f, gate=Gate(math.inf))
        p99[late] = np.percentile([r.latency for r in reqs], 99)
    assert p99["copy"] < p99["coded"]


@pytest.mark.parametrize("scheme", ["gcc", "sgcc"])
def test_every_request_answered_once_with_fs_output(scheme):
    """Low load, a saturating burst and low load again: each request answered exactly once, 200, and (the gate
    holding every decode) with f's own output."""
    f = TinyNet()
    arr = np.concatenate([poisson(0.3 * CAPACITY, 0.0, 3.0, seed=5), poisson(1.4 * CAPACITY, 3.0, 5.0, seed=6),
                          poisson(0.3 * CAPACITY, 5.0, 10.0, seed=7)])
    reqs, _, answers, inputs = run(arr, DEFAULT_REDUNDANCY, scheme=scheme, f=f, gate=Gate(math.inf))
    assert sorted(answers) == list(range(len(arr)))
    assert all(r.status == 200 and not r.degraded for r in reqs)
    F = f(inputs)
    for r in reqs:
        assert np.allclose(r.output, F[r.id], rtol=1e-5, atol=1e-6)


def test_redundancy_checks_its_knob():
    assert Redundancy().admit(0) and not Redundancy().admit(1) and Redundancy(2).admit(2)
    with pytest.raises(ValueError, match="max_queue"):
        Redundancy(-1)
    with pytest.raises(ValueError, match="late task 'yes'; choose one of auto, copy, coded, off"):
        Redundancy(late="yes")
    assert Redundancy().late_task(gated=True) == "copy" and Redundancy().late_task(gated=False) == "coded"
    assert Redundancy(late="coded").late_task(True) == "coded" and Redundancy(late="off").late_task(True) is None


@pytest.mark.parametrize("redundancy, want", [("adaptive", DEFAULT_REDUNDANCY), ("full", None)])
def test_a_service_chooses_adaptive_or_full_redundancy_by_name(redundancy, want):
    """`Service.build(..., redundancy=...)` (`gencc serve --redundancy`): adaptive is the default policy, full sends
    every coded task; an unknown name is refused before any worker starts."""
    net = TinyNet()
    X = np.random.default_rng(1).normal(size=(64, 8)).astype(np.float32)
    svc = Service.build(net, "gcc", workers=12, K=8, data=X, gate="off", redundancy=redundancy)
    try:
        assert svc.config.redundancy == redundancy and svc.dispatcher.redundancy is want
        r = svc.submit(X[0]).result(timeout=30)
        assert r.status == 200 and np.allclose(r.output, net(X[:1])[0], atol=1e-4)
    finally:
        svc.close()
    with pytest.raises(ValueError, match="unknown redundancy 'sometimes'; choose one of adaptive, full"):
        ServiceConfig(redundancy="sometimes")
