"""The gate under a wrong-result check (`--check-results on`): a checked group's decoded answers go through the
same gate as unchecked serving, in virtual time, on a model gencc does not ship; and `Service.build` gives a
checked service the gate calibrated for its unchecked scheme."""

from __future__ import annotations

import math

import numpy as np

from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import Gate, Request, Service, make_dispatcher

IN = (4, 4)
rng = np.random.default_rng(3)
W1 = rng.normal(size=(16, 10))
X_TRAIN = rng.normal(size=(300, *IN)).astype(np.float32)
X = rng.normal(size=(64, *IN)).astype(np.float32)


def net(x):
    """A user's model: 16 inputs -> 10 logits (tanh features), batched numpy."""
    return np.tanh(np.asarray(x, dtype=float).reshape(len(x), -1) @ W1) * 3.0


net.batched = True


def serve(gate):
    env = VirtualWorkers(12, ServiceTimes(samples=[0.02]), PersistentStragglers(12, 0.2, 10.0, 1.0, seed=0),
                         functions={"f": net}, seed=0)
    d = make_dispatcher("gcc", env, K=8, max_wait=0.02, check="on", check_data=(net, X_TRAIN), gate=gate)
    reqs = [Request(i, X[i % len(X)], i * 0.01) for i in range(600)]
    for r in reqs:
        env.call_later(r.t_arrival, lambda r=r: d.submit(r))
    env.run(until=200)
    return d, reqs


def test_a_checked_groups_decodes_pass_the_gate():
    d, reqs = serve(Gate(0.0))  # every decode passes: the checked path sends decodes
    sent = [r for r in reqs if r.degraded]
    assert d.name == "gcc-checked" and sent and all(r.gate == "passed" for r in sent)
    held, hreqs = serve(Gate(math.inf))  # every decode held: only the model's own outputs go out
    assert [r.status for r in hreqs] == [200] * len(hreqs)
    assert not [r for r in hreqs if r.degraded] and any(r.gate == "held" for r in hreqs)
    F = net(np.stack([r.x for r in hreqs]))
    assert all(np.allclose(r.output, F[i], atol=1e-4) for i, r in enumerate(hreqs))


def test_a_checked_service_gets_the_unchecked_schemes_gate():
    svc = Service.build(net, "sgcc", workers=12, K=8, data=X_TRAIN, check="on", gate_threshold=1.5)
    try:
        assert svc.scheme == "sgcc-checked" and svc.gate is not None and svc.gate.threshold == 1.5
        assert svc.dispatcher.gate is svc.gate
    finally:
        svc.close()
