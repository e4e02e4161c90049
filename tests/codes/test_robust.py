"""Robust decoding (gencc.codes.robust): the entry point and the search through the codes' hooks, GCC/BACC
location of wrong results, invariants, a new code plugged in by its hooks alone."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import BACC, GCC, LCC, Replication
from gencc.codes import Code, robust, robust_search
from gencc.rkhs import smoother_loo


def smooth_results(code, m=4, seed=0):
    """Every worker's result for a smooth f (tanh of a random linear map) of smooth coded inputs."""
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(code.K, 6)), axis=0) / 3  # neighbouring inputs similar
    W = rng.normal(size=(6, m)) / 2
    return np.tanh(code.encode(X) @ W), np.tanh(X @ W)


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
    the threshold, and only the pair left out together shows them (robust_search.PAIR_TRIGGER)."""
    code = GCC(10, N)
    Y, _ = smooth_results(code, seed=0)
    returned = np.arange(N)
    G = smoother_loo.loo_matrix(code.beta, code.kernel_for(N), 0.0)
    quiet = 0
    for i in range(1, N - 2, 3):
        Yr = Y.copy()
        Yr[[i, i + 1]] += Y.std()
        loo = np.sqrt(np.mean((G @ Yr / np.diag(G)[:, None]) ** 2, axis=1)) / robust_search.robust_spread(Yr)
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


def test_threshold_and_method_are_checked_for_every_code():
    code = BACC(10, 40)
    Y, _ = smooth_results(code)
    for bad in (0.0, -1.0, float("nan"), float("inf"), "0.5", None, True):
        with pytest.raises(ValueError, match="threshold must be a positive number"):
            code.robust_decode(Y, np.arange(40), adversaries=1, threshold=bad)
    with pytest.raises(ValueError, match="unknown robust method 'vote'.*bacc takes method='loo' or "
                                         "method='approxifer'"):
        code.robust_decode(Y, np.arange(40), adversaries=1, method="vote")
    lcc = LCC(3, 12, degree=1)
    with pytest.raises(ValueError, match="BACC; lcc takes method='loo'"):
        lcc.robust_decode(lcc.encode(np.ones((3, 1))), np.arange(12), adversaries=1, method="approxifer")
    # a code without a locator refuses whatever the method
    with pytest.raises(ValueError, match="no locator of wrong results"):
        Replication(10, 40).robust_decode(np.zeros((40, 2)), np.arange(40), adversaries=1, method="vote")


def test_min_results_of_the_approximate_codes():
    assert [robust.min_results(GCC(10, 40), A) for A in range(4)] == [2, 4, 6, 8]  # its own minimum (2) + 2A
    assert [robust.min_results(BACC(10, 40), A) for A in range(3)] == [1, 4, 6]  # 2A + 2 binds
    with pytest.raises(ValueError, match="non-negative integer"):
        robust.min_results(GCC(10, 40), 1.5)


def test_search_finds_the_set_that_leaves_the_rest_consistent():
    """The search alone, on synthetic residuals: two wrong positions, each also spoiling its neighbours'
    residuals (an honest neighbour predicted from a wrong result), found together; with room for one only the
    best single exclusion comes back, marked inconsistent."""
    n, wrong = 12, (3, 8)

    def residuals(subsets):
        out = []
        for S in subsets:
            r = np.full(n, 0.1)
            for w in wrong:
                if w not in S:
                    r[w] = 5.0
                    r[[w - 1, w + 1]] = np.maximum(r[[w - 1, w + 1]], 1.0)
            out.append(r[:, None])
        return np.stack(out)

    def drop(S):
        return np.array([sum(5.0 if i in wrong else 1.0 for i in s) for s in S])

    for refine in (False, True):
        S, ok = robust_search.search(residuals, n, 2, 1.0, 0.5, drop, refine)
        assert S.tolist() == [3, 8] and ok
        S, ok = robust_search.search(residuals, n, 3, 1.0, 0.5, drop, refine)
        assert S.tolist() == [3, 8] and ok  # the smallest consistent set, not the largest allowed
        S, ok = robust_search.search(residuals, n, 1, 1.0, 0.5, drop, refine)
        assert S.size == 1 and S[0] in wrong and not ok
    S, ok = robust_search.search(residuals, n, 0, 1.0, 0.5, drop)
    assert S.size == 0 and not ok


def test_robust_spread_ignores_a_minority_of_wild_rows():
    Y = np.random.default_rng(0).normal(size=(40, 3))
    s = robust_search.robust_spread(Y)
    Y[:5] = 1e6
    assert 0.5 * s < robust_search.robust_spread(Y) < 2 * s
    assert robust_search.robust_spread(np.zeros((6, 2))) == 1.0


class _Voting(Replication):
    """A code plugged into robust decoding by its hooks alone: every input on 3 workers; a replica that misses
    the median of its input's replicas is wrong."""

    name = "voting"
    robust_methods = ("loo",)
    seen: list = []

    def _locate_wrong(self, returned, Y, adversaries, *, method="loo", threshold=robust.DEFAULT_THRESHOLD):
        type(self).seen.append((returned.copy(), Y.dtype, method, threshold))
        wrong = []
        for k in range(self.K):
            mine = np.flatnonzero(self.assignment[returned] == k)
            med = np.median(Y[mine], axis=0)
            wrong += [int(returned[i]) for i in mine if np.abs(Y[i] - med).max() > threshold]
        return np.array(wrong[::-1][:adversaries], dtype=np.int64)


def test_a_new_code_plugs_in_through_the_hooks():
    code = _Voting(4, 12)
    X = np.arange(4.0)[:, None] * np.ones((1, 2))
    Y = code.encode(X)  # f = identity
    returned = np.array([11, 0, 5, 2, 7, 1, 3, 9, 4, 6, 8, 10])
    Yr = Y[returned].astype(np.float32)
    Yr[1] += 9.0  # worker 0, the first replica of input 0
    Yr[3] -= 9.0  # worker 2
    _Voting.seen.clear()
    Yhat, flagged = code.robust_decode(Yr, returned, adversaries=2, threshold=0.25)
    (srt, dtype, method, threshold), = _Voting.seen
    assert srt.tolist() == sorted(returned.tolist()) and dtype == np.float64 and (method, threshold) == ("loo", 0.25)
    assert flagged.tolist() == [0, 2] and flagged.dtype == np.int64
    np.testing.assert_allclose(Yhat, X)  # the decode of the rest: each input from a surviving replica
    assert isinstance(code, Code) and robust.min_results(code, 2) == 6


def test_the_search_imports_no_code():
    """The code-agnostic half knows no code class: it imports nothing from gencc but the array helpers and its
    own search module, which imports nothing from gencc at all."""
    import ast
    import inspect

    from gencc.codes import robust_search

    for mod, expected in ((robust, {(2, "_util.arrays"), (1, "robust_search")}), (robust_search, set())):
        tree = ast.parse(inspect.getsource(mod))
        local = {(n.level, n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level}
        assert local == expected
        assert not any(isinstance(n, ast.Import) and any("gencc" in a.name for a in n.names) for n in ast.walk(tree))


@settings(max_examples=20)
@given(st.permutations(list(range(36))), st.integers(0, 3))
def test_order_of_returned_does_not_matter_for_bacc(perm, bad_seed):
    code = BACC(10, 40)
    Y, _ = smooth_results(code, seed=6)
    returned = np.array([i for i in range(40) if i not in (1, 12, 25, 26)])
    Yr = Y[returned].copy()
    bad = np.random.default_rng(bad_seed).choice(36, 2, replace=False)
    Yr[bad] += 3 * Y.std()
    ref, ref_flag = code.robust_decode(Yr, returned, adversaries=2)
    np.testing.assert_array_equal(ref_flag, np.sort(returned[bad]))
    p = np.asarray(perm)
    got, flag = code.robust_decode(Yr[p], returned[p], adversaries=2)
    np.testing.assert_array_equal(flag, ref_flag)
    np.testing.assert_allclose(got, ref, atol=1e-10)
