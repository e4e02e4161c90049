"""A held request whose copies find no idle worker gets one at once on the least-loaded worker and the rest once a
worker frees (virtual time, a model gencc does not ship: a small numpy net defined here)."""

from __future__ import annotations

import math

import numpy as np

from gencc.engine import VirtualWorkers
from gencc.faults import ServiceTimes
from gencc.serving import Gate, make_dispatcher, simulate_load

W, K = 12, 8


class TinyNet:
    """8 inputs -> 10 logits through one tanh layer, batched numpy."""

    batched = True

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.A, self.B = rng.normal(size=(8, 16)), rng.normal(size=(16, 10))

    def __call__(self, X):
        return np.tanh(np.asarray(X, dtype=float).reshape(len(X), -1) @ self.A) @ self.B


class FirstWorkerSlow:
    """The worker that starts the run's first task is slow (x `factor`) for the whole run; the others are not."""

    def __init__(self, factor: float):
        self.factor, self.worker = factor, None

    def multiplier(self, w: int, t: float) -> float:
        if self.worker is None:
            self.worker = w
        return self.factor if w == self.worker else 1.0


def test_a_held_request_gets_its_copy_when_a_worker_frees():
    """Two groups of K requests at once, coded in full: group 1's tasks fill the 12 workers and group 2's queue
    behind them, so when group 1 decodes (its first member's worker is slow x250: 10 s) no worker is idle. The
    held member gets one copy then, queued on the least-loaded worker (as a hedge would), and its second when
    group 2's tasks finish (about 80 ms); it is answered by a copy, not after its own 10 s result."""
    f = TinyNet()
    X = np.random.default_rng(1).normal(size=(2 * K, 8)).astype(np.float32)
    slow = FirstWorkerSlow(250.0)
    env = VirtualWorkers(W, ServiceTimes(samples=[0.04]), slow, functions={"f": f}, seed=0)
    gate = Gate(math.inf)  # every decode held: members not answered by their own worker need copies
    reqs = simulate_load(lambda e: make_dispatcher("sgcc", e, K=K, gate=gate, seed=0, redundancy=None),
                         env, 1.0, 1.0,
                         inputs=X, arrivals=np.zeros(2 * K))
    first = reqs[0]
    assert first.tasks[0].kind == "systematic" and first.tasks[0].worker == slow.worker
    assert all(r.status == 200 and not r.degraded for r in reqs)
    F = f(X)
    for r in reqs:
        assert np.allclose(r.output, F[r.id], rtol=1e-5, atol=1e-6)  # the model's own answer
    copies = [t for t in first.tasks if t.kind == "copy"]
    assert first.gate == "held" and 1 <= len(copies) <= gate.copies
    assert copies[0].t_sent < 0.05 < copies[0].t_start  # sent when held (0.04 s), queued behind group 2's task
    assert all(t.t_sent >= 0.07 for t in copies[1:])  # sent once group 2's tasks had freed workers
    assert first.latency < 0.2  # not its own worker's 10 s
    assert len({t.worker for t in copies}) == len(copies) and slow.worker not in {t.worker for t in copies}
