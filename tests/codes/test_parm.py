"""ParM: identity + group-sum encoder, parity recovery of one straggler per group, missing inputs otherwise."""

import itertools

import numpy as np
import pytest

from gencc import FixedCount, ParM, Replication, simulate
from gencc.runtime.simulate import apply_workers

A = np.random.default_rng(7).normal(size=(3, 6))


def linear(X):
    """A batched linear f: R^(2x3) -> R^3 (so F_P = f is an exact parity model)."""
    return np.asarray(X, dtype=float).reshape(len(X), -1) @ A.T


linear.batched = True


def test_layout_and_encoding_matrix():
    code = ParM(7, k=3)
    assert (code.K, code.N, code.k, code.groups) == (7, 10, 3, 3)
    E = code.encoding_matrix
    assert E.shape == (10, 7)
    np.testing.assert_array_equal(E[:7], np.eye(7))
    np.testing.assert_array_equal(E[7:], [[1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 1]])
    X = np.random.default_rng(0).normal(size=(7, 2, 3))
    Xt = code.encode(X)
    np.testing.assert_allclose(Xt[7], X[:3].sum(axis=0))
    np.testing.assert_allclose(Xt[9], X[6])
    assert ParM(10).N == 15 and ParM(10, k=5).N == 12 and ParM(1, k=1).N == 2
    assert len(code.alpha) == 7 and len(code.beta) == 10 and code.min_results == 0
    assert "k=3" in repr(code)


def test_worker_functions():
    parity = lambda X: X  # noqa: E731
    code = ParM(5, k=2, parity=parity)
    assert not code.uniform_workers
    assert [code.worker_function(linear, n) is parity for n in range(code.N)] == [False] * 5 + [True] * 3
    assert code.worker_function(linear, 0) is linear
    assert ParM(5).worker_function(linear, 6) is linear  # no parity model: parity workers run f
    assert Replication(2, 4).uniform_workers and Replication(2, 4).worker_function(linear, 3) is linear
    with pytest.raises(ValueError, match="worker index"):
        code.worker_function(linear, 8)


@pytest.mark.parametrize("K,k", [(6, 2), (7, 3), (5, 5), (4, 1)])
def test_one_straggler_per_group_is_recovered_exactly(K, k):
    code = ParM(K, k=k, parity=linear)
    X = np.random.default_rng(K * 10 + k).normal(size=(K, 2, 3))
    Y = apply_workers(linear, code.encode(X), code)
    truth = linear(X)
    rng = np.random.default_rng(1)
    for _ in range(10):
        # drop one random data worker in every group (the parity workers all return)
        lost = [rng.choice(code.group(g)) for g in range(code.groups)]
        r = np.setdiff1d(np.arange(code.N), lost)
        assert code.missing(r).size == 0 and code.can_decode(r)
        np.testing.assert_allclose(code.decode(Y[r], r), truth, atol=1e-12)
    r = np.arange(code.N)
    np.testing.assert_allclose(code.decode(Y[r], r), truth, atol=1e-12)


def test_recovery_uses_the_parity_output():
    code = ParM(4, k=2, parity=linear)
    r = np.array([0, 2, 3, 4, 5])  # input 1 straggled: estimate = Y[4] - Y[0]
    Y = np.array([[1.0], [2.0], [3.0], [10.0], [20.0]])
    np.testing.assert_allclose(code.decode(Y, r)[:, 0], [1.0, 9.0, 2.0, 3.0])
    D = code.decoding_matrix(r)
    np.testing.assert_array_equal(D[1], [-1, 0, 0, 1, 0])


def test_missing_when_two_of_a_group_or_the_parity_straggle():
    code = ParM(6, k=3, parity=linear)  # groups {0,1,2} {3,4,5}, parity workers 6, 7
    X = np.random.default_rng(3).normal(size=(6, 6))
    Y = apply_workers(linear, code.encode(X), code)
    r = np.array([0, 3, 5, 6, 7])  # 1 and 2 lost (two of group 0); 4 lost alone: recovered
    np.testing.assert_array_equal(code.missing(r), [1, 2])
    Yhat = code.decode(Y[r], r)
    np.testing.assert_array_equal(Yhat[[1, 2]], 0.0)
    np.testing.assert_allclose(Yhat[[0, 3, 4, 5]], linear(X)[[0, 3, 4, 5]], atol=1e-12)
    r = np.array([0, 1, 3, 4, 5, 6])  # 2 lost and group 1's parity lost: 2 still recovered via worker 6
    assert code.missing(r).size == 0
    r = np.array([0, 1, 3, 4, 5, 7])  # 2 lost with its own parity worker 6: missing
    np.testing.assert_array_equal(code.missing(r), [2])
    np.testing.assert_array_equal(code.missing([]), np.arange(6))
    assert code.decode(np.zeros((0, 3)), []).shape == (6, 3)


def test_decode_is_order_independent():
    code = ParM(7, k=2, parity=linear)
    X = np.random.default_rng(4).normal(size=(7, 6))
    Y = apply_workers(linear, code.encode(X), code)
    r = np.array([9, 0, 2, 3, 4, 5, 8, 10, 7])  # inputs 1 and 6 lost: 1 via worker 7, 6 via worker 10
    ref = code.decode(Y[r], r)
    np.testing.assert_allclose(ref, linear(X), atol=1e-12)
    for perm in itertools.islice(itertools.permutations(range(len(r))), 0, 200, 37):
        p = np.array(perm)
        np.testing.assert_allclose(code.decode(Y[r][p], r[p]), ref, atol=1e-12)


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    code = ParM(4, k=2)
    X = torch.randn(4, 2, 3, dtype=torch.float32)
    Xt = code.encode(X)
    assert isinstance(Xt, torch.Tensor) and Xt.dtype == torch.float32 and Xt.shape == (6, 2, 3)
    torch.testing.assert_close(Xt[5], X[2] + X[3])
    out = code.decode(Xt[[0, 2, 3, 4]], torch.tensor([0, 2, 3, 4]))
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, X)


@pytest.mark.parametrize("kwargs,match", [
    ({"K": 0}, "K must be a positive integer"),
    ({"K": 2.5}, "K must be a positive integer"),
    ({"K": True}, "K must be a positive integer"),
    ({"K": 4, "k": 0}, r"k \(inputs per parity group\)"),
    ({"K": 4, "k": 5}, r"in \[1, K=4\]"),
    ({"K": 4, "k": 2.0}, "k "),
    ({"K": 4, "k": 2, "parity": "model"}, "parity must be a callable"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ParM(**kwargs)


def test_bad_returned():
    code = ParM(4, k=2)
    with pytest.raises(ValueError, match="out-of-range"):
        code.decode(np.zeros((1, 2)), [6])
    with pytest.raises(ValueError, match="more than once"):
        code.missing([1, 1])
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode(np.zeros((2, 2)), [0])


def test_simulate_runs_parity_model_on_parity_workers():
    calls: list[int] = []

    def parity(X):
        calls.append(len(X))
        return linear(X)

    parity.batched = True
    X = np.random.default_rng(5).normal(size=(6, 2, 3))
    recs = simulate(linear, X, ParM(6, k=2, parity=parity), FixedCount(1, "random"), trials=10)
    assert calls == [3]  # the three parity workers, once, in one batch
    assert all(r["decodable"] and r["missing"] == 0 and r["rel_mse"] < 1e-25 for r in recs)
    # a parity model that is wrong shows up exactly when a data worker straggles
    bad = lambda X: linear(X) + 1.0  # noqa: E731
    bad.batched = True
    recs = simulate(linear, X, ParM(6, k=2, parity=bad), FixedCount(1, "block"), trials=20, seed=1)
    lost_data = [r for r in recs if r["rel_mse"] > 0]
    assert lost_data and all(r["mse"] == pytest.approx(3 / 18) for r in lost_data)


def test_simulate_rejects_mismatched_parity_shapes():
    parity = lambda X: linear(X)[:, :2]  # noqa: E731
    parity.batched = True
    with pytest.raises(ValueError, match="different output shapes"):
        simulate(linear, np.ones((4, 2, 3)), ParM(4, parity=parity), FixedCount(1, "random"))


# ----- packed parity queries: parity workers that receive their group's inputs stacked ----------------------
def test_parm_packed_recovers_like_an_exact_parity(exact_packed_parity, packed_f, X8):
    code = ParM(8, 4, parity=exact_packed_parity(4))
    Z = code.encode(X8)
    np.testing.assert_array_equal(Z[8], X8[:4])
    np.testing.assert_array_equal(Z[9], X8[4:])
    Y = apply_workers(packed_f, Z, code)
    for lost in range(8):
        ret = np.setdiff1d(np.arange(10), [lost])
        np.testing.assert_allclose(code.decode(Y[ret], ret), packed_f(X8), atol=1e-9)


def test_packed_needs_groups_of_exactly_k(exact_packed_parity):
    with pytest.raises(ValueError, match="k=2"):
        ParM(8, 4, parity=exact_packed_parity(2))
    with pytest.raises(ValueError, match="multiple"):
        ParM(9, 4, parity=exact_packed_parity(4))
