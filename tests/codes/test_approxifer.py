"""ApproxIFER's locator (the baseline robust decode of BACC): always A workers, a gross error found."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import BACC
from gencc.codes.approxifer import approxifer_locate, default_degree


def smooth_results(code, m=4, seed=0):
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(code.K, 6)), axis=0) / 3  # neighbouring inputs similar
    W = rng.normal(size=(6, m)) / 2
    return np.tanh(code.encode(X) @ W)


def test_approxifer_removes_exactly_A_and_finds_a_gross_error():
    code = BACC(10, 40)
    Y = smooth_results(code, seed=3)
    Yr = Y.copy()
    Yr[21] += 50 * Y.std()
    _, flagged = code.robust_decode(Yr, np.arange(40), adversaries=1, method="approxifer")
    assert flagged.tolist() == [21]
    _, flagged = code.robust_decode(Y, np.arange(40), adversaries=2, method="approxifer")
    assert flagged.size == 2


@settings(max_examples=20)
@given(st.integers(0, 4), st.integers(0, 2**16))
def test_locate_returns_A_sorted_distinct_positions(A, seed):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(-1, 1, 24))
    Y = rng.normal(size=(24, 3))
    pos = approxifer_locate(t, Y, A)
    assert pos.dtype == np.int64 and pos.size == A and np.unique(pos).size == A
    assert np.all(np.diff(pos) > 0) and (A == 0 or (pos.min() >= 0 and pos.max() < 24))


def test_default_degree_is_about_half_the_results():
    assert [default_degree(n, 1) for n in (1, 2, 3, 40)] == [1, 1, 1, 19]


@pytest.mark.parametrize("zero_column", [True, False])
def test_a_zero_output_column_casts_no_vote(zero_column):
    code = BACC(8, 30)
    Y = smooth_results(code, m=2, seed=1)
    Y[12] += 40 * Y.std()
    if zero_column:
        Y = np.column_stack([Y, np.zeros(30)])
    assert approxifer_locate(code.beta, Y, 1).tolist() == [12]
