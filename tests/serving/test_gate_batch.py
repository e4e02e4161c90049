"""The gate's calibration evaluates its coded tasks in batches (the runs side by side, each call taking every task
running at that moment) and finds what one call per task finds: on a model defined here whose rows are computed
alone (so a batch changes no bit of a row), locally and over a loopback replica reached over HTTP."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gencc.engine.remote import check_fleet
from gencc.errors import CalibrationStopped
from gencc.serving import make_dispatcher
from gencc.serving._policy.gate import Pooled, calibrate_gate

from ..engine.oip_replica import Replica

W, K = 12, 8


class RowNet:
    """16 inputs -> 10 outputs, tanh of a linear map summed input by input (elementwise numpy only: a row's output
    does not depend on the rows beside it, to the bit); counts its calls and the rows of each."""

    batched = True

    def __init__(self, seed: int = 0):
        self.A = np.random.default_rng(seed).normal(size=(16, 10)) * 0.2
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, X):
        X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
        with self.lock:
            self.calls.append(len(X))
        acc = X[:, :1] * self.A[0]
        for i in range(1, X.shape[1]):
            acc = acc + X[:, i:i + 1] * self.A[i]
        return np.tanh(acc)


def inputs(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 16)).astype(np.float32)


def make(g):
    return lambda e: make_dispatcher("sgcc", e, K=K, gate=g, seed=3)


def calibrate(f, X, batch, **kw):
    return calibrate_gate(make, {"f": f}, X, workers=W, duration=8.0, seed=7, runs=3, target=0.8, batch=batch, **kw)


def test_batched_calibration_equals_one_call_per_task_in_fewer_calls():
    X = inputs(300)
    one, many = RowNet(), RowNet()
    a, b = calibrate(one, X, False), calibrate(many, X, True)
    assert a.candidates >= 50 and 0 < a.threshold < np.inf  # a calibration that sends some decodes
    assert (b.threshold, b.frontier, b.draws, b.candidates) == (a.threshold, a.frontier, a.draws, a.candidates)
    # the training inputs in one call, then the coded tasks: one row a call before, batches now, no row more
    assert one.calls[0] == many.calls[0] == len(X) and set(one.calls[1:]) == {1}
    assert sum(many.calls) == sum(one.calls)
    assert max(many.calls[1:]) >= 4 and len(many.calls) <= len(one.calls) / 3


def test_a_model_error_or_a_stop_ends_every_run():
    X = inputs(200)

    class Failing(RowNet):
        def __call__(self, Z):
            if len(self.calls) >= 5:
                raise RuntimeError("the model failed")
            return super().__call__(Z)

    with pytest.raises(RuntimeError, match="the model failed"):
        calibrate(Failing(), X, True)
    stop = threading.Event()

    class Stopping(RowNet):
        def __call__(self, Z):
            if len(self.calls) >= 5:
                stop.set()
            return super().__call__(Z)

    with pytest.raises(CalibrationStopped):
        calibrate(Stopping(), X, True, stop=stop)
    assert not [t for t in threading.enumerate() if t.name.startswith("gencc-gate-run")]


def test_pooled_answers_each_caller_its_own_rows_in_one_call():
    f = RowNet()
    pooled = Pooled(f, 3)
    Xs = [inputs(n, seed=n) for n in (1, 2, 3)]
    got: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, pooled(Xs[i]))) for i in range(2)]
    for t in threads:
        t.start()
    got[2] = pooled(Xs[2])  # the third caller completes the batch
    for t in threads:
        t.join(10)
    assert f.calls == [6] and pooled.calls == 1
    for i in range(3):
        assert np.array_equal(got[i], RowNet()(Xs[i]))
    pooled.leave()
    pooled.leave()  # one caller left: its calls go alone
    assert np.array_equal(pooled(Xs[0]), RowNet()(Xs[0])) and f.calls == [6, 1]


def test_over_a_replica_the_batched_calibration_sends_fewer_requests_within_its_max_batch():
    """The fleet's model as `gencc serve --upstream` calibrates with it: requests over HTTP (float32 on the wire)."""
    net = RowNet()
    rep = Replica(net, name="m", in_shape=(16,), out_shape=(10,), max_batch=8)
    try:
        f = check_fleet([rep.url]).model()  # the calibration calls one replica
        X = inputs(64)
        counts = []
        cals = []
        for batch in (False, True):
            n0 = rep.calls
            cals.append(calibrate_gate(make, {"f": f}, X, workers=W, duration=3.0, seed=7, runs=2, batch=batch))
            counts.append(rep.calls - n0)
        assert cals[0].frontier == cals[1].frontier and cals[0].threshold == cals[1].threshold
        assert counts[1] < counts[0] * 0.6 and max(rep.batches) <= 8
    finally:
        rep.kill()
