"""Straggler-set models, collection policies and the worst-case search (latency models: test_faults.py)."""

from itertools import combinations

import numpy as np
import pytest

import gencc
from gencc.faults.stragglers import (
    Bernoulli,
    FixedCount,
    first_returned,
    worst_case_returned,
)


@pytest.mark.parametrize("pattern", ["random", "block"])
@pytest.mark.parametrize("N,S", [(10, 0), (10, 3), (25, 13), (7, 6)])
def test_fixed_count_draws(pattern, N, S):
    rng = np.random.default_rng(0)
    for _ in range(50):
        r = FixedCount(S, pattern).draw(N, rng)
        assert r.size == N - S
        assert np.all(np.diff(r) > 0) and r.min(initial=0) >= 0 and r.max(initial=0) < N
        if pattern == "block" and S:
            st = np.setdiff1d(np.arange(N), r)
            assert np.all(np.diff(st) == 1)


def test_block_covers_edges_and_random_is_uniform():
    rng = np.random.default_rng(1)
    starts = {int(np.setdiff1d(np.arange(8), FixedCount(3, "block").draw(8, rng))[0]) for _ in range(300)}
    assert starts == set(range(6))
    counts = np.zeros(10)
    for _ in range(4000):
        counts[np.setdiff1d(np.arange(10), FixedCount(3).draw(10, rng))] += 1
    np.testing.assert_allclose(counts / 4000, 0.3, atol=0.04)


def test_bernoulli_empirical_rate():
    rng = np.random.default_rng(2)
    p, N, draws = 0.3, 50, 400
    kept = sum(Bernoulli(p).draw(N, rng).size for _ in range(draws))
    assert 1 - kept / (N * draws) == pytest.approx(p, abs=0.01)
    r = Bernoulli(p).draw(N, rng)
    assert np.all(np.diff(r) > 0)
    assert Bernoulli(0.0).draw(N, rng).size == N


def test_describe():
    assert FixedCount(3, "block").describe() == {"S": 3, "p": None, "pattern": "block"}
    assert Bernoulli(0.25).describe() == {"S": None, "p": 0.25, "pattern": "bernoulli"}


def test_bad_straggler_models_raise():
    with pytest.raises(ValueError, match="unknown straggler pattern"):
        FixedCount(2, "adversarial")
    for S in (-1, 1.5, True):
        with pytest.raises(ValueError, match="non-negative integer"):
            FixedCount(S)
    with pytest.raises(ValueError, match="need S < N"):
        FixedCount(5).draw(5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="need S < N"):
        FixedCount(6).check(5)
    with pytest.raises(ValueError, match="worst_case_returned"):
        FixedCount(1, "worst").draw(5, np.random.default_rng(0))
    for p in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            Bernoulli(p)


# ----- collection policies ------------------------------------------------------------------------------------
LAT = np.array([0.5, 0.1, 0.9, 0.3, 0.7, 0.2])


def test_first_returned_policies():
    np.testing.assert_array_equal(first_returned(LAT), np.arange(6))
    np.testing.assert_array_equal(first_returned(LAT, wait_for=3), [1, 3, 5])
    np.testing.assert_array_equal(first_returned(LAT, deadline=0.5), [0, 1, 3, 5])
    # both: whichever stops first
    np.testing.assert_array_equal(first_returned(LAT, wait_for=3, deadline=0.5), [1, 3, 5])
    np.testing.assert_array_equal(first_returned(LAT, wait_for=5, deadline=0.25), [1, 5])
    assert first_returned(LAT, deadline=0.05).size == 0
    np.testing.assert_array_equal(first_returned(LAT, wait_for=10), np.arange(6))


# ----- worst case ---------------------------------------------------------------------------------------------
def make_loss(N, seed):
    w = np.random.default_rng(seed).normal(size=(N, N))

    def loss(returned):
        m = np.zeros(N)
        m[returned] = 1.0
        return float(np.sin(m @ w @ m) + m @ w[:, 0])

    return loss


@pytest.mark.parametrize("N,S", [(6, 0), (6, 1), (7, 3), (8, 4), (9, 2)])
def test_worst_case_exact_equals_brute_force(N, S):
    loss = make_loss(N, seed=N + S)
    wc = worst_case_returned(loss, N, S)
    brute = max(loss(np.setdiff1d(np.arange(N), st)) for st in combinations(range(N), S))
    assert wc.exact
    assert wc.loss == pytest.approx(brute)
    assert wc.returned.size == N - S and wc.stragglers.size == S
    assert loss(wc.returned) == pytest.approx(wc.loss)
    np.testing.assert_array_equal(np.union1d(wc.returned, wc.stragglers), np.arange(N))


def test_worst_case_search_is_a_lower_bound_at_least_the_worst_block():
    N, S = 20, 5  # C(20, 5) = 15504 > exact_limit
    loss = make_loss(N, seed=0)
    wc = worst_case_returned(loss, N, S, exact_limit=1000)
    assert not wc.exact
    blocks = max(loss(np.setdiff1d(np.arange(N), np.arange(s, s + S))) for s in range(N - S + 1))
    assert wc.loss >= blocks
    assert wc.returned.size == N - S and wc.stragglers.size == S
    assert loss(wc.returned) == pytest.approx(wc.loss)


def test_worst_case_search_finds_planted_worst_set():
    N, S = 30, 3
    planted = {2, 17, 29}

    def loss(returned):
        st = set(range(N)) - set(returned.tolist())
        return len(st & planted)

    wc = worst_case_returned(loss, N, S, exact_limit=100)
    assert not wc.exact
    assert wc.loss == 3 and set(wc.stragglers.tolist()) == planted


def test_worst_case_s_too_large_raises():
    with pytest.raises(ValueError, match="need S < N"):
        worst_case_returned(lambda r: 0.0, 4, 4)


def test_collected_keeps_what_the_policy_keeps():
    model = gencc.Bimodal(p=0.3, factor=10.0, base=1.0)  # delays are exactly 1 (fast) or 10 (slow)
    lat = model.sample(40, np.random.default_rng(5))
    by_deadline = gencc.Collected(model, deadline=5.0).draw(40, np.random.default_rng(5))
    np.testing.assert_array_equal(by_deadline, np.flatnonzero(lat <= 5.0))
    first = gencc.Collected(model, wait_for=7).draw(40, np.random.default_rng(5))
    assert first.size == 7 and np.all(np.diff(first) > 0)
    assert lat[first].max() <= np.sort(lat)[6]


def test_collected_in_simulate_and_bad_input():
    K, N = 5, 12
    X = np.random.default_rng(0).normal(size=(K, 3))
    recs = gencc.simulate(lambda x: np.sin(x), X, gencc.GCC(K, N),
                          gencc.Collected(gencc.ShiftedExponential(0.01, 100.0), wait_for=9), trials=4)
    assert all(r["n_returned"] == 9 and r["decodable"] and r["wait_for"] == 9 for r in recs)
    assert recs[0]["pattern"] == "latency:ShiftedExponential"
    with pytest.raises(ValueError, match="LatencyModel"):
        gencc.Collected(0.5)
    with pytest.raises(ValueError, match="wait_for"):
        gencc.Collected(gencc.Pareto(), wait_for=0)
    with pytest.raises(ValueError, match="deadline"):
        gencc.Collected(gencc.Pareto(), deadline=-1.0)
    with pytest.raises(ValueError, match="exceeds"):
        gencc.simulate(np.sin, X, gencc.GCC(K, N), gencc.Collected(gencc.Pareto(), wait_for=N + 1))


@pytest.mark.parametrize("N,S", [(12, 3), (25, 6)])
def test_worst_case_search_evaluates_every_contiguous_block_first(N, S):
    """Every contiguous block of S workers by position, edges included, is a candidate before any swap: a loss
    that is high on one edge block only (no swap path leads to it) is found."""
    seen = []

    def loss(returned):
        st = tuple(np.setdiff1d(np.arange(N), returned).tolist())
        seen.append(st)
        return 1.0 if st == tuple(range(N - S, N)) else 0.0

    wc = worst_case_returned(loss, N, S, exact_limit=0)
    assert not wc.exact
    blocks = [tuple(range(s, s + S)) for s in range(N - S + 1)]
    assert seen[: len(blocks)] == blocks
    assert wc.loss == 1.0 and wc.stragglers.tolist() == list(range(N - S, N))


def test_worst_case_search_finds_the_brute_force_worst_of_a_code():
    """On GCC's decode of a model defined here, the search (no enumeration) reaches the brute-force worst set."""
    import gencc

    K, N, S = 6, 14, 4  # C(14, 4) = 1001: brute force is cheap
    rng = np.random.default_rng(3)
    W1, W2 = rng.normal(size=(3, 16)), rng.normal(size=(16, 2))

    def f(X):
        return np.tanh(np.asarray(X) @ W1) @ W2

    X = rng.normal(size=(K, 3))
    for code in (gencc.GCC(K, N), gencc.BACC(K, N)):
        Y_all, Y = f(code.encode(X)), f(X)

        def loss(returned, code=code, Y_all=Y_all, Y=Y):
            return gencc.metrics.rel_mse(code.decode(Y_all[returned], returned), Y)

        brute = max(loss(np.setdiff1d(np.arange(N), st)) for st in combinations(range(N), S))
        exact = worst_case_returned(loss, N, S)
        search = worst_case_returned(loss, N, S, exact_limit=0)
        assert exact.exact and exact.loss == pytest.approx(brute)
        assert not search.exact and search.loss == pytest.approx(brute)
