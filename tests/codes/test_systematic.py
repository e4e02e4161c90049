"""SystematicGCC: the kriging decoder against a brute-force Gaussian posterior, exactness, ParM at one loss."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gencc
from gencc import FixedCount, SystematicGCC, simulate
from gencc.codes.systematic import kriging_decoder
from gencc.runtime.simulate import apply_workers

RNG = np.random.default_rng(3)
A = RNG.normal(size=(4, 6))


def nonlinear(X):
    """Batched f: R^6 -> R^4, smooth and far from linear."""
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    return np.tanh(X @ A.T) + 0.3 * (X**2) @ A.T


nonlinear.batched = True


def linear(X):
    return np.asarray(X, dtype=float).reshape(len(X), -1) @ A.T


linear.batched = True


def brute_posterior(code: gencc.SystematicGCC, returned: np.ndarray) -> np.ndarray:
    """Posterior mean map of c | y as a plain Gaussian conditional, the flat trend prior approximated by a
    very wide proper one (variance 1e6)."""
    E = code.encoding_matrix[returned]
    Kc = code.kernel(code.alpha, code.alpha)
    T = code.kernel.null_space(code.alpha)
    P = Kc + 1e6 * T @ T.T  # prior covariance of c
    R = np.diag(code.rho * (code.group_size[returned] > 0))
    return P @ E.T @ np.linalg.inv(E @ P @ E.T + R)


@settings(max_examples=30, deadline=None)
@given(K=st.integers(3, 12), extra=st.integers(1, 12), lost=st.integers(0, 3), seed=st.integers(0, 10**6),
       rho=st.sampled_from([1e-3, 1e-2, 0.3]))
def test_decoder_equals_brute_force_gaussian_posterior(K, extra, lost, seed, rho):
    N = min(K + extra, 2 * K)
    code = gencc.SystematicGCC(K, N, rho=rho)
    rng = np.random.default_rng(seed)
    returned = np.sort(rng.choice(N, size=max(N - lost, 2), replace=False))
    D = code.decoding_matrix(returned)
    assert D.shape == (K, returned.size)
    np.testing.assert_allclose(D, brute_posterior(code, returned), atol=2e-5)


def test_exact_where_the_own_worker_answered():
    code = gencc.SystematicGCC(10, 15)
    X = RNG.normal(size=(10, 6))
    Y = nonlinear(code.encode(X))
    truth = nonlinear(X)
    for lost in ([], [code.coded[0]], [code.systematic[3]], [code.systematic[3], code.coded[4]]):
        ret = np.setdiff1d(np.arange(15), lost)
        est = code.decode(Y[ret], ret)
        own = np.isin(code.systematic, ret)
        np.testing.assert_allclose(est[own], truth[own], atol=1e-9)


def test_linear_f_is_reproduced_when_the_coded_rows_determine_it():
    """f linear: y = E f(X) exactly, so while E_F has full column rank the decode tends to f(X) as rho -> 0."""
    code = gencc.SystematicGCC(8, 10, rho=1e-10)
    X = RNG.normal(size=(8, 6))
    Y, truth = linear(code.encode(X)), linear(X)
    for n in code.systematic:  # any one systematic loss: its group's coded worker determines it
        ret = np.setdiff1d(np.arange(10), [n])
        np.testing.assert_allclose(code.decode(Y[ret], ret), truth, atol=2e-5)
    g0 = code.groups[0]  # two losses in different groups are determined too
    ret = np.setdiff1d(np.arange(10), [code.systematic[g0[0]], code.systematic[code.groups[1][-1]]])
    np.testing.assert_allclose(code.decode(Y[ret], ret), truth, atol=2e-5)


class Parity:
    """A deliberately inexact parity model for sums of inputs (any callable works)."""

    batched = True

    def __call__(self, X):
        return nonlinear(X) + 0.1


def test_with_parity_one_loss_per_group_matches_parm():
    P = Parity()
    K, N, k = 10, 15, 2
    sg = gencc.SystematicGCC(K, N, rho=1e-10, parity=P)
    pm = gencc.ParM(K, k, parity=P)
    X = RNG.normal(size=(K, 6))
    Ys = gencc.simulate.__globals__["apply_workers"](nonlinear, sg.encode(X), sg)
    Yp = gencc.simulate.__globals__["apply_workers"](nonlinear, pm.encode(X), pm)
    for i in range(K):
        rs = np.setdiff1d(np.arange(N), [sg.systematic[i]])
        rp = np.setdiff1d(np.arange(N), [i])
        np.testing.assert_allclose(sg.decode(Ys[rs], rs), pm.decode(Yp[rp], rp), atol=1e-5)


def test_coded_workers_run_the_scaled_parity_model():
    P = Parity()
    code = gencc.SystematicGCC(8, 10, parity=P)
    assert not code.uniform_workers
    assert code.worker_function(nonlinear, int(code.systematic[0])) is nonlinear
    g = code.worker_function(nonlinear, int(code.coded[0]))
    assert g.batched
    Z = RNG.normal(size=(3, 6))
    np.testing.assert_allclose(g(Z), P(4 * Z) / 4)
    with pytest.raises(ValueError, match="worker index"):
        code.worker_function(nonlinear, 10)
    # coded workers of one group size share one callable (so they are applied together), also in a copy
    assert code.worker_function(nonlinear, int(code.coded[1])) is g
    uneven = gencc.SystematicGCC(7, 9, parity=P)  # groups of 4 and 3
    fns = {id(uneven.worker_function(nonlinear, int(n))) for n in uneven.coded}
    assert len(fns) == 2
    copy = pickle.loads(pickle.dumps(code))
    assert copy.worker_function(nonlinear, int(copy.coded[0])) is copy.worker_function(nonlinear, int(copy.coded[1]))


def test_calibrate_rho_matches_a_direct_computation():
    code = gencc.SystematicGCC(8, 10)
    sets = [RNG.normal(size=(8, 6)) for _ in range(5)]
    rho = gencc.calibrate_rho(code, nonlinear, sets)
    Kc, T = code.kernel(code.alpha, code.alpha), code.kernel.null_space(code.alpha)
    Ki = np.linalg.inv(Kc)
    res, sig = [], []
    for X in sets:
        c = nonlinear(X)
        y = nonlinear(code.encode(X))[code.coded]
        res.append(np.mean((y - code.encoding_matrix[code.coded] @ c) ** 2))
        d = np.linalg.solve(T.T @ Ki @ T, T.T @ Ki @ c)  # generalised least squares trend
        e = c - T @ d
        sig.append(np.trace(e.T @ Ki @ e) / ((8 - T.shape[1]) * c.shape[1]))
    assert rho == pytest.approx(np.mean(res) / np.mean(sig), rel=1e-8)
    assert gencc.calibrate_rho(code, linear, sets) < 1e-20  # no residual for linear f


@settings(max_examples=40, deadline=None)
@given(K=st.integers(2, 30), extra=st.integers(0, 30))
def test_worker_points_sorted_distinct_in_range(K, extra):
    N = K + min(extra, K)
    code = gencc.SystematicGCC(K, N)
    assert code.beta.size == N and np.all(np.diff(code.beta) > 0)
    assert code.beta.min() >= -1 and code.beta.max() <= 1
    assert sorted([*code.systematic, *code.coded]) == list(range(N))
    np.testing.assert_allclose(code.beta[code.systematic], code.alpha)
    E = code.encoding_matrix
    np.testing.assert_allclose(E.sum(axis=1), 1.0)
    np.testing.assert_allclose(E[code.systematic], np.eye(K))


def test_simulate_and_torch_round_trip():
    torch = pytest.importorskip("torch")
    code = gencc.SystematicGCC(10, 15, parity=Parity())
    X = RNG.normal(size=(10, 6))
    recs = gencc.simulate(nonlinear, X, code, gencc.FixedCount(2, "random"), trials=5)
    assert all(r["decodable"] and np.isfinite(r["rel_mse"]) for r in recs)
    Y = torch.as_tensor(nonlinear(code.encode(X)))
    ret = list(range(1, 15))
    out = code.decode(Y[1:], ret)
    assert isinstance(out, torch.Tensor) and out.shape == (10, 4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(K=4, N=9), "low redundancy"),
    (dict(K=4, N=6, rho=0), "rho must be"),
    (dict(K=4, N=6, rho="x"), "rho must be"),
    (dict(K=4, N=6, rho=float("nan")), "rho must be"),
    (dict(K=4, N=6, parity=3), "parity must be"),
    (dict(K=1, N=2, kernel="cubic"), "null space"),
    (dict(K=4, N=3), "at least as many workers"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gencc.SystematicGCC(**kwargs)


def test_kriging_decoder_exact_rows_for_exact_observations():
    """Observations with zero noise are reproduced: the posterior mean interpolates them."""
    K = 6
    code = gencc.SystematicGCC(K, 8)
    Kc, T = code.kernel(code.alpha, code.alpha), code.kernel.null_space(code.alpha)
    H = np.eye(K)[[0, 2, 3, 5]]
    D = kriging_decoder(H, Kc, T, np.zeros(4))
    np.testing.assert_allclose(D[[0, 2, 3, 5]], np.eye(4), atol=1e-9)


def test_one_input_two_workers():
    code = gencc.SystematicGCC(1, 2, rho=1e-9)
    X = RNG.normal(size=(1, 6))
    Y = linear(code.encode(X))
    for ret in ([0], [1], [0, 1]):
        np.testing.assert_allclose(code.decode(Y[ret], ret), linear(X), atol=1e-6)


@pytest.mark.parametrize("true_ell", [0.1, 0.3])
def test_calibrated_recovers_the_length_scale_of_a_gp(true_ell):
    """f values drawn from the GP itself: the restricted likelihood picks the generating length scale."""
    from gencc.rkhs.kernels import Matern32

    K, N, B, m = 10, 15, 200, 3
    code = gencc.SystematicGCC(K, N)
    L = np.linalg.cholesky(Matern32(true_ell, None)(code.alpha, code.alpha) + 1e-12 * np.eye(K))
    vals = 2.0 + L @ np.random.default_rng(7).normal(size=(K, B * m))  # constant mean 2, unit variance
    table = {i: vals[:, i * m:(i + 1) * m] for i in range(B)}
    sets = [np.full((K, 1), float(i)) + np.arange(K)[:, None] / 100 for i in range(B)]

    def f(X):  # looks up the drawn values of set i, input j (X encodes i + j / 100)
        X = np.asarray(X, dtype=float).ravel()
        i = np.floor(X + 1e-9).astype(int)
        j = np.rint((X - i) * 100).astype(int)
        out = np.zeros((X.size, m))
        ok = np.isclose(X, i + j / 100) & (j < K)
        out[ok] = np.stack([table[a][b] for a, b in zip(i[ok], j[ok], strict=True)]) if ok.any() else out[ok]
        return out

    f.batched = True
    cal = gencc.SystematicGCC.calibrated(K, N, f, sets)
    assert cal.calibration["length_scale"] == true_ell
    assert cal.kernel.length_scale == true_ell and cal.rho == cal.calibration["rho"] > 0


# ----- packed parity queries: coded workers that receive their group's inputs stacked -----------------------
def test_sgcc_packed_encode_hands_each_coded_worker_its_group(exact_packed_parity, X8):
    code = SystematicGCC(8, 10, parity=exact_packed_parity(4))
    Z = code.encode(X8)
    assert isinstance(Z, list) and len(Z) == 10
    for n, g in code.packed_groups().items():
        np.testing.assert_array_equal(Z[n], X8[g])
    for k, n in enumerate(code.systematic):
        np.testing.assert_array_equal(Z[n], X8[k])
    # the decoder's model is the same group mean as the plain code's
    np.testing.assert_array_equal(code.encoding_matrix, SystematicGCC(8, 10).encoding_matrix)
    assert SystematicGCC(8, 10).packed_groups() == {}


def test_sgcc_packed_recovers_one_loss_per_group_exactly(exact_packed_parity, packed_f, X8):
    """With an exact packed parity and rho -> 0 a lost systematic worker is read from its group's result."""
    parity = exact_packed_parity(4)
    code = SystematicGCC(8, 10, rho=1e-10, parity=parity)
    Y = apply_workers(packed_f, code.encode(X8), code)
    assert parity.shapes == [(2, 4, 6)]  # both coded workers in one batch, (k, 6) each
    T = packed_f(X8)
    for lost in [(code.systematic[1],), (code.systematic[2], code.systematic[6])]:
        ret = np.setdiff1d(np.arange(10), lost)
        np.testing.assert_allclose(code.decode(Y[ret], ret), T, atol=1e-6)
    # against the plain (mean-query) code with f as its parity: same decoder, worse coded results
    plain = SystematicGCC(8, 10, rho=1e-10, parity=packed_f)
    Yp = apply_workers(packed_f, plain.encode(X8), plain)
    ret = np.setdiff1d(np.arange(10), [plain.systematic[1]])
    assert np.abs(plain.decode(Yp[ret], ret) - T).max() > 1e-3


def test_simulate_runs_packed_codes_end_to_end(exact_packed_parity, packed_f, X8):
    code = SystematicGCC(8, 10, rho=1e-10, parity=exact_packed_parity(4))
    recs = simulate(packed_f, X8, code, FixedCount(1), trials=6, seed=1)
    assert len(recs) == 6 and max(r["rel_mse"] for r in recs) < 1e-10


def test_packed_needs_groups_of_exactly_k(exact_packed_parity):
    with pytest.raises(ValueError, match="exactly 4 inputs.*groups of \\[3, 4\\]"):
        SystematicGCC(10, 13, parity=exact_packed_parity(4))
