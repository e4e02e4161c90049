"""LCC: exact recovery of polynomial f from any (K - 1) deg + 1 results; Berlekamp-Welch error correction against
brute force."""

from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import LCC
from gencc.rkhs.points import chebyshev1


def poly2(x):
    return 0.5 * x**2 - x + 2.0


def poly3(x):
    return x**3 - 0.3 * x**2 + 1.0


@pytest.mark.parametrize("deg,f", [(1, lambda x: 3 * x - 1), (2, poly2), (3, poly3)])
@pytest.mark.parametrize("K", [3, 5])
def test_recovers_polynomial_from_any_threshold_subset(deg, f, K):
    N = (K - 1) * deg + 4
    code = LCC(K, N, degree=deg)
    assert code.min_results == (K - 1) * deg + 1
    X = np.random.default_rng(K + deg).normal(size=(K, 3, 2))
    Yall = f(code.encode(X))
    truth = f(X)
    rng = np.random.default_rng(0)
    for size in (code.min_results, code.min_results + 1, N):
        for _ in range(4):
            r = rng.choice(N, size=size, replace=False)
            Yhat = code.decode(Yall[r], r)
            rel = np.linalg.norm(Yhat - truth) / np.linalg.norm(truth)
            assert rel < 1e-6
            assert np.isfinite(code.condition_number(r))


def test_encoder_is_lagrange_interpolation():
    K, N = 5, 9
    code = LCC(K, N)
    np.testing.assert_allclose(code.alpha, chebyshev1(K))
    np.testing.assert_allclose(code.beta, chebyshev1(N))
    X = np.random.default_rng(0).normal(size=(K, 2))
    for c in range(2):
        coef = np.polyfit(code.alpha, X[:, c], K - 1)
        np.testing.assert_allclose(code.encode(X)[:, c], np.polyval(coef, code.beta), atol=1e-10)


def test_fewer_than_threshold_raises():
    code = LCC(4, 12, degree=3)  # threshold 10
    r = np.arange(9)
    with pytest.raises(ValueError, match="too few results to decode: lcc needs at least 10"):
        code.decode(np.ones((9, 2)), r)
    with pytest.raises(ValueError, match="at least 10"):
        code.condition_number(r)
    assert not code.can_decode(r) and code.can_decode(np.arange(10))


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match=r"needs N >= \(K-1\)\*degree\+1 = 9"):
        LCC(5, 8, degree=2)
    for deg in (0, 1.5, True):
        with pytest.raises(ValueError, match="degree must be a positive integer"):
            LCC(3, 10, degree=deg)


# ----- robust decoding: exact error correction ---------------------------------------------------------------
def brute_force_poly(t, Y, A, deg):
    """Reference: the degree-`deg` polynomial through n - A of the points that fits them exactly."""
    V = np.polynomial.chebyshev.chebvander(t, deg)
    for S in combinations(range(t.size), A):
        keep = np.setdiff1d(np.arange(t.size), S)
        coef = np.linalg.lstsq(V[keep], Y[keep], rcond=None)[0]
        if np.max(np.abs(V[keep] @ coef - Y[keep])) < 1e-8 * max(1, np.abs(Y).max()):
            return coef
    raise AssertionError("no consistent subset")


@pytest.mark.parametrize("A", [1, 2, 3])
def test_lcc_berlekamp_welch_recovers_degree2_exactly(A):
    K, deg = 4, 2
    rng = np.random.default_rng(A)
    C = rng.normal(size=(3, 3, 2))  # f(x) = quadratic form per output coordinate, x in R^3
    f = lambda x: np.einsum("...i,ijo,...j->...o", x, C, x) + x[..., :2]  # noqa: E731
    n = (K - 1) * deg + 1 + 2 * A
    code = LCC(K, n + 2, degree=deg)
    X = rng.normal(size=(K, 3))
    returned = np.sort(rng.choice(code.N, n, replace=False))
    Y = f(code.encode(X))[returned]
    bad = rng.choice(n, A, replace=False)
    Y[bad] += rng.normal(scale=5.0, size=(A, 2))
    Yhat, flagged = code.robust_decode(Y, returned, adversaries=A)
    np.testing.assert_array_equal(flagged, np.sort(returned[bad]))
    np.testing.assert_allclose(Yhat, f(X), atol=1e-7)
    # independent reference: the polynomial that brute force over subsets finds, evaluated at alpha
    coef = brute_force_poly(code.beta[returned], Y, A, (K - 1) * deg)
    np.testing.assert_allclose(Yhat, np.polynomial.chebyshev.chebvander(code.alpha, (K - 1) * deg) @ coef,
                               atol=1e-7)


def test_lcc_fewer_errors_than_bound_and_too_few_results():
    code = LCC(4, 14, degree=2)
    X = np.random.default_rng(0).normal(size=(4, 2))
    Y = (code.encode(X) ** 2)
    ret = np.arange(11)  # threshold 7 + 2*2
    Yc = Y[ret].copy()
    Yc[5] += 3.0
    Yhat, flagged = code.robust_decode(Yc, ret, adversaries=2)
    assert flagged.tolist() == [5]
    np.testing.assert_allclose(Yhat, X**2, atol=1e-8)
    with pytest.raises(ValueError, match=r"\(K-1\)\*degree \+ 1 \+ 2\*adversaries = 13"):
        code.robust_decode(Y[np.arange(12)], np.arange(12), adversaries=3)


def test_lcc_more_errors_than_bound_is_an_error_not_silent():
    code = LCC(3, 11, degree=1)
    X = np.random.default_rng(1).normal(size=(3, 2))
    Y = code.encode(X).copy()
    Y[[1, 4, 7]] += np.array([[5.0, -3.0], [2.0, 4.0], [-6.0, 1.0]])
    with pytest.raises(ValueError, match="more than adversaries=1"):
        code.robust_decode(Y, np.arange(11), adversaries=1)


@settings(max_examples=20)
@given(st.permutations(list(range(13))), st.integers(0, 2**16))
def test_error_correction_ignores_the_order_of_returned(perm, seed):
    code = LCC(4, 15, degree=2)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(4, 2))
    returned = np.sort(rng.choice(15, 13, replace=False))
    Y = (code.encode(X) ** 2)[returned]
    bad = rng.choice(13, 2, replace=False)
    Y[bad] += rng.normal(scale=4.0, size=(2, 2))
    ref, ref_flag = code.robust_decode(Y, returned, adversaries=3)
    p = np.asarray(perm)
    got, flag = code.robust_decode(Y[p], returned[p], adversaries=3)
    np.testing.assert_array_equal(flag, ref_flag)
    np.testing.assert_array_equal(flag, np.sort(returned[bad]))
    np.testing.assert_allclose(got, ref, atol=1e-9)


def test_robust_min_results_is_the_error_correction_bound():
    from gencc.codes.robust import min_results

    code = LCC(4, 20, degree=2)  # threshold 7
    assert [min_results(code, A) for A in range(4)] == [7, 9, 11, 13]
