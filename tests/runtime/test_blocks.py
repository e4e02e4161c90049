"""A job's tasks as one block on the default executor's batched pool (`gencc.runtime.executor.EngineBatch`
with blocks): the same job, result for result, as the tasks sent one by one; a bad row fails only its worker."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gencc
from gencc.faults import Faults
from gencc.runtime import LocalExecutor, run, stream
from gencc.runtime.collect import collect
from gencc.runtime.executor import Batch, BlockCompletion
from gencc.runtime.policy import CodedPolicy

from .runtime_helpers import Faulty, reference, smooth


@pytest.fixture(scope="module")
def pools():
    """(blocks, tasks one by one): the same single-thread batched pool; faults that never fire keep the second
    on the per-task path (an executor with faults never sends blocks)."""
    a, b = LocalExecutor(), LocalExecutor(faults=Faults())
    yield a, b
    a.close()
    b.close()


def _same(r1, r2) -> None:
    assert r1.returned.tolist() == r2.returned.tolist()
    assert r1.stragglers == r2.stragglers
    assert sorted(r1.arrivals) == sorted(r2.arrivals)
    np.testing.assert_array_equal(np.asarray(r1.outputs), np.asarray(r2.outputs))


@pytest.mark.parametrize("wait_for", [None, 7, 10])
def test_a_block_gives_the_job_its_tasks_one_by_one_give(pools, X, wait_for):
    blocks, one_by_one = pools
    code = gencc.GCC(K=6, N=12)
    ok = blocks._batching.counts["ok"] if blocks._batching is not None else 0
    for seed in range(4):
        r1 = run(smooth, X, code, blocks, wait_for=wait_for, seed=seed)
        r2 = run(smooth, X, code, one_by_one, wait_for=wait_for, seed=seed)
        _same(r1, r2)
        np.testing.assert_allclose(r1.outputs, reference(code, X, r1.returned, perm=gencc.order_inputs(X)),
                                   atol=1e-12)
    assert blocks._batching.counts["ok"] - ok == 4  # one block task per job, not twelve
    assert one_by_one._batching.counts["ok"] >= 4 * 12


def test_a_block_of_torch_inputs_gives_torch_out(pools, X):
    torch = pytest.importorskip("torch")
    blocks, one_by_one = pools
    code = gencc.GCC(K=6, N=9)
    Xt = torch.as_tensor(X)
    r1, r2 = run(smooth, Xt, code, blocks, seed=1), run(smooth, Xt, code, one_by_one, seed=1)
    assert isinstance(r1.outputs, torch.Tensor)
    _same(r1, r2)


@pytest.mark.parametrize("wait_for", [None, 6, 8])
def test_a_code_whose_decodability_is_a_set_takes_the_rest_of_a_block_row_by_row(pools, X, wait_for):
    """Replication decodes once every input has a copy back: the block's first wait_for rows are taken at once,
    the rest one by one until the copies cover every input."""
    blocks, one_by_one = pools
    code = gencc.Replication(6, 12)
    for seed in range(6):
        r = run(smooth, X, code, blocks, wait_for=wait_for, seed=seed)
        _same(r, run(smooth, X, code, one_by_one, wait_for=wait_for, seed=seed))
        assert not r.missing.size


def test_baselines_take_a_block_row_by_row(pools, X):
    blocks, one_by_one = pools
    for code in (gencc.Uncoded(6), gencc.Replicated(6, 12)):
        _same(run(smooth, X, code, blocks, seed=2), run(smooth, X, code, one_by_one, seed=2))
    hedged = gencc.Hedged(6, 12, hedge_delay=0.0)  # spare copies sent at once: which copy wins is timing
    r = run(smooth, X, hedged, blocks, seed=2)
    np.testing.assert_array_equal(r.outputs, run(smooth, X, hedged, one_by_one, seed=2).outputs)
    np.testing.assert_allclose(r.outputs, smooth(X), rtol=1e-12)


def test_a_raising_input_fails_only_its_own_worker_in_a_block(pools, X):
    blocks, _ = pools
    code = gencc.GCC(K=6, N=12)
    f = Faulty([(code.encode(X)[4], "raise")])
    r = run(f, X, code, blocks, order=False)
    assert r.stragglers == {4: "raised: RuntimeError: injected fault"}
    np.testing.assert_allclose(r.outputs, reference(code, X, [w for w in range(12) if w != 4]), atol=1e-12)


@pytest.mark.parametrize("wait_for", [None, 10])
def test_a_non_finite_row_of_a_block_is_a_straggler_and_the_rest_decode(pools, X, wait_for):
    blocks, one_by_one = pools
    code = gencc.GCC(K=6, N=12)
    f = Faulty([(code.encode(X)[4], "nan")])
    for seed in range(6):
        r = run(f, X, code, blocks, wait_for=wait_for, order=False, seed=seed)
        _same(r, run(f, X, code, one_by_one, wait_for=wait_for, order=False, seed=seed))
        if 4 in r.arrivals:  # looked at: judged as a straggler, never decoded from
            assert r.stragglers[4] == "non-finite output (NaN or inf)"
        assert 4 not in r.returned
        np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)


def test_jobs_in_flight_share_calls_and_keep_their_own_results(X):
    rng = np.random.default_rng(3)
    batches = [X + 0.1 * rng.normal(size=X.shape) for _ in range(12)]
    code = gencc.GCC(K=6, N=10)
    with LocalExecutor() as e:
        got = list(stream(smooth, batches, code, e, max_in_flight=4, seed=5, wait_for=8))
        for j, (Xj, r) in enumerate(zip(batches, got, strict=True)):
            one = run(smooth, Xj, code, e, seed=np.random.default_rng([5, j]), wait_for=8)
            _same(r, one)


def test_a_list_of_tasks_travels_as_a_block_only_when_it_can(X):
    """EngineBatch with blocks: tasks that share f, carry no delay and have one input shape, one per worker, go
    as one block; a delay or two tasks for one worker keep them apart."""
    from gencc.engine import Task, ThreadBackend, Workers
    from gencc.runtime.executor import BlockCompletion, EngineBatch

    w = Workers(1, ThreadBackend(), threads=1, inline=True, preempt=True)
    try:
        def collect_all(batch, n):
            got = []
            while sum(len(c.workers) if type(c) is BlockCompletion else 1 for c in got) < n:
                got += batch.take(10.0)
            return got

        cases = [([Task(k, X[k]) for k in (3, 0, 5)], True),
                 ([Task(k, X[k], 0.01 * (k == 0)) for k in (3, 0, 5)], False),
                 ([Task(k, X[k % 2]) for k in (1, 1, 2)], False)]
        for tasks, as_block in cases:
            batch = EngineBatch(w, smooth, blocks=True)
            batch.add(tasks)
            got = collect_all(batch, 3)
            sent = list(batch._tasks)  # what went to the engine
            batch.close()
            if as_block:
                assert len(got) == 1 and type(got[0]) is BlockCompletion and got[0].workers == [3, 0, 5]
                np.testing.assert_array_equal(got[0].values, smooth(X[[3, 0, 5]]))
            else:  # sent as three tasks (their results may still come back together, as a block of rows)
                assert len(sent) == 3 and not any(t.block for t in sent)
                assert sum(len(c.workers) if type(c) is BlockCompletion else 1 for c in got) == 3
    finally:
        w.close(timeout=2)


class _Given(Batch):
    """A batch whose completions are all there at the first take (what a job's block task brings back)."""

    def __init__(self, completions: list) -> None:
        self._left = list(completions)

    def next(self, timeout):
        return self._left.pop(0) if self._left else None

    def ready(self) -> bool:
        return bool(self._left)

    def add(self, tasks) -> None:
        raise AssertionError("a coded job adds no tasks")

    def cancel(self, workers) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("wait_for", [None, 5, 8])
@pytest.mark.parametrize("bad", [None, 1, 10])
def test_collect_takes_a_block_as_it_takes_the_same_rows_one_by_one(wait_for, bad):
    """`collect` takes a job's first completion in one step when it is a block after whose leading rows the policy
    stops; that step, and its fallback to the loop (a non-finite row among them), end where the loop ends for the
    same rows as separate completions: the same valid results, stragglers, arrivals and workers left out."""
    code, rng = gencc.GCC(K=6, N=12), np.random.default_rng(3)
    workers, values = rng.permutation(12).tolist(), rng.normal(size=(12, 3))
    if bad is not None:
        values[bad, 1] = np.nan
    got, block = {}, BlockCompletion(workers, values)
    for kind, given in (("block", [block]), ("rows", block.rows())):
        outstanding = set(workers)
        valid, stragglers, arrivals, _ = collect(_Given(given), CodedPolicy(code, wait_for, None), 5.0,
                                                 time.perf_counter(), outstanding)
        got[kind] = ([(w, v.tolist()) for w, v in valid.items()], stragglers, sorted(arrivals), sorted(outstanding))
    assert got["block"] == got["rows"]
    finite = [w for i, w in enumerate(workers) if i != bad]
    assert [w for w, _ in got["block"][0]] == finite[:wait_for or 12]
