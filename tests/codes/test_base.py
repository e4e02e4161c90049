"""The Code interface, checked on every code: shapes, order independence, array kinds, cache, bad input."""

import pickle
import time
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import BACC, GCC, LCC, Replication, SystematicGCC
from gencc._util.lru import LRU
from gencc.codes import base

K, N = 6, 15
FACTORIES = {
    "gcc": lambda: GCC(K, N),
    "gcc-cubic-gcv": lambda: GCC(K, N, kernel="cubic", lam_dec="gcv"),
    "bacc": lambda: BACC(K, N),
    "lcc": lambda: LCC(K, N, degree=2),  # threshold (K - 1) 2 + 1 = 11
    "replication": lambda: Replication(K, N),
}
CODES = pytest.mark.parametrize("make", FACTORIES.values(), ids=FACTORIES.keys())


def f(x):
    return np.tanh(x) + 0.1 * x**2


def returned_set(code, seed=0, extra=1):
    rng = np.random.default_rng(seed)
    n = min(N, max(code.min_results, 1) + extra)
    return np.sort(rng.choice(N, size=n, replace=False))


@CODES
def test_shapes(make):
    code = make()
    X = np.random.default_rng(0).normal(size=(K, 3, 4))
    Xt = code.encode(X)
    assert Xt.shape == (N, 3, 4) and Xt.dtype == np.float64
    assert code.encoding_matrix.shape == (N, K)
    assert code.alpha.shape == (K,) and code.beta.shape == (N,)
    assert np.all(np.diff(code.alpha) > 0) and np.all(np.diff(code.beta) >= 0)
    np.testing.assert_allclose(Xt.reshape(N, -1), code.encoding_matrix @ X.reshape(K, -1), atol=1e-12)
    r = returned_set(code)
    Y = f(Xt[r])
    Yhat = code.decode(Y, r)
    assert Yhat.shape == (K, 3, 4)
    D = code.decoding_matrix(r, Y)
    assert D.shape == (K, r.size)
    np.testing.assert_allclose(Yhat.reshape(K, -1), D @ Y.reshape(r.size, -1), atol=1e-12)


@CODES
def test_encoding_matrix_is_read_only(make):
    code = make()
    with pytest.raises(ValueError):
        code.encoding_matrix[0, 0] = 1.0


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(sorted(FACTORIES)), seed=st.integers(0, 2**16), data=st.data())
def test_decoding_ignores_the_order_of_returned(name, seed, data):
    code = FACTORIES[name]()
    X = np.random.default_rng(seed).normal(size=(K, 2))
    Yall = f(code.encode(X))
    r = returned_set(code, seed, extra=data.draw(st.integers(0, 3)))
    perm = np.array(data.draw(st.permutations(range(r.size))))
    ref = code.decode(Yall[r], r)
    np.testing.assert_allclose(code.decode(Yall[r[perm]], r[perm]), ref, atol=1e-10)
    np.testing.assert_allclose(code.decode(Yall[r[perm]], list(r[perm])), ref, atol=1e-10)
    D = code.decoding_matrix(r, Yall[r])
    np.testing.assert_allclose(code.decoding_matrix(r[perm], Yall[r[perm]]), D[:, perm], atol=1e-10)


@CODES
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_in_torch_out(make, dtype):
    torch = pytest.importorskip("torch")
    code = make()
    tdt = getattr(torch, dtype)
    X = torch.randn(K, 3, 4, dtype=tdt, generator=torch.Generator().manual_seed(0))
    Xt = code.encode(X)
    assert isinstance(Xt, torch.Tensor) and Xt.dtype == tdt and Xt.device.type == "cpu" and Xt.shape == (N, 3, 4)
    r = returned_set(code)
    Y = torch.tanh(Xt[torch.as_tensor(r)])
    Yhat = code.decode(Y, torch.as_tensor(r))
    assert isinstance(Yhat, torch.Tensor) and Yhat.dtype == tdt and Yhat.device.type == "cpu"
    ref = code.decode(Y.double().numpy(), r)
    np.testing.assert_allclose(Yhat.double().numpy(), ref, atol=1e-4 if dtype == "float32" else 1e-12)


@CODES
def test_numpy_float32_stays_float32(make):
    code = make()
    X = np.random.default_rng(0).normal(size=(K, 5)).astype(np.float32)
    Xt = code.encode(X)
    assert Xt.dtype == np.float32
    r = returned_set(code)
    assert code.decode(np.tanh(Xt[r]), r).dtype == np.float32
    # integers are computed in float64
    assert code.encode(np.ones((K, 2), dtype=np.int64)).dtype == np.float64


def test_decoder_cache_reuses_and_is_bounded(monkeypatch):
    monkeypatch.setattr(base, "DECODER_CACHE_SIZE", 4)
    code = GCC(K, N, kernel="cubic")
    calls = []
    real = code._decoding_matrix
    monkeypatch.setattr(code, "_decoding_matrix", lambda r, Y: calls.append(tuple(r)) or real(r, Y))
    r = np.arange(10)
    D1 = code.decoding_matrix(r)
    D2 = code.decoding_matrix(r[::-1])
    assert len(calls) == 1  # the set, not the order, is the key
    np.testing.assert_allclose(D2, D1[:, ::-1])
    D1[:] = 0.0  # the caller's copy: the cache is unaffected
    assert np.abs(code.decoding_matrix(r)).max() > 0
    for s in range(8):
        code.decoding_matrix(np.arange(s, s + 5))
        assert len(code._cache) <= 4
    assert len(code._cache) == 4
    code.decoding_matrix(r)  # evicted long ago: recomputed
    assert len(calls) == 10


def test_default_cache_size_bounds_the_cache():
    code = BACC(2, 12)
    for s in range(12):
        for e in range(s + 1, 13):
            code.decoding_matrix(np.arange(s, e))
    assert len(code._cache) == min(base.DECODER_CACHE_SIZE, 78)
    assert base.DECODER_CACHE_SIZE >= 1


# ----- codes shared between threads (as `gencc.stream` shares one) ------------------------------------------
class _SlowLRU(LRU):
    """A decoder cache whose builds pause, widening the window between a miss and the store (so a race that the
    interpreter's thread switching makes rare shows up in every run)."""

    def get_or_build(self, key, build):
        def slow():
            time.sleep(1e-4)
            return build()

        return super().get_or_build(key, slow)


def test_decoder_cache_survives_eviction_under_threads(monkeypatch, hammer):
    monkeypatch.setattr(base, "DECODER_CACHE_SIZE", 2)
    K, N = 3, 7
    code = BACC(K, N)
    code._cache = _SlowLRU(base.DECODER_CACHE_SIZE)
    patterns = [np.array(c) for c in combinations(range(N), N - 2)][:5]
    want = {tuple(r): code._decoding_matrix(r, None) for r in patterns}
    picks = np.random.default_rng(0).integers(0, len(patterns), size=(8, 150))

    def work(t: int) -> None:
        for i in picks[t]:
            r = patterns[i]
            np.testing.assert_array_equal(code.decoding_matrix(r), want[tuple(r)])

    errors = hammer(work)
    assert not errors, f"{len(errors)} thread(s) failed, first: {errors[0]!r}"
    assert len(code._cache) <= 2


def test_a_code_pickles_with_its_own_lock():
    code = GCC(4, 9)
    r = np.arange(1, 9)
    D = code.decoding_matrix(r)
    copy = pickle.loads(pickle.dumps(code))
    assert copy._cache is not code._cache and copy._cache._lock is not code._cache._lock
    assert len(copy._cache) == 0 and copy._cache.maxsize == code._cache.maxsize
    np.testing.assert_array_equal(copy.decoding_matrix(r), D)


# ----- bad input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [GCC, BACC, LCC, Replication])
def test_bad_sizes_raise(cls):
    with pytest.raises(ValueError, match="N=4 < K=5"):
        cls(5, 4)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            cls(bad, 10)


@CODES
def test_bad_x_raises(make):
    code = make()
    with pytest.raises(ValueError, match="first dimension K=6"):
        code.encode(np.zeros((K + 1, 3)))
    with pytest.raises(ValueError, match="first dimension K=6"):
        code.encode(np.float64(1.0))
    X0 = np.random.default_rng(0).normal(size=(K, 3))
    for row in range(K):  # the product proves X finite: every entry of X is seen through it
        for col in range(3):
            for bad in (np.nan, np.inf, -np.inf):
                X = X0.copy()
                X[row, col] = bad
                with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="X contains 1 non-finite"):
                    code.encode(X)
    with np.errstate(over="ignore", invalid="ignore"):  # finite X whose product overflows: returned, as E @ X is
        big = np.full((K, 3), 1e308)
        np.testing.assert_array_equal(code.encode(big), code.encoding_matrix @ big)
    with pytest.raises(ValueError, match="numeric"):
        code.encode(np.array([["a"]] * K))


@CODES
def test_bad_x_torch_raises(make):
    torch = pytest.importorskip("torch")
    X = torch.zeros(K, 3)
    X[0, 0] = float("nan")
    with pytest.raises(ValueError, match="X contains 1 non-finite"):
        make().encode(X)


@CODES
def test_bad_y_and_returned_raise(make):
    code = make()
    r = returned_set(code)
    Y = np.ones((r.size, 2))
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode(Y[:-1], r)
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode(np.float64(1.0), r)
    Ybad = Y.copy()
    Ybad[0, 1] = np.nan
    with pytest.raises(ValueError, match="Y contains non-finite"):
        code.decode(Ybad, r)
    Ybad[0, 1] = -np.inf
    with pytest.raises(ValueError, match="Y contains non-finite"):
        code.decode(Ybad, r)
    dup = r.copy()
    dup[-1] = dup[0]
    with pytest.raises(ValueError, match="more than once"):
        code.decode(Y, dup)
    out = r.copy()
    out[-1] = N
    with pytest.raises(ValueError, match="out-of-range"):
        code.decode(Y, out)
    out[-1] = -1
    with pytest.raises(ValueError, match="out-of-range"):
        code.decode(Y, out)
    with pytest.raises(ValueError, match="integer worker indices"):
        code.decoding_matrix(np.array([0.5] + list(range(1, r.size))))


@CODES
def test_bad_y_torch_raises(make):
    torch = pytest.importorskip("torch")
    code = make()
    r = returned_set(code)
    Y = torch.ones(r.size, 2)
    Y[1, 0] = float("inf")
    with pytest.raises(ValueError, match="Y contains .*non-finite"):
        code.decode(Y, r)


@pytest.mark.parametrize("make,need", [(FACTORIES["gcc"], 2), (FACTORIES["lcc"], 11), (FACTORIES["bacc"], 1)])
def test_too_few_results_raise(make, need):
    code = make()
    assert code.min_results == need
    r = np.arange(need - 1)
    assert not code.can_decode(r)
    assert code.can_decode(np.arange(need))
    with pytest.raises(ValueError, match=f"too few results to decode: .* needs at least {need}"):
        code.decode(np.ones((need - 1, 2)), r)


# ----- packed parity queries (Code.encode hands a packed worker its group's inputs) -------------------------
def test_packed_encode_keeps_the_array_kind(exact_packed_parity, X8):
    torch = pytest.importorskip("torch")
    code = SystematicGCC(8, 10, parity=exact_packed_parity(4))
    Xt = torch.as_tensor(X8, dtype=torch.float32)
    Z = code.encode(Xt)
    assert all(isinstance(z, torch.Tensor) and z.dtype == torch.float32 for z in Z)
    n = next(iter(code.packed_groups()))
    np.testing.assert_allclose(Z[n].numpy(), X8[code.packed_groups()[n]], rtol=1e-6)
    with pytest.raises(ValueError, match="non-finite"):
        code.encode(np.where(np.arange(48).reshape(8, 6) == 3, np.nan, X8))


# ----- the warm path: a cache hit skips re-validating the indices, never the checks of new input ----------------
@CODES
def test_a_cache_hit_still_checks_every_new_input(make):
    code = make()
    r = returned_set(code)
    rng = np.random.default_rng(3)
    Y = rng.normal(size=(r.size, 3))
    perm = rng.permutation(r.size)
    want = code.decoding_matrix(r, Y) @ Y
    for _ in range(2):  # the second round runs on cache hits
        for ret, Yr in ((r, Y), (r.tolist(), Y), (r[perm], Y[perm]), (tuple(r[perm].tolist()), Y[perm]),
                        (r.astype(np.int32), Y)):
            np.testing.assert_allclose(code.decode(Yr, ret), want, rtol=1e-10, atol=1e-10)
            for row in range(r.size):  # a bad value in any worker's result, whether or not D_F uses it
                Ybad = Yr.copy()
                Ybad[row, 1] = (np.nan, np.inf, -np.inf)[row % 3]
                with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains non-finite"):
                    code.decode(Ybad, ret)
            with pytest.raises(ValueError, match="one result per returned worker"):
                code.decode(Yr[:-1], ret)
    dup = r.copy()
    dup[-1] = dup[0]
    for bad, match in ((dup, "more than once"), (np.append(r[:-1], N), "out-of-range"),
                       (np.append(r[:-1], -1), "out-of-range")):
        for ret in (bad, bad.tolist()):
            with pytest.raises(ValueError, match=match):
                code.decode(Y, ret)


def test_an_unused_replica_is_still_checked():
    code = Replication(3, 9)
    r = np.arange(9)  # every input three times: D_F reads one replica of each, and has zero columns
    D = code.decoding_matrix(r)
    unused = np.flatnonzero(~D.any(axis=0))
    assert unused.size == 6
    Y = np.ones((9, 2))
    code.decode(Y, r)
    Y[unused[0], 0] = np.nan
    with pytest.raises(ValueError, match="Y contains non-finite"):
        code.decode(Y, r)


def test_decode_keeps_the_cached_matrix_to_itself():
    code = GCC(K, N, kernel="cubic")
    r = np.arange(1, N)
    D = code.decoding_matrix(r)
    D[:] = 0.0  # the caller's copy
    Y = np.ones((r.size, 2))
    np.testing.assert_allclose(code.decode(Y, r), GCC(K, N, kernel="cubic").decoding_matrix(r) @ Y, atol=1e-12)
    assert not code._decoder(r).M.flags.writeable


@CODES
def test_decode_sum_is_the_sum_of_the_decode(make):
    code = make()
    r = returned_set(code, seed=3, extra=4)
    rng = np.random.default_rng(1)
    Y = rng.normal(size=(r.size, 3, 2))
    perm = rng.permutation(r.size)  # the order of `returned` does not matter
    got = code.decode_sum(Y[perm], r[perm])
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got, code.decode(Y, r).sum(0), rtol=1e-12, atol=1e-12)
    D = code.decoding_matrix(r, Y if code.data_dependent else None)  # brute force: sum_k sum_i D[k, i] Y[i]
    brute = np.zeros((3, 2))
    for k in range(code.K):
        for i in range(r.size):
            brute += D[k, i] * Y[i]
    np.testing.assert_allclose(got, brute, rtol=1e-12, atol=1e-12)


def test_decode_sum_keeps_the_array_kind_and_checks_its_input():
    torch = pytest.importorskip("torch")
    code = GCC(K, N)
    r = returned_set(code, extra=5)
    Y = np.random.default_rng(2).normal(size=(r.size, 4))
    t = code.decode_sum(torch.tensor(Y, dtype=torch.float32), r.tolist())
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (4,)
    np.testing.assert_allclose(t.numpy(), code.decode(Y, r).sum(0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode_sum(Y[:-1], r)
    Y[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        code.decode_sum(Y, r)
