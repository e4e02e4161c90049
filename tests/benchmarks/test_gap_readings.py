"""benchmarks/investigations/gap_readings.py: its oracle's worst case is the brute-force max over straggler sets
of the least error among the candidates (each decoded alone), so it bounds every pick among them; the script
prints its table."""

from __future__ import annotations

import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

import gencc

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "investigations" / "gap_readings.py"


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("gap_readings")


def test_oracle_worst_is_the_brute_force_worst_of_the_least_candidate_error(bench):
    K, N, S = 4, 10, 3  # C(10, 3) = 120 straggler sets: the search enumerates them, and so does this test
    rng = np.random.default_rng(1)
    W = rng.normal(size=(5, 3))

    def f(X):  # a model gencc does not ship
        return np.tanh(np.asarray(X) @ W)

    f.batched = True
    X = rng.normal(size=(K, 5))
    perm = gencc.order_inputs(X)
    names = ("default", "berrut", "linear")
    oracle = bench.reading_code(K, N, names, oracle=True)
    oracle.truth = f(X[perm])
    worst = gencc.simulate(f, X, oracle, gencc.FixedCount(S, "worst"), trials=1)[0]["rel_mse"]

    alone = [bench.reading_code(K, N, (n,), oracle=False) for n in names]
    Y_all, Y = f(alone[0].encode(X[perm])), f(X)
    assert np.allclose(bench.readings(alone[0], np.arange(N), ("default",))["default"],
                       gencc.GCC(K, N).decoding_matrix(np.arange(N)))  # "default" is GCC's own D_F

    def err(code, r):
        out = np.empty_like(Y)
        out[perm] = code.decode(Y_all[r], r)
        return gencc.metrics.rel_mse(out, Y)

    every = [min(err(c, np.setdiff1d(np.arange(N), st)) for c in alone) for st in combinations(range(N), S)]
    assert worst == pytest.approx(max(every), rel=1e-9)
    singles = [gencc.simulate(f, X, c, gencc.FixedCount(S, "worst"), trials=1)[0]["rel_mse"] for c in alone]
    assert worst <= min(singles) + 1e-12


def test_script_prints_the_table_and_refuses_random_cells():
    cmd = [sys.executable, str(SCRIPT), "--seeds", "0",
           "--candidates", "default,berrut"]
    out = subprocess.run([*cmd, "--cells", "toy-softmax,4,10,worst:2"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| toy-softmax | 4, 10, worst:2 |"))
    assert len(row.split("|")) == 10  # the edges, two labels, gcc, bacc, two candidates, the oracle, seconds
    bad = subprocess.run([*cmd, "--cells", "toy-softmax,4,10,random:2"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "worst-case spec" in bad.stderr


@pytest.mark.parametrize("args, says", [
    (["--cells", "foo"], "a cell is workload,K,N,worst:S"),
    (["--cells", "toy-softmax,4,x,worst:2"], "a cell is workload,K,N,worst:S"),
    (["--cells", "nosuch,4,10,worst:2"], "unknown workload 'nosuch'"),
    (["--cells", "toy-softmax,12,10,worst:2"], "1 <= K < N"),
    (["--cells", "toy-softmax,4,10,worst:abc"], "bad straggler spec"),
    (["--seeds", "x"], "--seeds takes comma-separated integers"),
])
def test_bad_cells_and_seeds_exit_2_before_any_work(args, says):
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
