"""What each worker sees under a private code, on every front door that runs one in-process: `gencc.run` on the
threads backend, `gencc.simulate`, a `Service` (the serving path of `gencc serve`) and a coded job over model
replicas (Open Inference Protocol servers, `upstreams=`). A recording model defined
here keeps every input it is handed: none is a raw input, and the coded inputs of two calls on the same inputs
share nothing (fresh masks). The `--opt` text reaches the code unchanged."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gencc
from gencc.codes import make_code

K, N, D = 8, 24, 6
rng = np.random.default_rng(3)
W = rng.normal(size=(D, 3))


class Recorder:
    """f(x) = tanh(x W) on a batch or a single input, keeping a copy of every input row it is handed."""

    def __init__(self):
        self.seen: list[np.ndarray] = []
        self.lock = threading.Lock()

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        rows = x.reshape(-1, D)
        with self.lock:
            self.seen.extend(r.copy() for r in rows)
        return np.tanh(x @ W)

    def take(self) -> np.ndarray:
        with self.lock:
            out, self.seen = np.array(self.seen), []
        return out


def nearest(A: np.ndarray, B: np.ndarray) -> float:
    """The least distance between a row of A and a row of B."""
    return float(np.min(np.linalg.norm(A[:, None, :] - B[None, :, :], axis=2)))


def assert_private_views(first: np.ndarray, second: np.ndarray, X: np.ndarray) -> None:
    assert len(first) and len(second)
    tol = 1e-6 * np.abs(X).max()
    assert nearest(first, X) > tol and nearest(second, X) > tol  # no worker got a raw input
    assert nearest(first, second) > tol  # every coded input changed between the calls


@pytest.mark.parametrize("name,kw", [("gcc", {}), ("bacc", {}), ("lcc", {"degree": 2})])
def test_run_on_threads_never_sends_a_raw_input(name, kw):
    code = make_code(name, K, N, colluders=2, **kw)
    rec = Recorder()
    X = rng.normal(size=(K, D))
    ex = gencc.LocalExecutor()
    try:
        r1 = gencc.run(rec, X, code, ex)
        first = rec.take()
        r2 = gencc.run(rec, X, code, ex)
        second = rec.take()
    finally:
        ex.close()
    assert len(first) == N and len(second) == N
    assert_private_views(first, second, X)
    for r in (r1, r2):  # the answers still estimate f at the inputs
        assert np.all(np.isfinite(r.outputs)) and r.outputs.shape == (K, 3)


def test_simulate_encodes_with_masks():
    code = make_code("bacc", K, N, colluders=1)
    rec = Recorder()
    X = rng.normal(size=(K, D))
    views = []
    for _ in range(2):
        gencc.simulate(rec, X, code, gencc.stragglers.FixedCount(2), trials=2)
        rows = rec.take()
        master = np.array([nearest(r[None], X) == 0.0 for r in rows])
        assert master.sum() == K  # the master's own f(X), which scores the estimates; the rest are the workers'
        views.append(rows[~master])
    assert len(views[0]) == N
    assert_private_views(*views, X)


def test_service_never_sends_a_raw_input_nor_a_plain_copy():
    from gencc.engine import ThreadBackend, Workers
    from gencc.faults import ServiceTimes
    from gencc.serving import Request, Service, make_dispatcher

    rec = Recorder()
    pool = Workers(12, ThreadBackend({"f": rec}), ServiceTimes(0.001))
    svc = Service(pool, lambda env: make_dispatcher("gcc", env, K=K, max_wait=0.02,
                                                    code_options={"colluders": 1, "mask_scale": 0.5}))
    svc.in_shape = (D,)
    X = rng.normal(size=(K, D))
    try:
        first_out = [f.result(timeout=30) for f in [svc.submit(x) for x in X]]
        first = rec.take()
        second_out = [f.result(timeout=30) for f in [svc.submit(x) for x in X]]
        second = rec.take()
        d = svc.dispatcher
        assert d.code.capabilities.colluders == 1 and d.sys is None  # no systematic slot
        assert d.send_copy(Request(0, X[0], 0.0), "copy") is None  # and no plain copy
    finally:
        svc.close()
    assert_private_views(first, second, X)
    for out in (first_out, second_out):
        assert all(r.status == 200 and r.degraded for r in out)  # every answer is a decode


def test_opt_text_reaches_the_code():
    from gencc.cli.options import code_options

    opts = code_options(["gcc.colluders=2", "gcc.mask_scale=3", "gcc.seed=4"], ["gcc"], "serving")
    assert opts == {"gcc": {"colluders": 2, "mask_scale": 3.0, "seed": 4}}
    from gencc.serving.codes import scheme_code
    from gencc.serving.config import scheme as scheme_entry

    for scheme in ("gcc", "bacc"):
        code = scheme_code(scheme_entry(scheme), K, 12, options=opts["gcc"])
        assert code.capabilities.colluders == 2 and code.mask_scale == 3.0


def test_remote_replicas_each_see_only_masked_inputs_new_every_call():
    """A coded job over Open Inference Protocol replicas (real HTTP servers in threads, one per worker): each
    replica records what it is sent."""
    from ..engine.oip_replica import Replica

    k, n = 4, 8
    seen = [Recorder4() for _ in range(n)]
    reps = [Replica(rec, name="m", in_shape=(4,), out_shape=(3,)) for rec in seen]
    X = rng.normal(size=(k, 4)).astype(np.float32)
    code = make_code("gcc", k, n, colluders=1)
    try:
        urls = [r.url for r in reps]
        gencc.run(None, X, code, upstreams=urls, seed=0)
        first = [rec.take() for rec in seen]
        gencc.run(None, X, code, upstreams=urls, seed=1)
        second = [rec.take() for rec in seen]
    finally:
        for r in reps:
            r.kill()
    tol = 1e-3 * np.abs(X).max()  # the inputs travel as FP32
    for a, b in zip(first, second, strict=True):
        assert len(a) == 1 and len(b) == 1  # one coded input per replica per job
        assert nearest(a, X) > tol and nearest(b, X) > tol and nearest(a, b) > tol


class Recorder4(Recorder):
    """The recorder on 4 features, answering 3 outputs: the replicas' shapes."""

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        with self.lock:
            self.seen.extend(r.copy() for r in x.reshape(-1, 4))
        return np.tanh(x @ W[:4])
