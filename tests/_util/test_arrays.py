"""Array-kind plumbing (gencc._util.arrays): numpy in gives numpy out, torch in gives torch out."""

import numpy as np
import pytest

import gencc
from gencc._util.arrays import apply_matrix, float_dtype, is_torch, take_rows, to_numpy


def test_take_rows_stacks_arrays_and_lists():
    Z = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(take_rows(Z, [2, 0]), Z[[2, 0]])
    np.testing.assert_array_equal(take_rows(list(Z), np.array([1, 3])), Z[[1, 3]])
    with pytest.raises(ValueError, match="different shapes"):
        take_rows([Z[0], Z[:2]], [0, 1])
    assert gencc.take_rows is take_rows


def test_apply_matrix_keeps_kind_and_float32():
    M = np.array([[1.0, 2.0], [0.5, -1.0]])
    X = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = apply_matrix(M, X, "X")
    assert out.dtype == np.float32 and out.shape == (2, 3)
    np.testing.assert_allclose(out, M @ X.astype(float), rtol=1e-6)
    assert apply_matrix(M, X.astype(int), "X").dtype == np.float64
    assert apply_matrix(np.zeros((3, 0)), np.zeros((0, 4)), "Y").shape == (3, 4)  # no results at all
    with pytest.raises(ValueError, match="Y contains 1 non-finite"):
        apply_matrix(M, np.array([[1.0, np.nan], [0.0, 1.0]]), "Y")
    with pytest.raises(ValueError, match="custom message"):
        apply_matrix(M, np.array([[1.0, np.inf], [0.0, 1.0]]), "Y", nonfinite="custom message")
    with pytest.raises(ValueError, match="numeric array"):
        apply_matrix(M, np.array([["a", "b"], ["c", "d"]]), "X")


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    M = np.array([[1.0, 2.0], [0.5, -1.0]])
    X = torch.arange(4, dtype=torch.float32).reshape(2, 2)
    out = apply_matrix(M, X, "X")
    assert is_torch(out) and out.dtype == torch.float32 and not is_torch(M)
    np.testing.assert_allclose(to_numpy(out), M @ to_numpy(X), rtol=1e-6)
    np.testing.assert_array_equal(to_numpy(take_rows([X[0], X[1]], [1, 0])), to_numpy(X)[[1, 0]])
    assert float_dtype(np.zeros(1, np.float16)) == np.float16 and float_dtype(np.zeros(1, int)) == np.float64


@pytest.mark.parametrize("columns", [3, 16, 17, 100])  # the checked row summed by Python / a dot with ones
@pytest.mark.parametrize("unused_column", [False, True])  # a row without zeros checked / the whole product
def test_linear_map_checks_the_data_through_the_product(columns, unused_column):
    from gencc._util.arrays import LinearMap

    rng = np.random.default_rng(0)
    M = rng.normal(size=(20, 6))
    if unused_column:
        M[:, 2] = 0.0  # a column no output uses: its data row is checked on its own
    else:
        M[np.arange(1, 20), np.arange(1, 20) % 6] = 0.0  # only row 0 has no zeros
    lm = LinearMap(M)
    Y = rng.normal(size=(6, columns))
    np.testing.assert_allclose(lm.apply(Y, "Y", check_result=True), M @ Y, rtol=1e-12, atol=1e-12)
    assert lm._dense == (-1 if unused_column else 0)
    for row in range(6):
        for bad in (np.nan, np.inf, -np.inf):
            Yb = Y.copy()
            Yb[row, columns - 1] = bad
            with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains 1 non-finite"):
                lm.apply(Yb, "Y", check_result=True)
            with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="custom"):
                lm.apply(Yb.astype(np.float32), "Y", "custom", check_result=True)
    big = np.full((6, columns), 1e308)  # finite data whose product overflows: returned, as a plain product is
    ones = LinearMap(np.ones((20, 6)))
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(2):
            out = ones.apply(big, "Y", check_result=True)
            assert not np.any(np.isfinite(out))
            np.testing.assert_array_equal(out, np.ones((20, 6)) @ big)
    assert not lm.M.flags.writeable
    np.testing.assert_array_equal(lm.M, M)


@pytest.mark.parametrize("shape", [(20, 6), (6, 20)])  # the data's sum proves it finite / the product's sum
@pytest.mark.parametrize("columns", [3, 9000])  # np.dot / @ (past SMALL_PRODUCT)
def test_linear_map_without_a_dense_row_or_unused_column(shape, columns):
    """Every row of M has a zero and every column a nonzero: the closure sums the smaller of the product and the
    data; each entry of the data made non-finite is refused, a product that overflows is returned."""
    from gencc._util.arrays import SMALL_PRODUCT, LinearMap

    rng = np.random.default_rng(1)
    K, F = shape
    M = rng.normal(size=shape)
    M[np.arange(K), np.arange(K) % F] = 0.0
    M[np.arange(F) % K, np.arange(F)] += 1.0  # no column all zero
    M[np.arange(K), np.arange(K) % F] = 0.0
    assert (M == 0).any(axis=1).all() and (M != 0).any(axis=0).all()
    assert (columns * K * F <= SMALL_PRODUCT) == (columns == 3)
    lm = LinearMap(M)
    Y = rng.normal(size=(F, columns))
    np.testing.assert_allclose(lm.apply(Y, "Y", check_result=True), M @ Y, rtol=1e-12, atol=1e-12)
    assert lm._dense == -1 and lm._zero64 is None
    for row in range(F):
        for bad in (np.nan, np.inf, -np.inf):
            Yb = Y.copy()
            Yb[row, rng.integers(columns)] = bad
            with np.errstate(invalid="ignore"), pytest.raises(ValueError, match="Y contains 1 non-finite"):
                lm.apply(Yb, "Y", check_result=True)
    big = np.full((F, columns), 1e308)
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(lm.apply(big, "Y", check_result=True), M @ big)


def test_linear_map_keeps_float32_and_torch():
    torch = pytest.importorskip("torch")
    from gencc._util.arrays import LinearMap

    M = np.array([[1.0, 0.0], [0.5, 0.0]])  # column 1 unused
    lm = LinearMap(M)
    X = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = lm.apply(X, "X", check_result=True)
    assert is_torch(out) and out.dtype == torch.float32
    np.testing.assert_allclose(to_numpy(out), M @ to_numpy(X), rtol=1e-6)
    with pytest.raises(ValueError, match="X contains 1 non-finite"):
        lm.apply(torch.tensor([[1.0, 2.0], [float("nan"), 4.0]]), "X", check_result=True)
    assert lm.apply(np.ones((2, 3), np.float32), "X", check_result=True).dtype == np.float32
