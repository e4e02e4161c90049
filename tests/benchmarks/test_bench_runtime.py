"""The runtime suite (benchmarks/bench_runtime.py): MinimalJob, the floor of the per-job figures, computes what
gencc.run does."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gencc
from gencc.runtime import LocalExecutor


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_runtime")


def _mlp():
    W = np.random.default_rng(5).normal(size=(16, 3)) / 4

    def f(X: np.ndarray) -> np.ndarray:  # a model of this test's own
        return np.tanh(np.asarray(X).reshape(len(X), -1) @ W)

    f.batched = True
    return f


@pytest.mark.parametrize("code", [gencc.Replication(6, 6), gencc.GCC(6, 12, beta="chebyshev2")], ids=["uncoded", "gcc"])
def test_minimal_job_matches_gencc_run_on_every_result(bench, code):
    f = _mlp()
    X = np.random.default_rng(1).normal(size=(6, 4, 4))
    job = bench.MinimalJob(f)
    try:
        got = job(X, code, None)  # every result: no dispatch order involved
    finally:
        job.close()
    with LocalExecutor() as ex:
        want = gencc.run(f, X, code, ex).outputs
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if isinstance(code, gencc.Replication):
        np.testing.assert_allclose(got, f(X), rtol=1e-12)


def test_minimal_job_decodes_from_the_first_results_and_skips_nonfinite_rows(bench):
    code = gencc.GCC(6, 9)

    def f(X: np.ndarray) -> np.ndarray:
        Y = np.asarray(X).reshape(len(X), -1)[:, :3].copy()
        Y[0] = np.nan  # one worker's result is not finite: never decoded from
        return Y

    f.batched = True
    job = bench.MinimalJob(f)
    try:
        out = job(np.random.default_rng(2).normal(size=(6, 2, 2)), code, 7)
    finally:
        job.close()
    assert out.shape == (6, 3) and np.isfinite(out).all()


def test_decode_after_f_times_the_same_decode_twice_on_a_model_of_ours(bench):
    """The digits-CNN part's one-thread figure, on this test's own model: the decode right after f, beside the same
    decode at once again, both real timings of a decode that works (every pattern built beforehand)."""
    f = _mlp()
    jobs = [np.random.default_rng(i).normal(size=(bench.K, 16)) for i in range(6)]
    fig = bench._decode_after_f(f, jobs, gencc.GCC(bench.K, bench.N))
    assert "right after f" in fig.name and fig.floor_name == "the same decode again at once"
    assert 0 < fig.value < 1_000 and 0 < fig.floor < 1_000  # ms


def test_stream_times_measure_every_variant_on_a_model_of_ours(bench):
    """The stream part's stretches (gencc.run one by one, f alone, stream at each max_in_flight) all run and time
    this test's own model."""
    f = _mlp()
    jobs = [np.random.default_rng(i).normal(size=(bench.K, 16)) for i in range(4)]
    per = bench._stream_times(f, jobs)
    assert set(per) == {"run", "f", *bench.STREAM_IN_FLIGHT}
    assert all(0 < v < 1 for v in per.values())  # seconds per job


def test_stretch_times_each_input_after_untimed_settle_calls(bench):
    """A stretch calls the configuration SETTLE_JOBS times untimed (what the previous stretch left running ends
    first), then once per input, timing each of those calls (and its CPU when asked)."""
    calls: list[int] = []

    def go(x: int) -> None:
        calls.append(x)
        time.sleep(0.002 if x >= 100 else 0.0)

    out, cpu = [], []
    inputs = [100, 101, 102, 103, 104]
    bench._stretch(go, inputs, out, cpu)
    assert calls == inputs[: bench.SETTLE_JOBS] + inputs
    assert len(out) == len(inputs) == len(cpu)
    assert all(t >= 0.0019 for t in out)  # each timed call slept 2 ms


def test_minimal_job_times_its_own_call_of_f(bench):
    """MinimalJob records each call of f, timed in its thread: the CNN part's "f's call inside a minimal
    threaded job" figure."""
    def f(X: np.ndarray) -> np.ndarray:
        time.sleep(0.003)
        return np.asarray(X).reshape(len(X), -1)[:, :2]

    f.batched = True
    job = bench.MinimalJob(f)
    try:
        for i in range(3):
            job(np.random.default_rng(i).normal(size=(6, 4)), gencc.GCC(6, 9), 8)
    finally:
        job.close()
    assert len(job.f_times) == 3 and all(0.0029 <= t < 1.0 for t in job.f_times)


@pytest.mark.parametrize("code", [gencc.Replication(6, 6), gencc.GCC(6, 12, beta="chebyshev2")], ids=["uncoded", "gcc"])
def test_the_hand_rolled_stdlib_job_matches_gencc_run_on_every_result(bench, code):
    """HandRolledJob (what a user writes with a ThreadPoolExecutor, the stdlib floor) computes gencc.run's
    outputs from every result, and from the first ones decodes with the cached D_F of the workers it used."""
    W = np.random.default_rng(5).normal(size=(16, 3)) / 4

    def f(x: np.ndarray) -> np.ndarray:  # one input at a time, a model of this test's own
        return np.tanh(np.asarray(x).reshape(-1) @ W)

    X = np.random.default_rng(1).normal(size=(6, 4, 4))
    job = bench.HandRolledJob(f, code)
    try:
        got = job(X)
        first = job(X, code.N - 2) if isinstance(code, gencc.GCC) else None
    finally:
        job.close()
    with LocalExecutor() as ex:
        want = gencc.run(f, X, code, ex).outputs
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if first is not None:
        assert sorted(len(u) for u in job.D) == [code.N - 2, code.N]  # one D_F cached per pattern
        used = next(u for u in job.D if len(u) == code.N - 2)
        perm = gencc.order_inputs(X)
        Z = code.encode(X[perm])
        ref = np.empty((6, 3))
        ref[perm] = code.decode(np.stack([f(z) for z in Z])[list(used)], np.asarray(used))
        np.testing.assert_allclose(first, ref, rtol=1e-10, atol=1e-12)
