"""BACC against a direct implementation of Berrut's formula (docs/design.md section 4)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import BACC
from gencc.codes.berrut import berrut_weights
from gencc.rkhs.points import chebyshev1, chebyshev2


def berrut_direct(nodes, values, z):
    """u(z) = sum_j (-1)^j v_j / (z - a_j) / sum_j (-1)^j / (z - a_j), one z at a time, exact at nodes."""
    out = []
    for x in z:
        hit = np.flatnonzero(nodes == x)
        if hit.size:
            out.append(values[hit[0]])
            continue
        num, den = 0.0, 0.0
        for j, a in enumerate(nodes):
            w = (-1.0) ** j / (x - a)
            num, den = num + w * values[j], den + w
        out.append(num / den)
    return np.array(out)


def test_weights_match_direct_formula():
    a = np.sort(np.random.default_rng(0).uniform(-1, 1, 9))
    z = np.linspace(-1, 1, 57)
    v = np.random.default_rng(1).normal(size=9)
    np.testing.assert_allclose(berrut_weights(a, z) @ v, berrut_direct(a, v, z), rtol=1e-12, atol=1e-12)


def test_rows_sum_to_one_and_interpolate():
    a = chebyshev2(11)
    W = berrut_weights(a, np.linspace(-1.5, 1.5, 101))
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(berrut_weights(a, a), np.eye(11))
    # within the tolerance of a node: the unit row, no NaN
    W = berrut_weights(a, a + 1e-14)
    assert np.all(np.isfinite(W))
    np.testing.assert_array_equal(W, np.eye(11))


def test_bacc_matches_direct_formula_encode_and_decode():
    K, N = 7, 20
    code = BACC(K, N)
    np.testing.assert_allclose(code.alpha, chebyshev1(K))
    np.testing.assert_allclose(code.beta, chebyshev2(N))
    X = np.random.default_rng(2).normal(size=(K, 3))
    Xt = code.encode(X)
    for c in range(3):
        np.testing.assert_allclose(Xt[:, c], berrut_direct(code.alpha, X[:, c], code.beta), atol=1e-12)
    np.testing.assert_allclose(code.encoding_matrix.sum(axis=1), 1.0, atol=1e-12)
    r = np.array([0, 2, 3, 7, 8, 11, 15, 19])  # signs alternate over the sorted returned set, re-indexed
    Y = np.sin(Xt[r])
    Yhat = code.decode(Y, r)
    for c in range(3):
        np.testing.assert_allclose(Yhat[:, c], berrut_direct(code.beta[r], Y[:, c], code.alpha), atol=1e-12)
    D = code.decoding_matrix(r)
    np.testing.assert_allclose(D.sum(axis=1), 1.0, atol=1e-12)


def test_collisions_k12_n25_exact_with_all_workers():
    code = BACC(12, 25)  # every alpha (chebyshev1(12)) is a worker point of chebyshev2(25)
    X = np.random.default_rng(3).normal(size=(12, 4))
    Xt = code.encode(X)
    assert np.all(np.isfinite(code.encoding_matrix))
    on_alpha = [int(np.argmin(np.abs(code.beta - a))) for a in code.alpha]
    np.testing.assert_allclose(Xt[on_alpha], X, atol=1e-12)

    def f(x):
        return np.exp(x) * np.cos(3 * x)

    Yhat = code.decode(f(Xt), np.arange(25))
    assert np.all(np.isfinite(Yhat))
    np.testing.assert_allclose(Yhat, f(X), atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 25))
def test_property_decode_matches_direct_formula(seed, n):
    code = BACC(12, 25)
    rng = np.random.default_rng(seed)
    r = rng.choice(25, size=n, replace=False)
    Y = rng.normal(size=(n, 2))
    srt = np.argsort(r)
    Yhat = code.decode(Y, r)
    for c in range(2):
        ref = berrut_direct(code.beta[r[srt]], Y[srt, c], code.alpha)
        np.testing.assert_allclose(Yhat[:, c], ref, atol=1e-10)


def test_custom_points_and_errors():
    code = BACC(3, 5, alpha=[0.5, -0.5, 0.0], beta=np.linspace(-1, 1, 5))
    np.testing.assert_allclose(code.alpha, [-0.5, 0.0, 0.5])
    with pytest.raises(ValueError, match="K=3 alpha points"):
        BACC(3, 5, alpha=[0.0, 0.5])
    with pytest.raises(ValueError, match="sorted ascending and distinct"):
        berrut_weights(np.array([0.0, 0.0, 1.0]), np.array([0.3]))


# ----- robust decoding: Berrut's interpolant left out ---------------------------------------------------------
@settings(max_examples=25)
@given(st.lists(st.integers(0, 14), max_size=3, unique=True), st.integers(0, 2**16))
def test_loo_residuals_equal_refits_without_the_set(S, seed):
    """Property: with a set S left out, each remaining worker's residual is its result minus Berrut's
    interpolant through the others that remain (signs re-alternated over them); S's rows are zero."""
    from gencc.codes.berrut import berrut_loo_residuals

    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(-1, 1, 15))
    Y = rng.normal(size=(15, 2))
    got = berrut_loo_residuals(t, Y)([tuple(S), ()])
    assert got.shape == (2, 15, 2)
    keep = np.setdiff1d(np.arange(15), S)
    np.testing.assert_array_equal(got[0][list(S)], 0.0)
    for j in keep:
        rest = keep[keep != j]
        np.testing.assert_allclose(got[0][j], Y[j] - berrut_weights(t[rest], t[j:j + 1])[0] @ Y[rest], atol=1e-9)


def test_drop_is_the_misfit_of_the_set_to_the_rest():
    from gencc.codes.berrut import berrut_drop

    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(-1, 1, 12))
    Y = rng.normal(size=(12, 3))
    for s in ([1], [4], [2, 7], [0, 11]):
        s = np.asarray(s, dtype=np.int64)
        keep = np.setdiff1d(np.arange(12), s)
        ref = np.sum((Y[s] - berrut_weights(t[keep], t[s]) @ Y[keep]) ** 2)
        np.testing.assert_allclose(berrut_drop(t, Y)(s[None]), [ref], rtol=1e-12)
