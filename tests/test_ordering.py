"""order_inputs: permutations that follow a 1-D curve through the inputs."""

import numpy as np
import pytest

from gencc.ordering import METHODS, order_inputs


def curve(K, seed=0):
    """K points along a smooth open curve in R^5 (a helix piece), in curve order."""
    s = np.linspace(0, 1, K)
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(3, 5))
    return np.stack([np.cos(2.5 * s), np.sin(2.5 * s), 2 * s], axis=1) @ A


def path_length(X, perm):
    Y = X[perm].reshape(len(perm), -1)
    return float(np.sum(np.linalg.norm(np.diff(Y, axis=0), axis=1)))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("K", [1, 2, 3, 10, 37])
def test_returns_a_permutation(method, K):
    X = np.random.default_rng(K).normal(size=(K, 2, 3))
    perm = order_inputs(X, method)
    assert perm.dtype == np.int64
    np.testing.assert_array_equal(np.sort(perm), np.arange(K))


@pytest.mark.parametrize("method", ["chain", "spectral", "pca"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_shuffled_curve_order(method, seed):
    K = 30
    X = curve(K, seed)
    shuffle = np.random.default_rng(seed + 10).permutation(K)
    perm = order_inputs(X[shuffle], method)
    recovered = shuffle[perm]  # curve positions in the returned order
    assert np.array_equal(recovered, np.arange(K)) or np.array_equal(recovered, np.arange(K)[::-1])


@pytest.mark.parametrize("seed", range(5))
def test_chain_shorter_than_identity(seed):
    X = np.random.default_rng(seed).normal(size=(25, 4))
    assert path_length(X, order_inputs(X, "chain")) <= path_length(X, np.arange(25))


def test_deterministic_and_starts_at_smaller_end():
    X = np.random.default_rng(3).normal(size=(15, 3))
    for method in METHODS:
        p = order_inputs(X, method)
        np.testing.assert_array_equal(p, order_inputs(X, method))
        assert p[0] < p[-1]


def test_torch_input():
    torch = pytest.importorskip("torch")
    X = curve(12)
    np.testing.assert_array_equal(order_inputs(torch.tensor(X)), order_inputs(X))


def test_bad_input_raises():
    with pytest.raises(ValueError, match="unknown ordering method"):
        order_inputs(np.zeros((4, 2)), "tsp")
    with pytest.raises(ValueError, match="non-finite"):
        order_inputs(np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(ValueError, match="shape"):
        order_inputs(np.float64(3.0))
