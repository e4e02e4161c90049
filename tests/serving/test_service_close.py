"""`Service.close` with the gate's calibration still running: it returns only after the calibration thread has
stopped, so a script that closes and exits never leaves a thread inside the model (torch aborts the process
when one is)."""

from __future__ import annotations

import threading
import time

import numpy as np

from gencc.serving import Service


class SlowNet:
    """A user's model (16 inputs of shape (4, 4) -> 10 logits), slow enough that calibration is still running
    when the service closes."""

    batched = True

    def __init__(self) -> None:
        self.W = np.random.default_rng(0).normal(size=(16, 10))
        self.calls = 0

    def __call__(self, X):
        self.calls += 1
        time.sleep(0.3)
        return np.asarray(X, dtype=float).reshape(len(X), -1) @ self.W


def calibrating() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gencc-gate-calibration"]


def test_close_waits_for_the_gates_calibration_to_stop():
    net = SlowNet()
    X = np.random.default_rng(1).normal(size=(64, 4, 4)).astype(np.float32)
    svc = Service.build(net, "sgcc", workers=12, K=8, data=X, service_ms=5, slow_fraction=0.1)
    assert not svc.gate.ready.is_set() and calibrating()  # still calibrating in the background
    svc.close(drain_s=1)
    assert svc.gate.ready.is_set() and svc.gate.threshold == np.inf  # abandoned: every decode stays held
    for t in calibrating():
        t.join(5)
    assert not calibrating()
