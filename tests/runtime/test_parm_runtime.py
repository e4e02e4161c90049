"""ParM on the runtime: parity workers run the parity model; a failing parity worker is a straggler."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.runtime import JobFailed, LocalExecutor, RayExecutor, Task, run

INF = np.inf
A = np.random.default_rng(11).normal(size=(3, 4))


def linear(X):
    """Batched linear f: R^4 -> R^3, so the exact parity model is f itself."""
    return np.asarray(X, dtype=float).reshape(len(X), -1) @ A.T


linear.batched = True


class Parity:
    """A parity model that counts its calls; `offset` makes it detectably inexact, `fail` makes it raise."""

    batched = True

    def __init__(self, offset: float = 0.0, fail: bool = False):
        self.offset, self.fail, self.calls = offset, fail, 0

    def __call__(self, X):
        self.calls += 1
        if self.fail:
            raise RuntimeError("parity model down")
        return linear(X) + self.offset


class LinearFactory:
    def __call__(self):
        return linear


def test_lost_data_worker_is_recovered_through_the_parity_model(ex, X):
    parity = Parity(offset=0.5)
    code = gencc.ParM(6, k=2, parity=parity)  # N = 9: data 0..5, parity 6, 7, 8
    delays = np.zeros(9)
    delays[3] = INF  # input 3 never arrives: recovered as F_P(x2 + x3) - f(x2)
    r = run(linear, X, code, ex, wait_for=8, latency=delays, order=False)
    assert parity.calls == 3
    assert r.scheme == "parm" and r.N == 9 and r.missing.size == 0
    assert 3 in r.stragglers and 3 not in r.returned
    expected = linear(X)
    expected[3] += 0.5  # the parity model's error lands on the recovered input only
    np.testing.assert_allclose(r.outputs, expected, atol=1e-12)


def test_raising_parity_worker_is_a_straggler(ex, X):
    code = gencc.ParM(6, k=2, parity=Parity(fail=True))
    r = run(linear, X, code, ex, order=False)
    assert set(r.stragglers) == {6, 7, 8}
    assert all(v.startswith("raised: RuntimeError: parity model down") for v in r.stragglers.values())
    np.testing.assert_array_equal(r.returned, np.arange(6))
    np.testing.assert_allclose(r.outputs, linear(X), atol=1e-12)


def test_job_waits_past_a_failed_parity_for_the_slow_data_worker(ex, X):
    code = gencc.ParM(6, k=2, parity=Parity(fail=True))
    delays = np.zeros(9)
    delays[1] = 0.2
    r = run(linear, X, code, ex, wait_for=6, latency=delays, order=False, seed=0)
    assert 1 in r.returned and r.missing.size == 0
    np.testing.assert_allclose(r.outputs, linear(X), atol=1e-12)
    delays[1] = INF  # its group can no longer be completed: the job fails rather than return a hole
    with pytest.raises(JobFailed, match="cannot decode"):
        run(linear, X, code, ex, latency=delays, order=False, timeout=0.5)


def test_factory_executor_torch_and_ordering(X):
    torch = pytest.importorskip("torch")
    code = gencc.ParM(6, k=3, parity=Parity())
    delays = np.zeros(code.N)
    delays[4] = INF
    with LocalExecutor(factory=LinearFactory()) as e:  # f built from a factory; parity from the code
        r = run(None, torch.as_tensor(X), code, e, wait_for=code.N - 1, latency=delays)
    assert isinstance(r.outputs, torch.Tensor)
    np.testing.assert_allclose(r.outputs.numpy(), linear(X), atol=1e-10)


def test_executors_that_build_one_function_refuse_per_worker_functions(X):
    code = gencc.ParM(6, k=2, parity=Parity())
    with LocalExecutor(processes=1) as e, pytest.raises(ValueError, match="their own function"):
        run(linear, X, code, e)
    ray_ex = RayExecutor(factory=LinearFactory())  # refuses before Ray is imported or started
    with pytest.raises(ValueError, match="RayExecutor runs one function"):
        run(None, X, code, ray_ex)
    assert ray_ex.actors == [] and ray_ex._ray is None
    with pytest.raises(ValueError, match="their own function"):
        ray_ex.submit(None, [Task(0, X[0], 0.0, fn=linear)])
    # without a parity model every worker runs f, so ParM needs no per-worker function there
    with LocalExecutor() as e:
        r = run(linear, X, gencc.ParM(6, k=2), e, order=False)
    np.testing.assert_allclose(r.outputs, linear(X), atol=1e-12)
