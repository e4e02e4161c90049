"""The decoders' own uncertainty (posterior_var, signal_var, decode_uncertainty of SystematicGCC and GCC), checked
against brute-force Gaussian-process conditioning and generalised least squares."""

from __future__ import annotations

import numpy as np
import pytest

from gencc import GCC
from gencc.codes import SystematicGCC
from gencc.codes.systematic import reml_scale

BIG = 1e6  # prior variance of the trend coefficients: a flat prior in the limit


def brute_posterior_var(Kc, T, H, noise):
    """diag of Cov(c | y) for c = g + T d (g ~ N(0, Kc), d ~ N(0, BIG I)), y = H c + r, r ~ N(0, diag noise):
    plain Gaussian conditioning on the joint covariance."""
    Scc = Kc + BIG * T @ T.T
    Scy = Scc @ H.T
    Syy = H @ Scc @ H.T + np.diag(noise) + 1e-9 * np.eye(H.shape[0])
    return np.diag(Scc - Scy @ np.linalg.solve(Syy, Scy.T))


@pytest.mark.parametrize("lost", [[3], [0, 5], [7]])
@pytest.mark.parametrize("coded_lost", [[], [0]])
def test_sgcc_posterior_var_is_the_gp_posterior(lost, coded_lost):
    code = SystematicGCC(8, 12, rho=0.05)
    R = [int(code.systematic[k]) for k in range(8) if k not in lost] + \
        [int(n) for g, n in enumerate(code.coded) if g not in coded_lost]
    H = code.encoding_matrix[R]
    Kc, T = code.kernel(code.alpha, code.alpha), code.kernel.null_space(code.alpha)
    want = brute_posterior_var(Kc, T, H, code.rho * (code.group_size[R] > 0))
    got = code.posterior_var(R)
    assert got == pytest.approx(want, abs=1e-5)
    assert np.all(got[[k for k in range(8) if k not in lost]] == 0)
    assert np.all(got[lost] > 0)


@pytest.mark.parametrize("R", [[0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11], [1, 2, 3, 5, 6, 8, 9, 10], list(range(0, 12, 2))])
def test_gcc_posterior_var_is_the_kriging_variance(R):
    code = GCC(8, 12, decoder="interpolate")
    t, z = code.beta[R], code.alpha
    k = code.kernel
    # the latent u(alpha) given values at t, kernel covariance, flat-prior trend
    Kall = k(np.concatenate([z, t]), np.concatenate([z, t]))
    Tall = k.null_space(np.concatenate([z, t]))
    S = Kall + BIG * Tall @ Tall.T
    nz = z.size
    Szz, Szt, Stt = S[:nz, :nz], S[:nz, nz:], S[nz:, nz:] + 1e-9 * np.eye(t.size)
    want = np.diag(Szz - Szt @ np.linalg.solve(Stt, Szt.T))
    assert code.posterior_var(R) == pytest.approx(np.maximum(want, 0), abs=1e-5)


def test_reml_scale_is_the_gls_residual_variance():
    rng = np.random.default_rng(0)
    n, q, m = 9, 2, 3
    A = rng.normal(size=(n, n))
    C = A @ A.T + n * np.eye(n)
    B = rng.normal(size=(n, q))
    Y = rng.normal(size=(n, m))
    Ci = np.linalg.inv(C)
    bhat = np.linalg.solve(B.T @ Ci @ B, B.T @ Ci @ Y)  # generalised least squares, per column
    E = Y - B @ bhat
    want = np.trace(E.T @ Ci @ E) / ((n - q) * m)
    assert reml_scale(C, B, Y) == pytest.approx(want, rel=1e-9)
    assert reml_scale(C[:2, :2], B[:2], Y[:2]) == 0.0  # no freedom beyond the trend


def test_decode_uncertainty_scales_with_the_results_and_is_zero_where_exact():
    code = SystematicGCC(8, 12)
    rng = np.random.default_rng(1)
    R = [int(code.systematic[k]) for k in range(8) if k != 2] + [int(n) for n in code.coded]
    Y = rng.normal(size=(len(R), 10))
    sd = code.decode_uncertainty(Y, R)
    assert sd[2] > 0 and np.all(np.delete(sd, 2) == 0)
    assert code.decode_uncertainty(3 * Y, R) == pytest.approx(3 * sd)
    assert sd[2] == pytest.approx(np.sqrt(code.posterior_var(R)[2] * code.signal_var(Y, R)))
    g = GCC(8, 12, decoder="interpolate")
    Rg = [0, 1, 3, 4, 5, 6, 7, 8, 10, 11]
    sg = g.decode_uncertainty(rng.normal(size=(len(Rg), 4)), Rg)
    assert np.isfinite(sg).all() and (sg > 0).any()


def test_unknown_signal_variance_gives_infinite_uncertainty():
    code = SystematicGCC(8, 12)
    R = [int(code.systematic[0])]  # one result: nothing to estimate the signal variance from
    sd = code.decode_uncertainty(np.ones((1, 3)), R)
    assert sd[0] == 0 and np.all(np.isinf(sd[1:]))


@pytest.mark.parametrize("make", [lambda: SystematicGCC(8, 12, rho=0.05), lambda: GCC(K=8, N=12),
                                  lambda: GCC(K=8, N=12, lam_dec="gcv")], ids=["sgcc", "gcc-select", "gcc-gcv"])
def test_uncertainty_cached_per_pattern_equals_a_fresh_codes(make):
    """The pieces cached per straggler pattern (posterior variances, the REML form) give, for new results on a
    pattern seen before, what a code that never saw it computes (a data-dependent decoder may pick another D or
    lam for the new results; the cache must not hand back the old one's variances), and reml_scale itself."""
    rng = np.random.default_rng(3)
    code = make()
    for R in ([0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11], [11, 10, 9, 8, 7, 6, 5, 4, 3, 2]):
        b = code.beta[R][:, None]
        # linear results, then curved ones, then noise: GCC's low-redundancy decoder picks another D among them
        for Y in (b * rng.normal(size=6), np.sin(3 * b) * rng.normal(size=6), b + rng.normal(size=(len(R), 6)),
                  1e-3 * b**2, 50 * np.sign(b)):
            fresh = make()
            np.testing.assert_allclose(code.decode_uncertainty(Y, R), fresh.decode_uncertainty(Y, R), rtol=1e-12)
            np.testing.assert_allclose(code.posterior_var(R, *(() if isinstance(code, SystematicGCC) else (Y,))),
                                       fresh.posterior_var(R, *(() if isinstance(fresh, SystematicGCC) else (Y,))),
                                       rtol=1e-12, atol=1e-15)
            assert code.signal_var(Y, R) == pytest.approx(fresh.signal_var(Y, R), rel=1e-12)
