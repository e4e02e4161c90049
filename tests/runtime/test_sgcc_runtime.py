"""SystematicGCC on the runtime: a lost systematic worker is recovered through its group's coded worker, which
runs the (scaled) parity model."""

from __future__ import annotations

import numpy as np

import gencc
from gencc.runtime import run

A = np.random.default_rng(12).normal(size=(3, 4))


def linear(X):
    """Batched linear f: the exact parity model is f itself, so the recovery is exact up to rho."""
    return np.asarray(X, dtype=float).reshape(len(X), -1) @ A.T


linear.batched = True


class Parity:
    batched = True

    def __init__(self):
        self.calls = self.rows = 0

    def __call__(self, X):
        self.calls += 1
        self.rows += len(X)
        return linear(X)


def test_lost_systematic_worker_is_recovered(ex, X):
    parity = Parity()
    code = gencc.SystematicGCC(6, 9, rho=1e-9, parity=parity)  # groups of two, three coded workers
    delays = np.zeros(9)
    delays[code.systematic[3]] = np.inf
    r = run(linear, X, code, ex, wait_for=8, latency=delays, order=False)
    # each coded worker ran the parity model on its own input (batched f: in as few calls as the threads allow)
    assert parity.rows == 3 and 1 <= parity.calls <= 3 and r.scheme == "sgcc"
    assert code.systematic[3] in r.stragglers
    np.testing.assert_allclose(r.outputs, linear(X), atol=1e-5)
