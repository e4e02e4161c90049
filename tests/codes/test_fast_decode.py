"""The fast decode paths (a selection of results plus a few rows; a checksum row under M) against dense D_F @ Y."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gencc import GCC
from gencc._util.arrays import SMALL_PRODUCT, LinearMap
from gencc.codes.selection_map import SelectionMap, decoder_map
from gencc.rkhs.smoothing import cubic_spline_weights

K, N = 20, 600  # N beyond the dense kernel's range: the cubic spline's banded path, systematic workers


@functools.cache
def _code() -> GCC:
    """One code for the module (a shared code's cache sees misses, hits and patterns in new orders)."""
    return GCC(K, N)


def _reference(code: GCC, returned: np.ndarray) -> np.ndarray:
    """D_F from scipy's natural cubic spline through each unit vector (sorted workers, then the caller's order)."""
    from scipy.interpolate import CubicSpline

    assert code.kernel_for(returned.size).is_cubic_spline
    srt = np.sort(returned)
    W = CubicSpline(code.beta[srt], np.eye(srt.size), bc_type="natural")(code.alpha)
    D = np.empty_like(W)
    D[:, np.argsort(returned)] = W
    return D


def _returned(rng: np.random.Generator, code: GCC, lose_systematic: int) -> np.ndarray:
    """Workers minus 5 stragglers, `lose_systematic` of them systematic (a worker on an alpha)."""
    sys_workers = np.asarray(code.systematic)
    others = np.setdiff1d(np.arange(N), sys_workers)
    lost = np.concatenate([rng.choice(sys_workers, lose_systematic, replace=False),
                           rng.choice(others, 5 - lose_systematic, replace=False)])
    ret = np.setdiff1d(np.arange(N), lost)
    rng.shuffle(ret)
    return ret


@pytest.mark.parametrize("lose_systematic", [0, 2])
def test_selection_decode_equals_the_dense_product(lose_systematic):
    rng = np.random.default_rng(lose_systematic)
    code = GCC(K, N)
    ret = _returned(rng, code, lose_systematic)
    Y = rng.normal(size=(ret.size, 7))
    D = code.decoding_matrix(ret)
    np.testing.assert_allclose(D, _reference(code, ret), rtol=1e-9, atol=1e-11)
    dec = code._decoder(ret)
    assert isinstance(dec, SelectionMap)
    assert dec.other.size == lose_systematic
    for _ in range(2):  # the miss and the hit (the last pattern's path)
        np.testing.assert_allclose(code.decode(Y, ret), D @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(code.decode(Y.reshape(ret.size, 7, 1), ret), (D @ Y)[..., None], rtol=1e-12,
                               atol=1e-12)
    out32 = code.decode(Y.astype(np.float32), ret)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, D @ Y, rtol=1e-4, atol=1e-4)
    D[:] = 0.0  # the caller's copy: the next one is whole again
    np.testing.assert_allclose(code.decoding_matrix(ret), _reference(code, ret), rtol=1e-9, atol=1e-11)
    assert not dec.M.flags.writeable


def test_selection_decode_keeps_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    code = _code()
    ret = _returned(rng, code, 1)
    Y = rng.normal(size=(ret.size, 4))
    out = code.decode(torch.tensor(Y, dtype=torch.float32), ret)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), code.decoding_matrix(ret) @ Y, rtol=1e-4, atol=1e-4)
    Yb = torch.tensor(Y)
    Yb[0, 0] = float("nan")
    with pytest.raises(ValueError, match="Y contains non-finite"):
        code.decode(Yb, ret)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), lose=st.integers(0, 3), columns=st.sampled_from([1, 5, 70]))
def test_decoding_in_any_order_gives_the_same_result(seed, lose, columns):
    rng = np.random.default_rng(seed)
    code = _code()
    ret = _returned(rng, code, lose)
    Y = rng.normal(size=(ret.size, columns))
    want = code.decode(Y, ret)
    perm = rng.permutation(ret.size)
    np.testing.assert_allclose(code.decode(Y[perm], ret[perm]), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(code.decode(Y[perm], ret[perm].tolist()), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(want, _reference(code, ret) @ Y, rtol=1e-8, atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), lose=st.integers(0, 3), bad=st.sampled_from([np.nan, np.inf, -np.inf]),
       columns=st.sampled_from([1, 5, 70]), dtype=st.sampled_from([np.float64, np.float32]))
def test_a_non_finite_result_anywhere_raises_even_on_a_hit(seed, lose, bad, columns, dtype):
    rng = np.random.default_rng(seed)
    code = _code()
    ret = _returned(rng, code, lose)
    Y = rng.normal(size=(ret.size, columns)).astype(dtype)
    code.decode(Y, ret)  # the pattern cached: the next decode is a hit
    Yb = Y.copy()
    Yb[rng.integers(ret.size), rng.integers(columns)] = bad  # most rows are results no estimate uses
    with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains non-finite"):
        code.decode(Yb, ret)


def test_decoder_map_keeps_other_matrices_dense():
    rng = np.random.default_rng(0)
    assert isinstance(decoder_map(rng.normal(size=(6, 9))), LinearMap)
    D = np.zeros((6, 9))
    D[np.arange(6), [3, 1, 4, 0, 5, 8]] = 1.0
    D[2, 4] = 2.0  # not weight 1: a real row
    D[5, 7] = 0.5  # two nonzeros: a real row
    dec = decoder_map(D)
    assert isinstance(dec, SelectionMap)
    assert dec.other.tolist() == [2, 5]
    np.testing.assert_array_equal(dec.dense(), D)
    Y = rng.normal(size=(9, 3))
    np.testing.assert_allclose(dec.apply(Y, "Y", check_result=True), D @ Y, rtol=1e-15)
    order = rng.permutation(9)
    want = np.empty_like(D)
    want[:, order] = D
    np.testing.assert_array_equal(dec.reordered(order).dense(), want)
    big = np.full((9, 3), 1e308)  # finite data whose product overflows: returned, as a plain product is
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(dec.apply(big, "Y", check_result=True), D @ big)


@pytest.mark.parametrize("columns", [SMALL_PRODUCT // (100 * 100), 3, 500])  # the small-kernel case, both sides
def test_linear_map_with_unused_columns_checks_every_row(columns):
    rng = np.random.default_rng(1)
    M = rng.normal(size=(100, 100))
    M[:, ::3] = 0.0  # unused columns and no row without zeros
    lm = LinearMap(M)
    Y = rng.normal(size=(100, columns))
    for _ in range(2):
        np.testing.assert_allclose(lm.apply(Y, "Y", check_result=True), M @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lm.apply(Y.astype(np.float32), "Y", check_result=True), M @ Y, rtol=1e-4, atol=1e-4)
    for row in (0, 1):  # an unused row and a used one
        Yb = Y.copy()
        Yb[row, -1] = np.nan
        for data in (Yb, Yb.astype(np.float32), Yb.reshape(100, columns, 1)):
            with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains 1 non-finite"):
                lm.apply(data, "Y", check_result=True)
    out = lm.apply(Y, "Y", check_result=True)
    out[:] = 0.0  # the result is the caller's: the map is unaffected
    np.testing.assert_allclose(lm.apply(Y, "Y", check_result=True), M @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(lm.M, M)


@pytest.mark.parametrize("lam", [0.0, 1e-4])
def test_cubic_spline_rows_at_knots_skip_the_solve(lam):
    from scipy.interpolate import CubicSpline, make_smoothing_spline

    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(-1, 1, 40))
    z = np.concatenate([t[[0, 7, 39]], rng.uniform(t[0], t[-1], 5)])  # knots (one-hot when lam = 0) and others
    W = cubic_spline_weights(t, z, lam)
    eye = np.eye(t.size)
    if lam == 0:
        ref = CubicSpline(t, eye, bc_type="natural")(z)
        np.testing.assert_array_equal(W[:3], eye[[0, 7, 39]])
    else:
        ref = np.stack([make_smoothing_spline(t, e, lam=t.size * lam)(z) for e in eye], axis=1)
    np.testing.assert_allclose(W, ref, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("beta", ["chebyshev2-nested", "chebyshev2"])  # a SelectionMap D_F / a dense LinearMap
def test_the_last_patterns_path_for_every_dtype_and_shape(beta):
    """Repeated decodes of one pattern (the miss, then the last pattern's path) in float64, float32, float16 and
    integers, results of shape (n,), (n, m) and (n, a, b), alternating: each equals D_F @ Y in its float dtype and
    shape; a non-finite value in any row of any shape and float dtype raises on the last pattern's path."""
    code = GCC(8, 40, beta=beta)
    rng = np.random.default_rng(4)
    ret = rng.permutation(np.setdiff1d(np.arange(40), [3, 17, 30]))
    D = code.decoding_matrix(ret)
    base = rng.normal(size=(ret.size, 6))
    shapes = [(ret.size,), (ret.size, 6), (ret.size, 2, 3)]
    for _ in range(2):
        for dtype in (np.float64, np.float32, np.float16, np.int64):
            for shape in shapes:
                Y = (base[:, 0] if len(shape) == 1 else base.reshape(shape)) * (10 if dtype == np.int64 else 1)
                Y = Y.astype(dtype)
                want = (D @ Y.reshape(ret.size, -1).astype(np.float64)).reshape((8, *shape[1:]))
                got = code.decode(Y, ret)
                assert got.shape == want.shape
                assert got.dtype == (np.float64 if dtype == np.int64 else dtype)
                tol = 1e-10 if dtype in (np.float64, np.int64) else 1e-4 if dtype == np.float32 else 2e-2
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)
    assert code._last[3] is not None  # the float32 product kept beside the float64 one
    for dtype in (np.float64, np.float32):
        for shape in shapes:
            for row in range(ret.size):
                Yb = (base[:, 0] if len(shape) == 1 else base.reshape(shape)).astype(dtype)
                Yb[row] = np.nan if row % 2 else np.inf
                with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains non-finite"):
                    code.decode(Yb, ret)
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode(base[:-1], ret)
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode(np.float64(1.0), ret)


def test_the_last_list_pattern_is_a_copy_of_the_callers_list():
    """Indices in a list equal to the last list pattern's take its product; the caller changing their list (or
    passing a new one) decodes the new pattern, invalid indices still raise, a non-finite row raises, and a
    pickled copy starts without the pattern."""
    import pickle

    code = GCC(8, 40, beta="chebyshev2")
    rng = np.random.default_rng(5)
    ret = rng.permutation(np.setdiff1d(np.arange(40), [3, 17, 30])).tolist()
    Y = rng.normal(size=(len(ret), 4))
    for _ in range(3):
        np.testing.assert_allclose(code.decode(Y, list(ret)), code.decoding_matrix(ret) @ Y, rtol=1e-12, atol=1e-12)
    assert code._last_list[0] == ret and code._last_list[0] is not ret
    ret2 = list(ret)
    code.decode(Y, ret2)
    ret2[0] = 3  # the caller reuses their list for another pattern
    np.testing.assert_allclose(code.decode(Y, ret2), code.decoding_matrix(ret2) @ Y, rtol=1e-12, atol=1e-12)
    ret2[1] = 40
    with pytest.raises(ValueError, match="out-of-range"):
        code.decode(Y, ret2)
    ret2[1] = ret2[2]
    with pytest.raises(ValueError, match="more than once"):
        code.decode(Y, ret2)
    code.decode(Y, ret)
    for row in range(len(ret)):
        Yb = Y.copy()
        Yb[row, row % 4] = np.nan
        with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains non-finite"):
            code.decode(Yb, list(ret))
    with pytest.raises(ValueError, match="one result per returned worker"):
        code.decode(Y[:-1], ret)
    copy = pickle.loads(pickle.dumps(code))
    assert copy._last_list == (None, None, None)
    np.testing.assert_allclose(copy.decode(Y, ret), code.decode(Y, ret), rtol=1e-12, atol=1e-12)
