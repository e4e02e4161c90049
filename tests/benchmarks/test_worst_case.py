"""benchmarks/investigations/worst_case.py: its worst case is the largest rel_mse over every contiguous block and
gencc's search, checked by brute force on a small row; the script prints its table."""

from __future__ import annotations

import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

import gencc

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "investigations" / "worst_case.py"


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("worst_case")


def test_worst_is_at_least_every_block_and_at_most_the_brute_force_worst(bench):
    K, N, S = 4, 10, 3  # C(10, 3) = 120 straggler sets: brute force is cheap
    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 3))

    def f(X):
        return np.tanh(np.asarray(X) @ W)

    f.batched = True
    X = rng.normal(size=(K, 5))
    code = gencc.GCC(K, N)
    worst, agreement = bench.worst(f, X, code, S)
    perm = gencc.order_inputs(X)
    Y_all, Y = f(code.encode(X[perm])), f(X)

    def scores(stragglers):
        r = np.setdiff1d(np.arange(N), stragglers)
        out = np.empty_like(Y)
        out[perm] = code.decode(Y_all[r], r)
        return gencc.metrics.rel_mse(out, Y), gencc.metrics.agreement(out, Y)

    every = [scores(st) for st in combinations(range(N), S)]
    blocks = [scores(np.arange(s, s + S)) for s in range(N - S + 1)]
    assert worst == pytest.approx(max(v for v, _ in every))  # enumeration is exact at this size
    assert worst >= max(v for v, _ in blocks) and agreement <= min(a for _, a in blocks)


def test_script_prints_the_table():
    out = subprocess.run([sys.executable, str(SCRIPT), "--rows", "6,12,2",
                          "--workload", "script-mlp", "--sets", "1", "--trials", "2"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| 6, 12, 2 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["gcc", "gcc:gaps=fit", "gcc:gaps=bridge", "bacc"]


def test_a_length_scale_scheme_is_the_auto_kernel_at_that_length_scale(bench):
    name, opts = bench.parse_scheme("gcc:ell=0.6;gaps=fit")
    code = bench.build(name, 5, 20, opts)
    ref = gencc.GCC(5, 20, kernel=gencc.kernels.Matern32(0.6, null_degree=1), gaps="fit")
    X = np.random.default_rng(1).normal(size=(5, 3))
    np.testing.assert_array_equal(code.encode(X), ref.encode(X))
    assert not np.allclose(code.encode(X), gencc.GCC(5, 20, gaps="fit").encode(X))  # 0.3 is another encoder


@pytest.mark.parametrize("args, message", [
    (["--schemes", "gcc:ell=0"], "gcc:ell needs a positive length scale"),
    (["--schemes", "gcc:ell=x"], "gcc:ell needs a positive length scale"),
    (["--schemes", "gcc:foo=1"], "gcc has no option 'foo'"),
    (["--rows", "5,4,1"], "each row is K,N,S"),
    (["--rows", "5,x"], "each row is K,N,S"),
    (["--workload", "nope"], "unknown workload 'nope'"),
    (["--trials", "0"], "--trials must be at least 1"),
])
def test_bad_arguments_exit_2_with_one_message_before_any_work(args, message):
    out = subprocess.run([sys.executable, str(SCRIPT), *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
