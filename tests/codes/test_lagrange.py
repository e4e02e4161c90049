"""LCC: exact recovery of polynomial f from any (K - 1) deg + 1 results."""

import numpy as np
import pytest

from gencc import LCC
from gencc.points import chebyshev1


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
