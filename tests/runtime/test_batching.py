"""LocalExecutor with fewer threads than workers: a job's tasks as a few batched calls of f, each logical worker
keeping its own latency, faults and failures; on a model gencc never saw (a torch module defined here)."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_helpers import Faulty, reference, smooth

import gencc
from gencc.runtime import LocalExecutor, run

INF = np.inf


class Calls:
    """A batched numpy callable around f that counts the rows of each call."""

    batched = True

    def __init__(self, f):
        self.f, self.sizes = f, []

    def __call__(self, X):
        self.sizes.append(len(X))
        return self.f(X)


@pytest.fixture(scope="module")
def one():
    e = LocalExecutor(max_threads=1)
    yield e
    e.close()


def test_one_thread_runs_a_job_as_one_call_of_a_model_gencc_never_saw(one, X):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).double().eval()

    def model(Z):
        with torch.no_grad():
            return net(torch.as_tensor(np.asarray(Z, dtype=float))).numpy()

    f = Calls(model)
    code = gencc.GCC(K=6, N=10)
    r = run(f, X, code, one, order=False)
    assert f.sizes == [10] and r.returned.tolist() == list(range(10))
    np.testing.assert_allclose(r.outputs, reference(code, X, range(10), f=model), atol=1e-10)


def test_shared_thread_keeps_each_workers_latency(one, X):
    code = gencc.GCC(K=6, N=12)
    lat = np.zeros(12)
    lat[[2, 5, 9]] = INF  # never delivered: these workers straggle, their thread-mates do not
    r = run(smooth, X, code, one, wait_for=9, latency=lat, order=False)
    assert r.returned.tolist() == [w for w in range(12) if w not in (2, 5, 9)]
    assert all(r.stragglers[w].startswith("late") for w in (2, 5, 9))
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)
    again = run(smooth, X, code, one, order=False)  # the stragglers' workers serve the next job at once
    assert again.returned.tolist() == list(range(12))


def test_a_raising_input_fails_only_its_own_task_in_a_batch(X):
    code = gencc.GCC(K=6, N=12)
    f = Faulty([(code.encode(X)[4], "raise")])
    with LocalExecutor(max_threads=2) as e:
        r = run(f, X, code, e, order=False)
    assert r.stragglers == {4: "raised: RuntimeError: injected fault"}
    np.testing.assert_allclose(r.outputs, reference(code, X, [w for w in range(12) if w != 4]), atol=1e-12)


def test_executor_options_are_checked():
    with pytest.raises(ValueError, match="blas_threads"):
        LocalExecutor(blas_threads="many")
    with pytest.raises(ValueError, match="task_timeout"):
        LocalExecutor(task_timeout=0)
    with pytest.raises(ValueError, match="max_threads"):
        LocalExecutor(max_threads=0)
