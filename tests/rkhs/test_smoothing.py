"""Linear smoothers (docs/design.md section 3) against SciPy's splines, closed forms and brute force."""

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.interpolate import CubicSpline, make_smoothing_spline

from gencc.rkhs import smoothing
from gencc.rkhs.kernels import KERNELS, get_kernel
from gencc.rkhs.points import chebyshev1, chebyshev2
from gencc.rkhs.smoothing import select_lam, smoother_weights

SETTINGS = settings(max_examples=25, deadline=None)


def jittered(n, seed=0):
    """n points in [-1, 1]: equispaced with interior points moved by up to 0.3 of the spacing."""
    rng = np.random.default_rng(seed)
    t = np.linspace(-1.0, 1.0, n)
    if n > 2:
        h = 2.0 / (n - 1)
        t[1:-1] += rng.uniform(-0.3 * h, 0.3 * h, n - 2)
    return t


def data(t, seed=1):
    return np.sin(3 * t) + np.random.default_rng(seed).normal(0, 0.1, t.size)


def natural_spline_smoother(t, y, z, lam):
    """Brute-force reference for small n: minimise (1/n)|y - g|^2 + lam int g''^2 over natural cubic splines g
    with knots t, parametrised by their values g (penalty Gram built from SciPy's natural CubicSpline basis)."""
    n = t.size
    d2 = CubicSpline(t, np.eye(n), bc_type="natural").derivative(2)
    a, b = d2(t[:-1]), d2(t[1:])  # g'' is linear on each piece: (pieces, n)
    h = np.diff(t)[:, None, None]
    P = (h / 3 * (a[:, :, None] * a[:, None, :] + b[:, :, None] * b[:, None, :])
         + h / 6 * (a[:, :, None] * b[:, None, :] + b[:, :, None] * a[:, None, :])).sum(axis=0)
    g = np.linalg.solve(np.eye(n) + n * lam * P, y)
    return CubicSpline(t, g, bc_type="natural")(z)


# ----- the cubic smoothing spline against SciPy --------------------------------------------------------------
# SciPy's B-spline solve itself loses digits once n * lam is large (1.6e-8 at n = 50, lam = 100 against a
# 30-digit reference, where ours is exact to 1e-15), so SciPy is the reference up to n lam = 100 and the
# high-precision Reinsch solve below covers larger penalties.
CASES = [(n, lam) for n in (5, 6, 10, 17, 50, 200) for lam in (1e-7, 1e-5, 1e-3, 1e-1, 1.0, 100.0) if n * lam <= 100]


@pytest.mark.parametrize("method", ["dense", "banded"])
@pytest.mark.parametrize("kernel", ["cubic", "sobolev2"])
@pytest.mark.parametrize("n,lam", CASES)
def test_cubic_matches_make_smoothing_spline(n, lam, kernel, method):
    t = jittered(n, seed=n)
    y = data(t, seed=n + 1)
    z = np.concatenate([t, np.linspace(t[0], t[-1], 97)])  # scipy extrapolates with a cubic, we linearly
    ref = make_smoothing_spline(t, y, lam=n * lam)(z)
    got = smoother_weights(t, z, kernel, lam, method=method) @ y
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-8)


def reinsch_mp(t, y, lam, dps=30):
    """Fitted values of the cubic smoothing spline in 30-digit arithmetic (Green and Silverman's Reinsch form:
    g = y - n lam Q (R + n lam Q^T Q)^{-1} Q^T y), a reference independent of float64 conditioning."""
    with mp.workdps(dps):
        n = t.size
        h = [mp.mpf(t[i + 1]) - mp.mpf(t[i]) for i in range(n - 1)]
        Q, R = mp.zeros(n, n - 2), mp.zeros(n - 2, n - 2)
        for j in range(1, n - 1):
            Q[j - 1, j - 1], Q[j, j - 1], Q[j + 1, j - 1] = 1 / h[j - 1], -1 / h[j - 1] - 1 / h[j], 1 / h[j]
            R[j - 1, j - 1] = (h[j - 1] + h[j]) / 3
            if j < n - 2:
                R[j - 1, j] = R[j, j - 1] = h[j] / 6
        Y = mp.matrix([mp.mpf(float(v)) for v in y])
        a = n * mp.mpf(lam)
        g = Y - a * (Q * mp.lu_solve(R + a * Q.T * Q, Q.T * Y))
        return np.array([float(v) for v in g])


@pytest.mark.parametrize("method", ["dense", "banded"])
@pytest.mark.parametrize("n,lam", [(17, 100.0), (50, 1.0), (50, 100.0), (40, 1e4)])
def test_cubic_large_penalty_matches_high_precision(n, lam, method):
    t = jittered(n, seed=n)
    y = data(t, seed=n + 1)
    np.testing.assert_allclose(smoother_weights(t, t, "cubic", lam, method=method) @ y, reinsch_mp(t, y, lam),
                               atol=1e-10)


@pytest.mark.parametrize("method", ["dense", "banded"])
@pytest.mark.parametrize("kernel", ["cubic", "sobolev2"])
@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("lam", [1e-4, 1e-2, 1.0, 100.0])
def test_cubic_small_n_matches_brute_force(n, lam, kernel, method):
    t = jittered(n, seed=n) * 0.9
    y = data(t)
    z = np.linspace(t[0], t[-1], 41)
    ref = natural_spline_smoother(t, y, z, lam)
    np.testing.assert_allclose(smoother_weights(t, z, kernel, lam, method=method) @ y, ref, atol=1e-10)


@pytest.mark.parametrize("method", ["dense", "banded"])
@pytest.mark.parametrize("kernel", ["cubic", "sobolev2"])
@pytest.mark.parametrize("n", [3, 4, 5, 10, 17, 50, 200])
def test_cubic_lam0_matches_natural_cubic_spline(n, kernel, method):
    t = jittered(n, seed=n)
    y = data(t)
    z = np.linspace(t[0], t[-1], 151)
    ref = CubicSpline(t, y, bc_type="natural")(z)
    # the dense bordered solve loses digits as the kernel Gram matrix grows ill-conditioned (200 points)
    tol = 1e-10 if (method == "banded" or n <= 50) else 1e-7
    np.testing.assert_allclose(smoother_weights(t, z, kernel, 0.0, method=method) @ y, ref, atol=tol)


@pytest.mark.parametrize("method", ["dense", "banded"])
def test_cubic_extends_linearly_outside_the_points(method):
    t = chebyshev1(9)  # interior points: [-1, t_0) and (t_-1, 1] lie outside the hull
    y = data(t)
    cs = CubicSpline(t, y, bc_type="natural")
    z = np.array([-1.0, -0.999, 0.999, 1.0, 1.5, -2.0])
    end = np.where(z < 0, t[0], t[-1])
    ref = cs(end) + cs.derivative()(end) * (z - end)
    np.testing.assert_allclose(smoother_weights(t, z, "cubic", 0.0, method=method) @ y, ref, atol=1e-10)


@pytest.mark.parametrize("n", [5, 16, 40, 120])
@pytest.mark.parametrize("lam", [0.0, 1e-6, 1e-3, 1.0, 10.0])
def test_banded_equals_dense(n, lam):
    t = chebyshev2(n)
    z = np.linspace(-1.2, 1.2, 77)
    Wd = smoother_weights(t, z, "cubic", lam, method="dense")
    Wb = smoother_weights(t, z, "cubic", lam, method="banded")
    # relative to the largest weight (extrapolating to -1.2 from clustered points gives weights ~ 700). At
    # lam = 0 the dense bordered solve with the ill-conditioned Gram matrix of clustered points loses digits
    # (banded matches SciPy's CubicSpline to 1e-15, dense is off by 2e-5 at 120 Chebyshev points).
    tol = 1e-9 if (n <= 16 or lam >= 1e-3) else (1e-6 if n <= 40 else 1e-4)
    np.testing.assert_allclose(Wb, Wd, atol=tol * np.abs(Wb).max())


def test_banded_accepts_unsorted_points():
    t = jittered(30)
    perm = np.random.default_rng(3).permutation(30)
    z = np.linspace(-1, 1, 21)
    W = smoother_weights(t, z, "cubic", 1e-3, method="banded")
    np.testing.assert_allclose(smoother_weights(t[perm], z, "cubic", 1e-3, method="banded"), W[:, perm], atol=1e-12)


def test_lam_convention_penalty_over_minus_one_one():
    # docs/design.md section 3: lam multiplies int_{-1}^{1} u''^2. On s = (t + 1) / 2 in [0, 1] the same curve has
    # int_0^1 g''^2 ds = 8 int_{-1}^{1} u''^2 dt, so SciPy on [0, 1] needs lam_scipy = n lam / 8.
    n, lam = 25, 1e-3
    t = jittered(n)
    y = data(t)
    s = (t + 1) / 2
    ref = make_smoothing_spline(s, y, lam=n * lam / 8)(s)
    np.testing.assert_allclose(smoother_weights(t, t, "cubic", lam) @ y, ref, atol=1e-9)
    wrong = make_smoothing_spline(s, y, lam=n * lam)(s)
    assert np.max(np.abs(smoother_weights(t, t, "cubic", lam) @ y - wrong)) > 1e-4


# ----- null-space reproduction and interpolation ----------------------------------------------------------
@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("lam", [0.0, 1e-4, 1e-1, 10.0])
def test_sobolev_reproduces_polynomials_below_m(m, lam):
    t = chebyshev1(12)
    z = np.linspace(-1, 1, 33)
    W = smoother_weights(t, z, f"sobolev{m}", lam)
    for deg in range(m):
        c = np.random.default_rng(deg).normal(size=deg + 1)
        np.testing.assert_allclose(W @ np.polyval(c, t), np.polyval(c, z), atol=1e-8)


@pytest.mark.parametrize("kernel", ["cubic", "matern32", "matern52", "gaussian"])
@pytest.mark.parametrize("lam", [0.0, 1e-3, 1.0])
def test_linear_null_space_reproduced(kernel, lam):
    t = chebyshev2(15)
    z = np.linspace(-1, 1, 31)
    W = smoother_weights(t, z, kernel, lam, method="dense")
    np.testing.assert_allclose(W @ (2 - 3 * t), 2 - 3 * z, atol=1e-8)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-8)



@pytest.mark.parametrize("kernel,n", [(k, n) for k in KERNELS for n in (1, 2, 3, 6, 10) if n >= get_kernel(k).q])
def test_lam0_interpolates_every_kernel(kernel, n):
    t = jittered(n) * 0.95 if n > 1 else np.array([0.3])
    np.testing.assert_allclose(smoother_weights(t, t, kernel, 0.0), np.eye(n), atol=1e-8)


@pytest.mark.parametrize("kernel", ["cubic", "sobolev1", "sobolev3", "matern32", "matern52"])
def test_lam0_interpolates_at_24_chebyshev_points(kernel):
    t = chebyshev2(24)
    np.testing.assert_allclose(smoother_weights(t, t, kernel, 0.0, method="dense"), np.eye(24), atol=1e-8)


# ----- hypothesis properties ----------------------------------------------------------------------------
@st.composite
def point_sets(draw, min_n=3, max_n=14):
    """Distinct points in [-1, 1] with gaps of at least 2 / (30 max_n)."""
    gaps = draw(st.lists(st.floats(1 / 30, 1.0), min_size=min_n - 1, max_size=max_n - 1))
    x = np.concatenate([[0.0], np.cumsum(gaps)])
    x = x / x[-1]
    lo = draw(st.floats(-1.0, 0.0))
    hi = draw(st.floats(max(lo + 0.5, 0.0), 1.0))
    t = lo + (hi - lo) * x
    return np.array(draw(st.permutations(list(t))))


LAMS = st.sampled_from([0.0, 1e-6, 1e-3, 1e-1, 10.0])
SMALL_KERNELS = st.sampled_from(["cubic", "sobolev1", "sobolev2", "sobolev3", "matern32", "matern52"])


@SETTINGS
@given(t=point_sets(), lam=LAMS, kernel=SMALL_KERNELS, seed=st.integers(0, 2**16))
def test_property_linearity(t, lam, kernel, seed):
    rng = np.random.default_rng(seed)
    z = rng.uniform(-1, 1, 9)
    W = smoother_weights(t, z, kernel, lam)
    v, w = rng.normal(size=(t.size, 3)), rng.normal(size=(t.size, 3))
    a, b = rng.normal(size=2)
    np.testing.assert_allclose(W @ (a * v + b * w), a * (W @ v) + b * (W @ w), atol=1e-9)
    # the weights never look at the data: two fits through the same points share one W
    np.testing.assert_array_equal(W, smoother_weights(t, z, kernel, lam))


@SETTINGS
@given(t=point_sets(), kernel=SMALL_KERNELS)
def test_property_lam0_interpolates(t, kernel):
    np.testing.assert_allclose(smoother_weights(t, t, kernel, 0.0), np.eye(t.size), atol=1e-7)


@SETTINGS
@given(t=point_sets(min_n=5), lam=LAMS, m=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_property_reproduces_low_degree_polynomials(t, lam, m, seed):
    rng = np.random.default_rng(seed)
    z = rng.uniform(-1, 1, 11)
    c = rng.normal(size=m)  # degree m - 1
    W = smoother_weights(t, z, f"sobolev{m}", lam)
    np.testing.assert_allclose(W @ np.polyval(c, t), np.polyval(c, z), atol=1e-6 * max(1, np.abs(c).sum()))


@SETTINGS
@given(t=point_sets(), lam=LAMS, kernel=SMALL_KERNELS, seed=st.integers(0, 2**16))
def test_property_permuting_fit_points_permutes_columns(t, lam, kernel, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(t.size)
    z = rng.uniform(-1, 1, 7)
    W = smoother_weights(t, z, kernel, lam)
    # exact in exact arithmetic; the dense solve reorders its rounding (~1e-8 for 14 points at lam = 0), and
    # rounding scales with the weights, which reach ~40 when z extrapolates far beyond clustered points
    np.testing.assert_allclose(smoother_weights(t[perm], z, kernel, lam), W[:, perm],
                               atol=1e-7 * max(1.0, np.abs(W).max()))


# ----- lam selection ----------------------------------------------------------------------------------------
def truth(t):
    return np.sin(2 * np.pi * t) + 0.5 * t


@pytest.mark.parametrize("criterion", ["gcv", "loo"])
@pytest.mark.parametrize("kernel", ["cubic", "matern32"])
def test_select_lam_beats_interpolation_and_oversmoothing(criterion, kernel):
    n = 80
    t = jittered(n, seed=5)
    rng = np.random.default_rng(7)
    Y = truth(t)[:, None] + rng.normal(0, 0.2, (n, 2))
    lam = select_lam(t, Y, kernel, criterion)
    assert np.isfinite(lam) and lam > 0
    z = np.linspace(-1, 1, 301)

    def err(lam_):
        return np.mean((smoother_weights(t, z, kernel, lam_) @ Y - truth(z)[:, None]) ** 2)

    assert err(lam) < 0.5 * err(0.0)
    assert err(lam) < 0.5 * err(1e6)


def gcv_brute(t, Y, lam, kernel):
    n = t.size
    H = smoother_weights(t, t, kernel, lam)
    R = Y - H @ Y
    return (np.sum(R**2) / n) / (np.trace(np.eye(n) - H) / n) ** 2


def loo_brute(t, Y, lam, kernel):
    """Refit n times without point i. With (1/n) in the objective, dropping a point keeps the penalty weight
    n lam relative to the plain sum of squares only if the (n - 1)-point fit uses lam n / (n - 1)."""
    n = t.size
    errs = []
    for i in range(n):
        keep = np.arange(n) != i
        w = smoother_weights(t[keep], t[i : i + 1], kernel, lam * n / (n - 1), method="dense")
        errs.append((w @ Y[keep] - Y[i]) ** 2)
    return float(np.mean(errs))


@pytest.mark.parametrize("kernel", ["cubic", "matern32"])
def test_loo_shortcut_equals_refitting(kernel):
    n, lam = 25, 1e-3
    t = jittered(n, seed=2)
    Y = truth(t)[:, None] + np.random.default_rng(0).normal(0, 0.2, (n, 2))
    H = smoother_weights(t, t, kernel, lam, method="dense")
    shortcut = np.mean(((Y - H @ Y) / (1 - np.diag(H))[:, None]) ** 2)
    assert loo_brute(t, Y, lam, kernel) == pytest.approx(shortcut, rel=1e-7)


@pytest.mark.parametrize("criterion,brute", [("gcv", gcv_brute), ("loo", loo_brute)])
@pytest.mark.parametrize("kernel", ["cubic", "matern32"])
def test_select_lam_minimises_the_brute_force_criterion(criterion, brute, kernel):
    n = 25
    t = jittered(n, seed=3)
    Y = truth(t)[:, None] + np.random.default_rng(4).normal(0, 0.3, (n, 2))
    lam = select_lam(t, Y, kernel, criterion)
    chosen = brute(t, Y, lam, kernel)
    grid = 10.0 ** np.linspace(-9, 1, 41)
    best = min(brute(t, Y, g, kernel) for g in grid)
    assert chosen <= best * (1 + 1e-3)


def test_select_lam_degenerate_and_errors():
    assert select_lam(np.array([-0.5, 0.5]), np.ones(2), "cubic") == 0.0
    with pytest.raises(ValueError, match="unknown lam criterion"):
        select_lam(jittered(10), np.ones(10), "cubic", "aic")
    with pytest.raises(ValueError, match="limited to"):
        select_lam(np.linspace(-1, 1, smoothing.SELECT_MAX_POINTS + 1), np.ones(smoothing.SELECT_MAX_POINTS + 1))


# ----- bad input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lam", [-1e-3, float("nan"), float("inf"), "gcv"])
def test_bad_lam_raises(lam):
    with pytest.raises(ValueError, match="lam must be"):
        smoother_weights(jittered(6), jittered(3), "cubic", lam)


def test_bad_smoother_inputs_raise():
    t = jittered(6)
    with pytest.raises(ValueError, match="unknown smoother method"):
        smoother_weights(t, t, "cubic", 0.0, method="sparse")
    with pytest.raises(ValueError, match="banded path exists only"):
        smoother_weights(t, t, "gaussian", 0.0, method="banded")
    with pytest.raises(ValueError, match="distinct"):
        smoother_weights(np.array([0.0, 0.5, 0.5]), t, "cubic", 0.0)
    with pytest.raises(ValueError, match="distinct"):
        smoother_weights(np.array([0.0, 0.5, 0.5, 0.7] * 5), t, "cubic", 0.0, method="banded")
    with pytest.raises(ValueError, match="need at least 3 points"):
        smoother_weights(np.array([0.0, 0.5]), t, "sobolev3", 0.0)
    with pytest.raises(ValueError, match="unknown kernel"):
        smoother_weights(t, t, "spline", 0.0)


def test_auto_switches_to_banded_for_large_cubic_fits(monkeypatch):
    calls = []
    real = smoothing.cubic_spline_weights
    monkeypatch.setattr(smoothing, "cubic_spline_weights", lambda *a: calls.append(1) or real(*a))
    smoother_weights(jittered(smoothing.BANDED_THRESHOLD - 1), [0.0], "cubic")
    assert not calls
    smoother_weights(jittered(smoothing.BANDED_THRESHOLD), [0.0], "cubic")
    assert calls


@pytest.mark.parametrize("lam", [0.0, 1e-4, 1e-1])
def test_banded_blocks_of_rows_match_make_smoothing_spline(monkeypatch, lam):
    """The banded path solves a block of rows at a time: with tiny blocks (many of them, one row each and
    uneven ones), points outside the hull and on knots, the weights still give SciPy's smoothing spline."""
    rng = np.random.default_rng(4)
    n = 40
    t = np.sort(rng.uniform(-1, 1, n))
    z = np.concatenate([rng.uniform(-1.2, 1.2, 37), t[::7], [-1.2, 1.2]])
    y = np.sin(3 * t) + 0.1 * rng.normal(size=n)
    ref = make_smoothing_spline(t, y, lam=n * lam)(np.clip(z, t[0], t[-1]))
    inside = (z >= t[0]) & (z <= t[-1])
    W = smoother_weights(t, z, "cubic", lam, method="banded")
    for block in (n, 3 * n, 7 * n + 5):  # 1, 3 and 7 rows per block (the last one shorter)
        monkeypatch.setattr(smoothing, "_BLOCK_ENTRIES", block)
        Wb = smoother_weights(t, z, "cubic", lam, method="banded")
        np.testing.assert_allclose(Wb, W, rtol=0, atol=1e-14)
        np.testing.assert_allclose((Wb @ y)[inside], ref[inside], atol=1e-9)


@pytest.mark.parametrize("kernel", ["matern32", "gaussian", "sobolev3"])
def test_dense_weights_at_many_points_equal_the_direct_solve(monkeypatch, kernel):
    """At many evaluation points (an encoder) the dense path multiplies by the inverse's columns, a block of
    points at a time; it gives the direct solve's weights (to the system's conditioning) and reproduces the
    null space."""
    t = np.sort(np.random.default_rng(5).uniform(-1, 1, 12))
    z = np.linspace(-1, 1, 301)
    monkeypatch.setattr(smoothing, "MANY_POINTS_MIN", 0)  # 301 points count as many
    W = smoother_weights(t, z, kernel, 1e-6, method="dense")
    monkeypatch.setattr(smoothing, "MANY_POINTS", 10**9)  # the direct solve, z as right-hand sides
    Wd = smoother_weights(t, z, kernel, 1e-6, method="dense")
    np.testing.assert_allclose(W, Wd, atol=1e-8)
    monkeypatch.setattr(smoothing, "MANY_POINTS", 2)
    monkeypatch.setattr(smoothing, "_BLOCK_ENTRIES", 50)  # several points per block
    np.testing.assert_allclose(smoother_weights(t, z, kernel, 1e-6, method="dense"), W, atol=1e-12)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-8)


def test_dense_weights_at_few_points_keep_the_direct_solve():
    """Below MANY_POINTS_MIN evaluation points an encoder comes from the direct solve: its rows sum to one to
    rounding (the null space holds the constants)."""
    t = np.sort(np.random.default_rng(6).uniform(-1, 1, 10))
    z = np.linspace(-1, 1, 640)
    W = smoother_weights(t, z, "matern32", 0.0, method="dense")
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)
