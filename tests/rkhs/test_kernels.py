"""Kernels: closed forms, symmetry, positive semi-definiteness, Bernoulli polynomials, bad names."""

import numpy as np
import pytest
import sympy

from gencc.rkhs import kernels
from gencc.rkhs.kernels import KERNELS, _scaled_bernoulli, get_kernel

RNG = np.random.default_rng(0)
PTS = np.sort(np.concatenate([RNG.uniform(-1, 1, 30), [-1.0, 1.0]]))


@pytest.mark.parametrize("name", KERNELS)
def test_symmetric(name):
    k = get_kernel(name)
    G = k(PTS, PTS)
    assert G.shape == (PTS.size, PTS.size)
    np.testing.assert_allclose(G, G.T, rtol=1e-12, atol=1e-12)
    s, t = RNG.uniform(-1, 1, 7), RNG.uniform(-1, 1, 5)
    np.testing.assert_allclose(k(s, t), k(t, s).T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", KERNELS)
def test_positive_semidefinite(name):
    G = get_kernel(name)(PTS, PTS)
    ev = np.linalg.eigvalsh((G + G.T) / 2)
    assert ev.min() >= -1e-10 * max(1.0, ev.max())


def test_cubic_closed_form():
    s, t = RNG.uniform(-1, 1, 9), RNG.uniform(-1, 1, 11)
    a, b = (s + 1) / 2, (t + 1) / 2
    expected = np.empty((s.size, t.size))
    for i in range(s.size):
        for j in range(t.size):
            lo, hi = min(a[i], b[j]), max(a[i], b[j])
            expected[i, j] = 8 * lo**2 * (3 * hi - lo) / 6
    np.testing.assert_allclose(kernels.CubicSpline()(s, t), expected, rtol=1e-14, atol=1e-15)
    assert get_kernel("cubic").is_cubic_spline and get_kernel("sobolev2").is_cubic_spline
    assert not get_kernel("sobolev3").is_cubic_spline and not get_kernel("matern32").is_cubic_spline


@pytest.mark.parametrize("r", range(0, 9))
def test_scaled_bernoulli_vs_sympy(r):
    x = np.linspace(0, 1, 13)
    X = sympy.Symbol("x")
    poly = sympy.lambdify(X, sympy.bernoulli(r, X) / sympy.factorial(r), "numpy")
    np.testing.assert_allclose(_scaled_bernoulli(r, x), np.broadcast_to(poly(x), x.shape), rtol=1e-12, atol=1e-14)


def test_scaled_bernoulli_closed_forms():
    x = np.linspace(0, 1, 17)
    np.testing.assert_allclose(_scaled_bernoulli(1, x), x - 0.5, atol=1e-15)
    np.testing.assert_allclose(_scaled_bernoulli(2, x), (x**2 - x + 1 / 6) / 2, atol=1e-15)
    np.testing.assert_allclose(_scaled_bernoulli(3, x), (x**3 - 1.5 * x**2 + 0.5 * x) / 6, atol=1e-15)
    np.testing.assert_allclose(_scaled_bernoulli(4, x), (x**4 - 2 * x**3 + x**2 - 1 / 30) / 24, atol=1e-15)
    # B_n(x + 1) - B_n(x) = n x^(n-1), i.e. k_n(x + 1) - k_n(x) = x^(n-1) / (n-1)!
    from math import factorial

    for n in range(1, 9):
        np.testing.assert_allclose(_scaled_bernoulli(n, x + 1) - _scaled_bernoulli(n, x),
                                   x ** (n - 1) / factorial(n - 1), atol=1e-12)


def test_sobolev2_matches_gu_formula():
    # Gu (Smoothing Spline ANOVA): R(s, t) = k2(s) k2(t) - k4(|s - t|) on [0, 1], scaled by 2^3 to [-1, 1]
    s, t = RNG.uniform(-1, 1, 6), RNG.uniform(-1, 1, 8)
    a, b = (s[:, None] + 1) / 2, (t[None, :] + 1) / 2

    def k2(x):
        return (x**2 - x + 1 / 6) / 2

    def k4(x):
        return (x**4 - 2 * x**3 + x**2 - 1 / 30) / 24

    expected = 8 * (k2(a) * k2(b) - k4(np.abs(a - b)))
    np.testing.assert_allclose(kernels.Sobolev(2)(s, t), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_sobolev_null_space_is_legendre(m):
    k = kernels.Sobolev(m)
    assert k.q == m
    T = k.null_space(PTS)
    assert T.shape == (PTS.size, m)
    np.testing.assert_allclose(T[:, 0], 1.0)
    if m > 1:
        np.testing.assert_allclose(T[:, 1], PTS)
    if m > 2:
        np.testing.assert_allclose(T[:, 2], (3 * PTS**2 - 1) / 2)


def test_stationary_profiles_closed_form():
    s, t = np.array([0.0, 0.2]), np.array([0.0, -0.4, 0.9])
    r = np.abs(s[:, None] - t[None, :]) / 0.3
    np.testing.assert_allclose(get_kernel("matern32")(s, t), (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r))
    np.testing.assert_allclose(get_kernel("matern52")(s, t),
                               (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r))
    np.testing.assert_allclose(get_kernel("gaussian")(s, t), np.exp(-(r**2) / 2))
    assert get_kernel("matern32").q == 2
    assert kernels.Matern32(null_degree=None).q == 0
    assert kernels.Matern32(null_degree=None).null_space(PTS).shape == (PTS.size, 0)


def test_get_kernel_passes_instances_through():
    k = kernels.Gaussian(0.5)
    assert get_kernel(k) is k


@pytest.mark.parametrize("name", ["cubicc", "sobolev5", "sobolev", "rbf", "", None, 3])
def test_unknown_kernel_raises(name):
    with pytest.raises(ValueError, match="unknown kernel"):
        get_kernel(name)


def test_bad_kernel_parameters_raise():
    with pytest.raises(ValueError, match="Sobolev order"):
        kernels.Sobolev(5)
    with pytest.raises(ValueError, match="length_scale"):
        kernels.Matern32(length_scale=0.0)
    with pytest.raises(ValueError, match="null_degree"):
        kernels.Gaussian(null_degree=-1)
