"""The Matern 3/2 state-space smoother against independent references: a 40-digit mpmath solve of the representer
system, the dense bordered solve, the transition's closed forms, and the null space reproduced exactly."""

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc.rkhs import matern_ssm
from gencc.rkhs.kernels import Gaussian, Matern32
from gencc.rkhs.matern_ssm import matern32_weights, transition
from gencc.rkhs.smoothing import MATERN_BANDED_THRESHOLD, smoother_weights


def _mp_weights(t, z, ell: float, q: int, lam: float) -> np.ndarray:
    """W from the bordered representer system [[K + n lam I, T], [T^T, 0]] in 40-digit arithmetic, with the
    Matern 3/2 kernel and the Legendre null space written out here (nothing from gencc)."""
    with mp.workdps(40):
        n, c = len(t), mp.sqrt(3) / mp.mpf(ell)

        def k(a, b):
            r = c * abs(mp.mpf(a) - mp.mpf(b))
            return (1 + r) * mp.exp(-r)

        def P(x):
            x = mp.mpf(x)
            return [mp.mpf(1), x, (3 * x**2 - 1) / 2][:q]

        M = mp.zeros(n + q, n + q)
        for i in range(n):
            for j in range(n):
                M[i, j] = k(t[i], t[j]) + (n * mp.mpf(lam) if i == j else 0)
            for a, v in enumerate(P(t[i])):
                M[i, n + a] = M[n + a, i] = v
        R = mp.zeros(n + q, len(z))
        for j, zz in enumerate(z):
            for i in range(n):
                R[i, j] = k(t[i], zz)
            for a, v in enumerate(P(zz)):
                R[n + a, j] = v
        S = mp.inverse(M) * R
        return np.array([[float(S[i, j]) for i in range(n)] for j in range(len(z))])


@pytest.mark.parametrize("null_degree", [None, 0, 1])
@pytest.mark.parametrize("lam", [0.0, 1e-5, 1e-2])
def test_equals_high_precision_reference(null_degree, lam):
    rng = np.random.default_rng(7)
    t = rng.uniform(-1, 1, 12)  # unsorted
    z = np.concatenate([rng.uniform(-1.4, 1.4, 8), t[[0, 5, 11]], [t.min(), t.max()]])  # off, on, at the ends
    q = 0 if null_degree is None else null_degree + 1
    W = matern32_weights(t, z, Matern32(0.3, null_degree=null_degree), lam)
    ref = _mp_weights(t, z, 0.3, q, lam)
    assert np.abs(W - ref).max() < 1e-9


def test_rows_at_fit_points_are_unit_rows_when_interpolating():
    rng = np.random.default_rng(1)
    t = rng.uniform(-1, 1, 30)
    W = matern32_weights(t, t[::-1], Matern32(0.3), 0.0)
    assert np.array_equal(W, np.eye(30)[::-1])


@pytest.mark.parametrize(("ell", "tol"), [(0.05, 1e-10), (0.3, 2e-8), (2.0, 1e-6)])
@pytest.mark.parametrize("lam", [0.0, 1e-6, 1e-3])
def test_equals_dense_solve(ell, tol, lam):
    rng = np.random.default_rng(3)
    t = rng.uniform(-1, 1, 60)
    z = np.concatenate([rng.uniform(-1.2, 1.2, 40), t[:10]])
    k = Matern32(ell, null_degree=1)
    Ws = smoother_weights(t, z, k, lam, method="banded")
    Wd = smoother_weights(t, z, k, lam, method="dense")
    y = np.sin(3 * t) + t**2  # (the weights themselves are ill-determined where cond K is large: compare fits)
    # (random points: a step of 5e-4 beside steps of 0.03; the trend's K^{-1} T then carries 1e-8 relative error
    # in the band path, 2e-10 in the dense one, against a 40-digit solve; more as the length scale grows)
    assert np.abs(Ws @ y - Wd @ y).max() < tol


def test_auto_takes_the_band_path_at_the_threshold_and_agrees_with_dense():
    from gencc.rkhs.points import chebyshev1, chebyshev2

    n = MATERN_BANDED_THRESHOLD
    t = chebyshev2(n)
    z = chebyshev1(n // 2)
    k = Matern32(0.3, null_degree=1)
    W = smoother_weights(t, z, k, 0.0)
    assert np.array_equal(W, matern32_weights(t, z, k, 0.0))
    y = np.cos(2 * t) + 0.3 * t
    assert np.abs(W @ y - smoother_weights(t, z, k, 0.0, method="dense") @ y).max() < 1e-9
    assert np.array_equal(smoother_weights(t[:20], z, k, 0.0), smoother_weights(t[:20], z, k, 0.0, method="dense"))


def test_banded_method_refuses_other_kernels():
    with pytest.raises(ValueError, match="cubic spline and Matern 3/2"):
        smoother_weights(np.linspace(-1, 1, 5), [0.1], Gaussian(), method="banded")
    assert not matern_ssm.applies(Gaussian())


def test_isolated_near_duplicate_falls_back_to_dense():
    t0 = np.linspace(-1, 1, 200)
    t = np.r_[t0, t0[100] + 1e-7]
    z = np.linspace(-0.99, 0.99, 9)
    k = Matern32(0.3)
    with pytest.raises(ValueError, match="apart"):
        matern32_weights(t, z, k)
    assert np.array_equal(smoother_weights(t, z, k), smoother_weights(t, z, k, method="dense"))


def test_transition_against_its_definition_and_a_series_reference():
    c = np.sqrt(3) / 0.3
    h = np.array([0.0, 1e-7, 1e-3, 0.05, 0.4, 3.0])
    A, Q = transition(h, c)
    F = np.array([[0.0, 1.0], [-c * c, -2 * c]])
    from scipy.linalg import expm

    P = np.diag([1.0, c * c])
    for j, hj in enumerate(h):
        assert np.allclose(A[j], expm(F * hj), rtol=1e-13, atol=1e-13)
        if hj >= 0.05:  # where P - A P A^T does not cancel
            assert np.allclose(Q[j], P - A[j] @ P @ A[j].T, rtol=1e-12, atol=1e-14)
    with mp.workdps(50):  # small steps: Q_11 = 1 - e^{-x} (1 + x + x^2/2), x = 2 c h, relative to 1e-14
        for j in (1, 2):
            x = 2 * mp.mpf(c) * mp.mpf(h[j])
            q11 = 1 - mp.exp(-x) * (1 + x + x**2 / 2)
            assert abs(Q[j, 0, 0] / float(q11) - 1) < 1e-13
    assert np.array_equal(Q[0], np.zeros((2, 2))) and np.array_equal(A[0], np.eye(2))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(3, 80),
    lam=st.sampled_from([0.0, 1e-7, 1e-3, 0.1]),
    ell=st.floats(0.05, 3.0),
)
def test_reproduces_the_null_space_exactly(seed, n, lam, ell):
    """The smoother is exact on its unpenalised linear trend: affine data come back affine at any points."""
    rng = np.random.default_rng(seed)
    t = rng.permutation(np.linspace(-1, 1, n) + rng.uniform(-0.3, 0.3, n) / n)
    z = rng.uniform(-1.5, 1.5, 17)
    W = matern32_weights(t, z, Matern32(ell, null_degree=1), lam)
    a, b = rng.normal(size=2)
    assert np.abs(W @ (a + b * t) - (a + b * z)).max() < 1e-8 * (1 + abs(a) + abs(b))


def test_gcc_cold_decode_takes_the_band_path_and_decodes_like_the_dense_solve(monkeypatch):
    """Through the public API: GCC's default kernel at 180 returned workers decodes a real f on the band path,
    and gives what the dense solve gives."""
    import gencc
    from gencc.rkhs import smoothing

    calls = []
    band = matern_ssm.matern32_weights
    monkeypatch.setattr(matern_ssm, "matern32_weights", lambda *a, **kw: calls.append(1) or band(*a, **kw))
    X = np.linspace(-2, 2, 100)[:, None] * np.array([1.0, -0.5])
    f = lambda x: np.sin(x) + 0.1 * x**2  # noqa: E731
    returned = np.sort(np.random.default_rng(2).choice(200, 180, replace=False))
    code = gencc.GCC(K=100, N=200)
    Y = f(code.encode(X))[returned]
    got = code.decode(Y, returned)
    assert calls
    monkeypatch.setattr(smoothing, "MATERN_BANDED_THRESHOLD", 10**9)
    n_band = len(calls)
    dense = gencc.GCC(K=100, N=200).decode(Y, returned)
    assert len(calls) == n_band and not np.array_equal(got, dense)  # a fresh solve, on the dense path
    assert np.abs(got - dense).max() < 1e-9
    assert np.abs(got - f(X)).max() < 0.05


@pytest.mark.parametrize(("null_degree", "n"), [(None, 1), (0, 1), (0, 2), (1, 2), (1, 3)])
@pytest.mark.parametrize("lam", [0.0, 0.01])
def test_smallest_fits_equal_the_dense_solve(null_degree, n, lam):
    t = np.array([0.4, -0.3, 0.8])[:n]
    z = np.array([-1.5, -0.2, 0.3, 0.9, 2.0])
    k = Matern32(0.3, null_degree=null_degree)
    assert np.abs(matern32_weights(t, z, k, lam) - smoother_weights(t, z, k, lam, method="dense")).max() < 1e-12
