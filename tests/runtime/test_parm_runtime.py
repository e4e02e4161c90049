"""ParM on the runtime: parity workers run the parity model; a failing parity worker is a straggler."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.runtime import JobFailed, LocalExecutor, run

from .runtime_helpers import LinearFactory, OffsetParity, linear

INF = np.inf


class Parity:
    """A parity model that counts its calls; `offset` makes it detectably inexact, `fail` makes it raise."""

    batched = True

    def __init__(self, offset: float = 0.0, fail: bool = False):
        self.offset, self.fail, self.calls, self.rows = offset, fail, 0, 0

    def __call__(self, X):
        self.calls += 1
        self.rows += len(X)
        if self.fail:
            raise RuntimeError("parity model down")
        return linear(X) + self.offset


def test_lost_data_worker_is_recovered_through_the_parity_model(ex, X):
    parity = Parity(offset=0.5)
    code = gencc.ParM(6, k=2, parity=parity)  # N = 9: data 0..5, parity 6, 7, 8
    delays = np.zeros(9)
    delays[3] = INF  # input 3 never arrives: recovered as F_P(x2 + x3) - f(x2)
    r = run(linear, X, code, ex, wait_for=8, latency=delays, order=False)
    # each parity worker ran the parity model on its own input (batched f: in as few calls as the threads allow)
    assert parity.rows == 3 and 1 <= parity.calls <= 3
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


def test_process_pool_builds_the_parity_model_in_its_processes(X):
    code = gencc.ParM(6, k=2, parity=OffsetParity(0.5))
    delays = np.zeros(9)
    delays[3] = INF  # input 3 is recovered through its group's parity worker, which ran in a child process
    with LocalExecutor(processes=2, factory=LinearFactory()) as e:
        for _ in range(2):  # the second job finds the parity model already built in the processes
            r = run(None, X, code, e, wait_for=8, latency=delays, order=False)
            expected = linear(X)
            expected[3] += 0.5
            np.testing.assert_allclose(r.outputs, expected, atol=1e-12)
            assert 3 in r.stragglers and r.missing.size == 0


def test_a_per_worker_function_that_cannot_be_shipped_fails_the_call(X):
    code = gencc.ParM(6, k=2, parity=lambda Z: linear(Z))  # a lambda does not pickle to a process
    with LocalExecutor(processes=1, factory=LinearFactory()) as e, pytest.raises(ValueError, match="must pickle"):
        run(None, X, code, e)
    # without a parity model every worker runs f, so ParM needs no per-worker function there
    with LocalExecutor() as e:
        r = run(linear, X, gencc.ParM(6, k=2), e, order=False)
    np.testing.assert_allclose(r.outputs, linear(X), atol=1e-12)
