"""Robust decoding: LCC's Berlekamp-Welch against brute force, GCC/BACC location of wrong results, invariants."""

from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import BACC, GCC, LCC, Replication
from gencc.codes import robust


def smooth_results(code, m=4, seed=0):
    """Every worker's result for a smooth f (tanh of a random linear map) of smooth coded inputs."""
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(code.K, 6)), axis=0) / 3  # neighbouring inputs similar
    W = rng.normal(size=(6, m)) / 2
    return np.tanh(code.encode(X) @ W), np.tanh(X @ W)


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


@pytest.mark.parametrize("make", [lambda: GCC(10, 40), lambda: BACC(10, 40), lambda: GCC(8, 30, kernel="cubic")])
@pytest.mark.parametrize("A", [1, 2, 3])
def test_clear_corruption_is_flagged_exactly(make, A):
    code = make()
    Y, _ = smooth_results(code, seed=A)
    rng = np.random.default_rng(10 + A)
    returned = np.sort(rng.choice(code.N, code.N - 2, replace=False))
    Yr = Y[returned].copy()
    bad = np.sort(rng.choice(returned.size, A, replace=False))
    Yr[bad] += 2.0 * Y.std() * np.sign(rng.normal(size=(A, Y.shape[1])))
    Yhat, flagged = code.robust_decode(Yr, returned, adversaries=A)
    np.testing.assert_array_equal(flagged, returned[bad])
    keep = np.setdiff1d(np.arange(returned.size), bad)
    np.testing.assert_allclose(Yhat, code.decode(Yr[keep], returned[keep]), atol=1e-12)


@pytest.mark.parametrize("N", [40, 80])
def test_two_adjacent_workers_lying_together_are_caught(N):
    """Two neighbours adding the same 1-sd offset predict each other well: often every LOO score stays under
    the threshold, and only the pair left out together shows them (robust.PAIR_TRIGGER)."""
    code = GCC(10, N)
    Y, _ = smooth_results(code, seed=0)
    returned = np.arange(N)
    G = robust.loo_matrix(code.beta, code.kernel_for(N), 0.0)
    quiet = 0
    for i in range(1, N - 2, 3):
        Yr = Y.copy()
        Yr[[i, i + 1]] += Y.std()
        loo = np.sqrt(np.mean((G @ Yr / np.diag(G)[:, None]) ** 2, axis=1)) / robust.robust_spread(Yr)
        quiet += loo.max() < robust.DEFAULT_THRESHOLD
        Yhat, flagged = code.robust_decode(Yr, returned, adversaries=2)
        np.testing.assert_array_equal(flagged, [i, i + 1])
        keep = np.setdiff1d(returned, [i, i + 1])
        np.testing.assert_allclose(Yhat, code.decode(Yr[keep], keep), atol=1e-12)
    assert quiet >= 3  # the case the pair trigger is for did occur
    assert code.robust_decode(Y, returned, adversaries=2)[1].size == 0
    assert code.robust_decode(Y, returned, adversaries=3)[1].size == 0


@settings(max_examples=30)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["gcc", "bacc", "lcc"]))
def test_no_adversaries_equals_decode(seed, kind):
    code = {"gcc": GCC(6, 20), "bacc": BACC(6, 20), "lcc": LCC(4, 20, degree=2)}[kind]
    rng = np.random.default_rng(seed)
    returned = np.sort(rng.choice(20, 17, replace=False))
    Y = rng.normal(size=(17, 3))
    Yhat, flagged = code.robust_decode(Y, returned, adversaries=0)
    assert flagged.size == 0
    np.testing.assert_allclose(Yhat, code.decode(Y, returned), atol=1e-12)


@settings(max_examples=20)
@given(st.permutations(list(range(36))), st.integers(0, 3))
def test_order_of_returned_does_not_matter(perm, bad_seed):
    code = GCC(10, 40)
    Y, _ = smooth_results(code, seed=5)
    returned = np.array([i for i in range(40) if i not in (3, 17, 30, 31)])
    Yr = Y[returned].copy()
    bad = np.random.default_rng(bad_seed).choice(36, 2, replace=False)
    Yr[bad] = -Yr[bad] + 1.0
    ref, ref_flag = code.robust_decode(Yr, returned, adversaries=2)
    p = np.asarray(perm)
    got, flag = code.robust_decode(Yr[p], returned[p], adversaries=2)
    np.testing.assert_array_equal(flag, ref_flag)
    np.testing.assert_allclose(got, ref, atol=1e-10)


def test_honest_smooth_results_flag_nobody():
    for code in (GCC(10, 40), GCC(10, 80), BACC(10, 80)):
        Y, _ = smooth_results(code, seed=2)
        _, flagged = code.robust_decode(Y, np.arange(code.N), adversaries=3)
        assert flagged.size == 0, (code, flagged)


def test_closed_form_loo_matches_refits():
    code = GCC(6, 15, lam_dec=1e-3)
    t = code.beta
    Y = np.random.default_rng(0).normal(size=(15, 2))
    G = robust.loo_matrix(t, code.kernel, 1e-3)
    loo = (G @ Y) / np.diag(G)[:, None]
    from gencc.smoothing import smoother_weights
    for i in (0, 7, 14):
        keep = np.setdiff1d(np.arange(15), [i])
        # lam multiplies the penalty with 1/n in front of the data term: the refit on n-1 points keeps n*lam
        pred = smoother_weights(t[keep], t[i:i + 1], code.kernel, 1e-3 * 15 / 14) @ Y[keep]
        np.testing.assert_allclose(loo[i], Y[i] - pred[0], atol=1e-8)
    # leaving a set out: the downdate equals the LOO residuals of the refit without it
    S = (4, 5)
    keep = np.setdiff1d(np.arange(15), S)
    G2 = robust.loo_matrix(t[keep], code.kernel, 1e-3 * 15 / 13)
    ref = (G2 @ Y[keep]) / np.sqrt(np.diag(G2) * np.diag(G)[keep])[:, None]
    got = robust.downdate_residuals(G, G @ Y)([S])[0][keep]
    np.testing.assert_allclose(got, ref, atol=1e-8)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_small_inverses_and_energy_drop_match_lapack(size):
    from gencc.codes import robust_gcc

    rng = np.random.default_rng(size)
    B = rng.normal(size=(50, size, size + 2))
    M = B @ B.transpose(0, 2, 1) * 10.0 ** rng.uniform(-3, 3, size=(50, 1, 1))  # SPD, scales apart
    np.testing.assert_allclose(robust_gcc.small_inv(M), np.linalg.inv(M), rtol=1e-8)
    code = GCC(10, 40)
    G = robust.loo_matrix(code.beta, code.kernel_for(40), 0.0)
    P = G @ rng.normal(size=(40, 3))
    S = np.array([rng.choice(40, size, replace=False) for _ in range(20)])
    ref = [np.trace(P[s].T @ np.linalg.solve(G[np.ix_(s, s)], P[s])) for s in S]
    np.testing.assert_allclose(robust_gcc.energy_drop(G, P)(S), ref, rtol=1e-8)


@pytest.mark.parametrize("S", [(), (3,), (10, 11), (0, 20, 39)])
def test_decoding_weights_downdate_equals_a_fresh_fit_without_S(S):
    """GCC's decode without S from the LOO factorization (a rank-|S| downdate) against a fresh dense solve."""
    from gencc.codes import robust_gcc
    from gencc.smoothing import smoother_weights

    code = GCC(10, 40)
    kernel = code.kernel_for(40)
    G, Wt = robust_gcc.loo_and_weights(code.beta, kernel, 0.0, code.alpha)
    np.testing.assert_allclose(Wt.T, smoother_weights(code.beta, code.alpha, kernel, 0.0), atol=1e-10)
    keep = np.setdiff1d(np.arange(40), S)
    ref = smoother_weights(code.beta[keep], code.alpha, kernel, 0.0)
    got = robust_gcc.downdate_weights(G, Wt, np.asarray(S, dtype=np.int64)).T
    np.testing.assert_allclose(got, ref, atol=1e-10)


def test_approxifer_removes_exactly_A_and_finds_a_gross_error():
    code = BACC(10, 40)
    Y, _ = smooth_results(code, seed=3)
    Yr = Y.copy()
    Yr[21] += 50 * Y.std()
    _, flagged = code.robust_decode(Yr, np.arange(40), adversaries=1, method="approxifer")
    assert flagged.tolist() == [21]
    _, flagged = code.robust_decode(Y, np.arange(40), adversaries=2, method="approxifer")
    assert flagged.size == 2


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    code = GCC(10, 40)
    Y, _ = smooth_results(code)
    Yhat, flagged = code.robust_decode(torch.tensor(Y, dtype=torch.float32), list(range(40)), adversaries=1)
    assert isinstance(Yhat, torch.Tensor) and Yhat.dtype == torch.float32 and flagged.size == 0


def test_bad_input_is_a_clear_error():
    code = GCC(10, 40)
    Y, _ = smooth_results(code)
    with pytest.raises(ValueError, match="needs at least"):
        code.robust_decode(Y[:5], np.arange(5), adversaries=3)
    with pytest.raises(ValueError, match="non-negative integer"):
        code.robust_decode(Y, np.arange(40), adversaries=-1)
    with pytest.raises(ValueError, match="BACC"):
        code.robust_decode(Y, np.arange(40), adversaries=1, method="approxifer")
    with pytest.raises(ValueError, match="unknown robust method"):
        code.robust_decode(Y, np.arange(40), adversaries=1, method="vote")
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.robust_decode(Y[:39], np.arange(40), adversaries=1)
    Yn = Y.copy()
    Yn[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        code.robust_decode(Yn, np.arange(40), adversaries=1)
    with pytest.raises(ValueError, match="GCC, BACC and LCC"):
        Replication(10, 40).robust_decode(np.zeros((40, 2)), np.arange(40), adversaries=1)
