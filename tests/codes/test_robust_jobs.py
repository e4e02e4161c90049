"""A `robust.Calibration` through the job entry points (`gencc.run` / `gencc.stream` with `adversaries=` and
`robust_threshold=`), on a model defined here: an always-wrong plausible worker is located and excluded, honest
jobs raise no alarm, and a calibration that does not fit the job is refused before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.codes import robust
from gencc.runtime.robust import REASON

K, N = 8, 32


def model(seed=3):
    """A random-features ridge fit R^4 -> R^3 (cosine features) of a smooth target on generated data."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((600, 4))
    T = np.column_stack([np.sin(Z[:, 0] - Z[:, 1]), np.tanh(Z[:, 2] + Z[:, 3]), Z[:, 0] * Z[:, 3] / 2])
    W, b = rng.standard_normal((4, 48)) / 2, rng.uniform(0, 2 * np.pi, 48)
    H = np.cos(Z @ W + b)
    C = np.linalg.solve(H.T @ H + 1e-2 * np.eye(48), H.T @ T)

    def f(X):
        return np.cos(np.asarray(X, dtype=float) @ W + b) @ C

    f.batched = True
    return f, rng.standard_normal((300, 4)) / 2


F, POOL = model()
CODE = gencc.GCC(K, N)


@pytest.fixture(scope="module")
def cal():
    runs = robust.honest_runs(CODE, F, POOL, runs=300, seed=10_000, order=gencc.order_inputs)
    return robust.calibrate(CODE, runs, adversaries=1, false_alarm=0.01)


def inputs(seed):
    rng = np.random.default_rng(seed)
    return POOL[rng.choice(len(POOL), K, replace=False)]


def liar(X, worker, factor=1.2):
    """F, except on worker `worker`'s coded input of X (as `run` orders and encodes it), where its result is
    scaled by `factor`: finite, of the right magnitude (the Scaled family of gencc.adversaries)."""
    Xt = CODE.encode(X[gencc.order_inputs(X, "chain")])[worker]

    def f(B):
        out = F(B)
        hit = np.all(np.isclose(np.asarray(B, dtype=float), Xt, rtol=0, atol=1e-12), axis=1)
        out[hit] *= factor
        return out

    f.batched = True
    return f


def flagged(r):
    return sorted(w for w, why in r.stragglers.items() if why == REASON)


def test_run_locates_and_excludes_an_always_wrong_worker_with_a_calibration(cal):
    X = inputs(1)
    for w in (9, 17):
        r = gencc.run(liar(X, w), X, CODE, adversaries=1, robust_threshold=cal, seed=0)
        assert flagged(r) == [w] and w not in r.returned.tolist()
        ref = CODE.decode(F(CODE.encode(X[gencc.order_inputs(X, "chain")])[r.returned]), r.returned)
        np.testing.assert_allclose(r.outputs[gencc.order_inputs(X, "chain")], ref, atol=1e-10)
        # the lie is plausible: the default threshold, a fixed fraction of the spread, lets it through
        assert flagged(gencc.run(liar(X, w), X, CODE, adversaries=1, seed=0)) == []


def test_honest_jobs_raise_no_alarm_with_the_calibration(cal):
    for seed in range(20, 26):
        X = inputs(seed)
        r = gencc.run(F, X, CODE, adversaries=1, robust_threshold=cal, seed=seed)
        assert flagged(r) == [] and r.returned.size == N
        np.testing.assert_allclose(r.outputs, gencc.run(F, X, CODE, seed=seed).outputs, atol=1e-10)


def test_stream_passes_the_calibration_to_every_job(cal):
    X, Y = inputs(1), inputs(2)
    out = list(gencc.stream(liar(X, 9), [X, Y], CODE, adversaries=1, robust_threshold=cal, seed=0))
    assert flagged(out[0]) == [9] and flagged(out[1]) == []


def test_a_calibration_that_does_not_fit_is_refused_before_the_job_runs(cal):
    X = inputs(1)
    calls = []

    def f(B):
        calls.append(len(B))
        return F(B)

    with pytest.raises(ValueError, match="pass adversaries=A as well"):
        gencc.run(f, X, CODE, robust_threshold=cal)
    with pytest.raises(ValueError, match="N=32 workers, the code has N=40"):
        gencc.run(f, X, gencc.GCC(K, 40), adversaries=1, robust_threshold=cal)
    with pytest.raises(ValueError, match="calibrate with adversaries=2"):
        gencc.run(f, X, CODE, adversaries=2, robust_threshold=cal)
    with pytest.raises(ValueError, match="positive number or a Calibration"):
        gencc.run(f, X, CODE, adversaries=1, robust_threshold=-1.0)
    with pytest.raises(ValueError, match="no robust decode"):
        gencc.run(f, X, gencc.Uncoded(K), robust_threshold=cal)
    assert calls == []
