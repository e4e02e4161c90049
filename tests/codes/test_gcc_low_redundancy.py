"""GCC's low-redundancy decoder (decoder="select"): when it is the default, its candidates against independent
references (stacked least squares by SciPy, brute-force leave-one-out refits), and the choice they make."""

from __future__ import annotations

import pickle
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import linalg

import gencc
from gencc.codes import gcc_low_redundancy
from gencc.codes.gcc_low_redundancy import SHORT_KERNEL, linear_reading, selection_matrices

RNG = np.random.default_rng(11)
A = RNG.normal(size=(3, 5))


def nonlinear(X):
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    return np.tanh(X @ A.T) + 0.2 * (X**2) @ A.T


@pytest.mark.parametrize("K, N, kw, expect", [
    (10, 15, {}, "select"), (8, 10, {}, "select"), (20, 30, {}, "select"), (4, 5, {}, "select"),
    (10, 16, {}, "interpolate"), (10, 10, {}, "interpolate"), (48, 70, {}, "interpolate"),  # N > 64
    (10, 15, {"lam_dec": 1e-6}, "interpolate"), (10, 15, {"lam_dec": "gcv"}, "interpolate"),
    (10, 15, {"lam_enc": 1e-6}, "interpolate"), (10, 15, {"beta": "chebyshev2"}, "interpolate"),
    (10, 15, {"decoder": "interpolate"}, "interpolate"), (10, 40, {"decoder": "select"}, "select"),
])
def test_auto_picks_select_at_low_redundancy_only(K, N, kw, expect):
    code = gencc.GCC(K, N, **kw)
    assert code.decoder == expect and code.data_dependent == (expect == "select" or "lam_dec" in kw
                                                             and isinstance(kw["lam_dec"], str))


@pytest.mark.parametrize("kw, match", [
    ({"decoder": "best"}, "unknown decoder"),
    ({"decoder": "select", "lam_dec": "loo"}, "lam_dec must be 0"),
    ({"decoder": "select", "beta": "chebyshev2"}, "systematic worker on every alpha"),
    ({"decoder": "select", "lam_enc": 0.1}, "systematic worker on every alpha"),
])
def test_bad_decoder_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        gencc.GCC(10, 15, **kw)


def test_fixed_decoding_matrix_needs_the_results():
    with pytest.raises(ValueError, match="pass Y to decoding_matrix"):
        gencc.GCC(10, 15).decoding_matrix(np.arange(14))


def stacked_lstsq(E, returned, systematic, G, y, mu):
    """The linear reading as one stacked least-squares problem solved by SciPy (no normal equations)."""
    pos = {int(w): i for i, w in enumerate(returned)}
    known = [k for k in range(E.shape[1]) if int(systematic[k]) in pos]
    unknown = [k for k in range(E.shape[1]) if k not in known]
    coded = [i for i, w in enumerate(returned) if int(w) not in set(systematic.tolist())]
    c = np.zeros((E.shape[1], y.shape[1]))
    c[known] = y[[pos[int(systematic[k])] for k in known]]
    H = E[returned[coded]]
    lhs = np.vstack([H[:, unknown], np.sqrt(mu) * np.eye(len(unknown))])
    rhs = np.vstack([y[coded] - H[:, known] @ c[known], np.sqrt(mu) * (G @ y)[unknown]])
    c[unknown] = linalg.lstsq(lhs, rhs)[0]
    return c


@settings(max_examples=25)
@given(K=st.integers(4, 12), extra=st.integers(1, 6), lost=st.integers(1, 3), seed=st.integers(0, 10**6),
       mu=st.sampled_from([1e-3, 0.1, 1.0]))
def test_linear_reading_equals_stacked_least_squares(K, extra, lost, seed, mu):
    N = K + min(extra, K // 2)
    code = gencc.GCC(K, N, decoder="interpolate")
    rng = np.random.default_rng(seed)
    returned = np.sort(rng.choice(N, size=N - lost, replace=False))
    systematic = gcc_low_redundancy.systematic_workers(code.alpha, code.beta)
    G = code.decoding_matrix(returned)
    y = rng.normal(size=(returned.size, 3))
    D = linear_reading(code.encoding_matrix, returned, systematic, G, mu)
    np.testing.assert_allclose(D @ y, stacked_lstsq(code.encoding_matrix, returned, systematic, G, y, mu),
                               atol=1e-8)


def test_linear_reading_is_exact_for_linear_f_without_ridge():
    """y = E c exactly (f linear): with mu -> 0 the coded rows determine the one lost input exactly."""
    code = gencc.GCC(10, 15, decoder="interpolate")
    systematic = gcc_low_redundancy.systematic_workers(code.alpha, code.beta)
    X = RNG.normal(size=(10, 5))
    Y = code.encode(X) @ A.T
    for k in range(10):
        returned = np.setdiff1d(np.arange(15), [systematic[k]])
        D = linear_reading(code.encoding_matrix, returned, systematic, code.decoding_matrix(returned), 1e-12)
        np.testing.assert_allclose(D @ Y[returned], X @ A.T, atol=1e-6)


def test_loo_maps_equal_brute_force_refits():
    """Each candidate's LOO residual of a returned systematic result equals hiding that worker and decoding
    its input with the candidate built independently (GCC objects with the candidate's kernel)."""
    code = gencc.GCC(10, 15)
    returned = np.setdiff1d(np.arange(15), [2, 9])
    t = code.beta[returned]
    Ds, Ls = selection_matrices(t, code.alpha, code.kernel, code.encoding_matrix, returned, code.systematic)
    interp = gencc.GCC(10, 15, decoder="interpolate")
    short = gencc.GCC(10, 15, kernel=SHORT_KERNEL, decoder="interpolate")
    k_of = {int(w): k for k, w in enumerate(code.systematic)}
    held = [i for i, w in enumerate(returned) if int(w) in k_of]
    y = RNG.normal(size=(returned.size, 4))
    for c, L in enumerate(Ls):
        for j, i in enumerate(held):
            rest = np.delete(returned, i)
            if c < 2:
                Dr = (interp if c == 0 else short).decoding_matrix(rest)
            else:
                Dr = stacked_lstsq(code.encoding_matrix, rest, code.systematic, interp.decoding_matrix(rest),
                                   np.eye(rest.size), gcc_low_redundancy.RIDGE)
            expect = y[i] - Dr[k_of[int(returned[i])]] @ np.delete(y, i, axis=0)
            np.testing.assert_allclose(L[j] @ y, expect, atol=1e-6)
    np.testing.assert_allclose(Ds[0], interp.decoding_matrix(returned), atol=1e-10)
    np.testing.assert_allclose(Ds[1], short.decoding_matrix(returned), atol=1e-10)


@settings(max_examples=20)
@given(lost=st.lists(st.integers(0, 14), min_size=1, max_size=3, unique=True), seed=st.integers(0, 10**6))
def test_decode_is_the_candidate_with_least_loo_error(lost, seed):
    code = gencc.GCC(10, 15)
    X = np.random.default_rng(seed).normal(size=(10, 5))
    Y = nonlinear(code.encode(X))
    returned = np.setdiff1d(np.arange(15), lost)
    Ds, Ls = selection_matrices(code.beta[returned], code.alpha, code.kernel, code.encoding_matrix, returned,
                                code.systematic)
    errs = [float(np.sum((L @ Y[returned]) ** 2)) for L in Ls]
    best = Ds[int(np.argmin(errs))] if errs else Ds[0]
    np.testing.assert_allclose(code.decode(Y[returned], returned), best @ Y[returned], atol=1e-10)
    # exact wherever the input's own worker answered, whichever candidate won
    own = [k for k in range(10) if code.systematic[k] in returned]
    np.testing.assert_allclose(code.decode(Y[returned], returned)[own], nonlinear(X)[own], atol=1e-8)


@settings(max_examples=20)
@given(lost=st.lists(st.integers(0, 14), min_size=1, max_size=3, unique=True), seed=st.integers(0, 10**6),
       bad=st.sampled_from([np.nan, np.inf, -np.inf]))
def test_decode_in_any_order_and_dtype_is_the_sorted_choice(lost, seed, bad):
    """The decode in the caller's order of `returned` (array or list; numpy's fast path) equals the sorted
    reference of the test above, for float64 and float32 results and torch; a non-finite value anywhere in Y
    raises, on the first decode of a pattern and on a repeat."""
    code = gencc.GCC(10, 15)
    rng = np.random.default_rng(seed)
    Y = nonlinear(code.encode(rng.normal(size=(10, 5))))
    returned = np.setdiff1d(np.arange(15), lost)
    Ds, Ls = selection_matrices(code.beta[returned], code.alpha, code.kernel, code.encoding_matrix, returned,
                                code.systematic)
    best = Ds[int(np.argmin([float(np.sum((L @ Y[returned]) ** 2)) for L in Ls]))] if Ls else Ds[0]
    want = best @ Y[returned]
    perm = rng.permutation(returned)
    for ret in (perm, perm.tolist()):
        np.testing.assert_allclose(code.decode(Y[perm], ret), want, atol=1e-10)
    got32 = code.decode(Y[perm].astype(np.float32), perm)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, atol=1e-4)
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(code.decode(torch.as_tensor(Y[perm]), perm).numpy(), want, atol=1e-10)
    Z = Y[perm].copy()
    Z[rng.integers(len(Z)), rng.integers(Z.shape[1])] = bad
    for _ in range(2):
        with pytest.raises(ValueError, match="non-finite"):
            code.decode(Z, perm)
    with pytest.raises(ValueError, match="more than once"):
        code.decode(Y[:len(perm)], np.r_[perm[:-1], perm[0]])


@settings(max_examples=15)
@given(lost=st.lists(st.integers(0, 14), min_size=1, max_size=3, unique=True), seed=st.integers(0, 10**6))
def test_a_pattern_seen_before_decodes_as_a_fresh_code_does(lost, seed):
    """The second decode of a pattern (float64 results, int64 indices: `GCC.decode`'s hot path, from the cached
    entry) gives, bit for bit, what a code that never saw the pattern gives for the same results, whichever
    candidate these results pick; a non-finite value still raises there."""
    code = gencc.GCC(10, 15)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(np.setdiff1d(np.arange(15), lost))
    first = nonlinear(code.encode(rng.normal(size=(10, 5))))[perm]
    code.decode(first, perm)  # the pattern's entry cached
    for scale in (1.0, 1e-3, 1e3):  # other results: the pick may differ from the first decode's
        Y = nonlinear(code.encode(scale * rng.normal(size=(10, 5))))[perm]
        np.testing.assert_array_equal(code.decode(Y, perm), gencc.GCC(10, 15).decode(Y, perm))
    Y[rng.integers(len(Y)), rng.integers(Y.shape[1])] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        code.decode(Y, perm)


def test_pick_sends_near_ties_to_the_first_candidate():
    pick = gcc_low_redundancy.pick
    assert pick(np.array([2.0, 1.0, 3.0]), 1.0) == 1
    assert pick(np.array([1.0 + 1e-12, 1.0, 3.0]), 1.0) == 0  # within TIE * sqrt(least * energy)
    assert pick(np.array([1.0 + 1e-6, 1.0, 3.0]), 1.0) == 1
    assert pick(np.array([3e-32, 1e-32, 2e-32]), 1.0) == 0  # rounding-level scores of exact readings tie
    assert pick(np.array([0.0, 0.0, 0.0]), 1.0) == 0
    assert pick(np.array([np.nan, np.nan, np.nan]), np.nan) == 0


def tied_results(code, returned, a, b, seed):
    """Results (sorted `returned`) on which candidates a and b have equal LOO scores up to rounding and the
    third a larger one: Y1 + t Y2 at a root t of the quadratic s_a(t) - s_b(t); None when there is none."""
    Ds, Ls = selection_matrices(code.beta[returned], code.alpha, code.kernel, code.encoding_matrix, returned,
                                code.systematic)
    rng = np.random.default_rng(seed)
    Y1, Y2 = (nonlinear(code.encode(rng.normal(size=(code.K, 5))))[returned] for _ in range(2))
    def gap(t):
        return float(np.sum((Ls[a] @ (Y1 + t * Y2)) ** 2) - np.sum((Ls[b] @ (Y1 + t * Y2)) ** 2))
    c = np.polyfit([-1.0, 0.0, 1.0], [gap(-1.0), gap(0.0), gap(1.0)], 2)
    for t in np.roots(c):
        if abs(t.imag) > 0:
            continue
        Y = Y1 + t.real * Y2
        s = [float(np.sum((L @ Y) ** 2)) for L in Ls]
        if abs(s[a] - s[b]) <= 1e-12 * s[a] and s[3 - a - b] > 1.01 * s[a]:
            return Ds, Y
    return None


@pytest.mark.parametrize("a, b", [(0, 1), (0, 2), (1, 2)])
def test_tied_candidates_pick_the_first_in_every_order(a, b):
    """On results where two candidates' LOO scores tie up to rounding (and their decodes differ), every order
    of `returned`, list or array, fast path or `decoding_matrix`, picks the first of the two."""
    code = gencc.GCC(10, 15)
    found = None
    for lost, seed in ((lost, seed) for seed in range(20) for lost in ([1, 6], [0, 9, 12], [3, 13], [5])):
        returned = np.setdiff1d(np.arange(15), lost)
        found = tied_results(code, returned, a, b, seed)
        if found is not None:
            break
    assert found is not None
    Ds, Y = found
    assert np.abs((Ds[a] - Ds[b]) @ Y).max() > 1e-3  # the pick shows in the decode
    rng = np.random.default_rng(0)
    for _ in range(20):
        order = rng.permutation(returned.size)
        perm = returned[order]
        for ret in (perm, perm.tolist()):
            np.testing.assert_allclose(code.decode(Y[order], ret), Ds[a] @ Y, atol=1e-10)
        D = code.decoding_matrix(perm, Y[order])
        np.testing.assert_allclose(D[:, np.argsort(order)], Ds[a], atol=1e-12)


def test_pickles_and_decodes_the_same():
    code = gencc.GCC(8, 10)
    X = RNG.normal(size=(8, 5))
    Y = nonlinear(code.encode(X))
    ret = np.array([0, 1, 2, 4, 5, 7, 8, 9])
    copy = pickle.loads(pickle.dumps(code))
    np.testing.assert_allclose(copy.decode(Y[ret], ret), code.decode(Y[ret], ret))


def test_beats_interpolation_on_the_digits_cnn():
    """Real data through the public API: one straggler, every straggler set, 8 input sets of the digits CNN."""
    from gencc.experiments.tables.low_redundancy import ordered_sets
    from gencc.workloads import load

    w = load("digits-cnn", progress=False)
    new, old = gencc.GCC(10, 15), gencc.GCC(10, 15, decoder="interpolate")
    losses = {"new": [], "old": []}
    for X in ordered_sets(w.X_test, 10, 8, seed=3):
        Y, truth = w.f(new.encode(X)), w.f(X)
        for (lost,) in combinations(range(15), 1):
            ret = np.setdiff1d(np.arange(15), [lost])
            losses["new"].append(gencc.metrics.rel_mse(new.decode(Y[ret], ret), truth))
            losses["old"].append(gencc.metrics.rel_mse(old.decode(Y[ret], ret), truth))
    assert np.mean(losses["new"]) < 0.8 * np.mean(losses["old"])
