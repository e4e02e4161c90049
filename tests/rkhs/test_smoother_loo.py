"""The RKHS smoother's leave-one-out algebra against refits: closed-form LOO residuals, downdates of residuals,
energy and decoding weights, the batched small inverses."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import GCC
from gencc.rkhs import smoother_loo
from gencc.rkhs.smoothing import smoother_weights


def test_closed_form_loo_matches_refits():
    code = GCC(6, 15, lam_dec=1e-3)
    t = code.beta
    Y = np.random.default_rng(0).normal(size=(15, 2))
    G = smoother_loo.loo_matrix(t, code.kernel, 1e-3)
    loo = (G @ Y) / np.diag(G)[:, None]
    for i in (0, 7, 14):
        keep = np.setdiff1d(np.arange(15), [i])
        # lam multiplies the penalty with 1/n in front of the data term: the refit on n-1 points keeps n*lam
        pred = smoother_weights(t[keep], t[i:i + 1], code.kernel, 1e-3 * 15 / 14) @ Y[keep]
        np.testing.assert_allclose(loo[i], Y[i] - pred[0], atol=1e-8)
    # leaving a set out: the downdate equals the LOO residuals of the refit without it
    S = (4, 5)
    keep = np.setdiff1d(np.arange(15), S)
    G2 = smoother_loo.loo_matrix(t[keep], code.kernel, 1e-3 * 15 / 13)
    ref = (G2 @ Y[keep]) / np.sqrt(np.diag(G2) * np.diag(G)[keep])[:, None]
    got = smoother_loo.downdate_residuals(G, G @ Y)([S])[0][keep]
    np.testing.assert_allclose(got, ref, atol=1e-8)


@settings(max_examples=25)
@given(st.lists(st.integers(0, 19), min_size=1, max_size=3, unique=True), st.integers(0, 2**16))
def test_downdated_residuals_equal_a_refit_without_any_set(S, seed):
    """Property: for every excluded set S (batched with another one), the Schur-complement residuals of the rest
    are those of the interpolant refitted without S, rescaled to the LOO standard deviations."""
    code = GCC(6, 20)
    kernel = code.kernel_for(20)
    Y = np.random.default_rng(seed).normal(size=(20, 3))
    G = smoother_loo.loo_matrix(code.beta, kernel, 0.0)
    keep = np.setdiff1d(np.arange(20), S)
    G2 = smoother_loo.loo_matrix(code.beta[keep], kernel, 0.0)
    ref = (G2 @ Y[keep]) / np.sqrt(np.diag(G2) * np.diag(G)[keep])[:, None]
    other = tuple(sorted((np.asarray(S) + 1) % 20))
    got = smoother_loo.downdate_residuals(G, G @ Y)([tuple(S), other])
    assert got.shape == (2, 20, 3)
    np.testing.assert_allclose(got[0][keep], ref, atol=1e-7)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_small_inverses_and_energy_drop_match_lapack(size):
    rng = np.random.default_rng(size)
    B = rng.normal(size=(50, size, size + 2))
    M = B @ B.transpose(0, 2, 1) * 10.0 ** rng.uniform(-3, 3, size=(50, 1, 1))  # SPD, scales apart
    np.testing.assert_allclose(smoother_loo.small_inv(M), np.linalg.inv(M), rtol=1e-8)
    code = GCC(10, 40)
    G = smoother_loo.loo_matrix(code.beta, code.kernel_for(40), 0.0)
    P = G @ rng.normal(size=(40, 3))
    S = np.array([rng.choice(40, size, replace=False) for _ in range(20)])
    ref = [np.trace(P[s].T @ np.linalg.solve(G[np.ix_(s, s)], P[s])) for s in S]
    np.testing.assert_allclose(smoother_loo.energy_drop(G, P)(S), ref, rtol=1e-8)


@pytest.mark.parametrize("S", [(), (3,), (10, 11), (0, 20, 39)])
def test_decoding_weights_downdate_equals_a_fresh_fit_without_S(S):
    """GCC's decode without S from the LOO factorization (a rank-|S| downdate) against a fresh dense solve."""
    code = GCC(10, 40)
    kernel = code.kernel_for(40)
    G, Wt = smoother_loo.loo_and_weights(code.beta, kernel, 0.0, code.alpha)
    np.testing.assert_allclose(Wt.T, smoother_weights(code.beta, code.alpha, kernel, 0.0), atol=1e-10)
    keep = np.setdiff1d(np.arange(40), S)
    ref = smoother_weights(code.beta[keep], code.alpha, kernel, 0.0)
    got = smoother_loo.downdate_weights(G, Wt, np.asarray(S, dtype=np.int64)).T
    np.testing.assert_allclose(got, ref, atol=1e-10)


def test_pair_and_adjacent_residuals_match_leaving_both_out():
    """pair_residuals / adjacent_pair_residuals: j predicted with its neighbour (and S) left out, against a
    refit without them, rescaled to j's LOO standard deviation."""
    code = GCC(6, 16)
    kernel = code.kernel_for(16)
    Y = np.random.default_rng(4).normal(size=(16, 2))
    G = smoother_loo.loo_matrix(code.beta, kernel, 0.0)
    P = G @ Y
    adj = smoother_loo.adjacent_pair_residuals(G, P)()
    assert adj.shape == (15,)
    pairs = smoother_loo.pair_residuals(G, P)((7,))
    assert pairs[7] == 0.0
    for i in (2, 9):
        vals = []
        for j in (i, i + 1):
            rest = np.setdiff1d(np.arange(16), [i, i + 1])
            pred = smoother_weights(code.beta[rest], code.beta[j:j + 1], kernel, 0.0) @ Y[rest]
            inv = np.linalg.inv(G[np.ix_([i, i + 1], [i, i + 1])])
            sd = np.sqrt(abs(inv[j - i, j - i]) * G[j, j])
            vals.append(np.sqrt(np.mean((Y[j] - pred[0]) ** 2)) / sd)
        np.testing.assert_allclose(adj[i], min(vals), rtol=1e-6)
