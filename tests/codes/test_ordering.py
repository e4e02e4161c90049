"""order_inputs: permutations that follow a 1-D curve through the inputs."""

import numpy as np
import pytest

from gencc.codes.ordering import METHODS, order_inputs


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


def reference_chain(X):
    """The chain ordering read off its definition, with no shortcut: a nearest-neighbour path from the input with
    the largest summed distance (ties: the lowest index), then first-improvement 2-opt passes on the open path
    (reverse p[i..j] when the two edges it replaces sum to more than the two it makes, plus 1e-12; at most 50
    passes), the result starting at its smaller end."""
    from scipy.spatial.distance import cdist

    A = np.asarray(X, dtype=float).reshape(len(X), -1)
    D = cdist(A, A)
    K = len(D)
    path = [int(np.argmax(D.sum(axis=1)))]
    while len(path) < K:
        path.append(min((k for k in range(K) if k not in path), key=lambda k: (D[path[-1], k], k)))

    def edge(p, a, b):  # an end of the open path has no edge: length 0
        return D[p[a], p[b]] if 0 <= a and b < K else 0.0

    for _ in range(50):
        improved = False
        for i in range(K - 1):
            for j in range(i + 1, K):
                if edge(path, i - 1, j) + edge(path, i, j + 1) < edge(path, i - 1, i) + edge(path, j, j + 1) - 1e-12:
                    path[i : j + 1] = path[i : j + 1][::-1]
                    improved = True
        if not improved:
            break
    return np.array(path[::-1] if path[0] > path[-1] else path)


@pytest.mark.parametrize("K", [5, 30, 63, 64, 65, 120])
@pytest.mark.parametrize("kind", ["gaussian", "ties", "curve"])
def test_chain_follows_its_definition(K, kind):
    """Below and from 64 inputs (plain floats, then numpy) the chain is the reference's path, move for move:
    equal distances (inputs on a small grid, duplicates) included."""
    rng = np.random.default_rng(K)
    if kind == "gaussian":
        X = rng.normal(size=(K, 6))
    elif kind == "ties":
        X = rng.integers(0, 3, size=(K, 2)).astype(float)
    else:
        X = curve(K)[rng.permutation(K)] + 0.05 * rng.normal(size=(K, 5))
    np.testing.assert_array_equal(order_inputs(X), reference_chain(X))


@pytest.mark.parametrize("walk", [False, True])
def test_chain_follows_its_definition_at_many_inputs(walk):
    """At K = 300 numpy's scan looks at blocks of 13 rows, then 26, 52, ...: moves lie just past block ends."""
    rng = np.random.default_rng(7 if walk else 0)
    X = np.cumsum(rng.normal(size=(300, 4)), axis=0) if walk else rng.normal(size=(300, 8))
    np.testing.assert_array_equal(order_inputs(X), reference_chain(X))


@pytest.mark.parametrize("K", [64, 100])
def test_chain_on_integer_pixels_is_exact_from_the_gram_form(K):
    """From 64 inputs of 256 columns the distances come from a Gram product; on integer-valued inputs (raw pixels, with
    duplicates and many equal distances) every sum is exact, so the path is the reference's, ties included."""
    from scipy.spatial.distance import cdist

    from gencc.codes.ordering import GRAM_D, WIDE_K, _gram_distances

    rng = np.random.default_rng(K)
    X = rng.integers(0, 256, size=(K, 1, 16, 20)).astype(float)  # 320 columns
    X[1::7] = X[0]  # duplicates: distance 0 to row 0, equal distances to everyone else
    X[:, :, :8] = rng.integers(0, 2, size=(K, 1, 8, 20)) * 255.0  # a binary half: many near-equal rows
    A = X.reshape(K, -1)
    assert A.shape[1] >= GRAM_D and K >= WIDE_K
    np.testing.assert_array_equal(_gram_distances(A), cdist(A, A))
    np.testing.assert_array_equal(order_inputs(X), reference_chain(X))


def test_gram_distances_agree_with_scipy_on_offset_inputs():
    """Rows far from the origin (a common offset of 1e4, and columns of very different scales): the mean shift
    keeps the Gram form's error at rounding; the path on gaussian inputs is the reference's."""
    from scipy.spatial.distance import cdist

    from gencc.codes.ordering import _gram_distances

    rng = np.random.default_rng(3)
    A = 1e4 + rng.normal(size=(90, 400)) * np.geomspace(1e-3, 10, 400)
    D = _gram_distances(A)
    E = cdist(A, A)
    assert np.array_equal(D, D.T) and np.all(np.diag(D) == 0)
    np.testing.assert_allclose(D, E, rtol=1e-10, atol=1e-10 * E.max())
    X = rng.normal(size=(100, 512))
    np.testing.assert_array_equal(order_inputs(X), reference_chain(X))


def test_gram_form_overflow_falls_back_to_exact_distances():
    """Squared norms past the float range: the Gram form gives up and the chain takes pdist's distances."""
    from gencc.codes.ordering import _gram_distances

    X = np.random.default_rng(4).normal(size=(70, 300)) * 1e160
    assert _gram_distances(X) is None
    np.testing.assert_array_equal(order_inputs(X), reference_chain(X))
