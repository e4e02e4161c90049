"""Point designs on [-1, 1] against their closed forms (docs/design.md section 1)."""

import numpy as np
import pytest

from gencc.rkhs import points


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 25, 100])
def test_equispaced_closed_form(n):
    p = points.equispaced(n)
    expected = np.array([0.0]) if n == 1 else -1.0 + 2.0 * np.arange(n) / (n - 1)
    assert p.shape == (n,)
    np.testing.assert_allclose(p, expected, atol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 25, 100])
def test_chebyshev1_closed_form(n):
    p = points.chebyshev1(n)
    expected = np.sort([np.cos((2 * j - 1) * np.pi / (2 * n)) for j in range(1, n + 1)])
    assert p.shape == (n,)
    np.testing.assert_allclose(p, expected, atol=1e-15)
    assert np.all(np.abs(p) < 1.0)  # interior points


@pytest.mark.parametrize("n", [2, 3, 7, 12, 25, 100])
def test_chebyshev2_closed_form(n):
    p = points.chebyshev2(n)
    expected = np.sort([np.cos((j - 1) * np.pi / (n - 1)) for j in range(1, n + 1)])
    assert p.shape == (n,)
    np.testing.assert_allclose(p, expected, atol=1e-15)
    assert p[0] == -1.0 and p[-1] == 1.0


@pytest.mark.parametrize("name", points.DESIGNS)
@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_designs_sorted_distinct_in_range(name, n):
    p = points.design(name, n)
    assert p.shape == (n,)
    assert np.all(np.diff(p) > 0)
    assert p.min() >= -1.0 and p.max() <= 1.0


def test_chebyshev1_12_is_subset_of_chebyshev2_25():
    a, b = points.chebyshev1(12), points.chebyshev2(25)
    dist = np.abs(a[:, None] - b[None, :]).min(axis=1)
    assert np.all(dist < 1e-14)


def test_unknown_design_raises():
    with pytest.raises(ValueError, match="unknown point design"):
        points.design("halton", 5)


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_bad_n_raises(n):
    with pytest.raises(ValueError, match="positive integer"):
        points.equispaced(n)


@pytest.mark.parametrize("K,N", [(3, 10), (12, 25), (10, 40), (7, 7), (20, 23)])
@pytest.mark.parametrize("base", ["chebyshev2", "equispaced"])
def test_nested_contains_anchors_and_keeps_n_distinct(K, N, base):
    alpha = points.chebyshev1(K)
    b = points.nested(points.design(base, N), alpha)
    assert b.shape == (N,)
    assert np.all(np.diff(b) > 0)  # sorted and distinct
    for a in alpha:
        assert np.any(b == a)
    # only the K moved points differ from the base design
    assert np.sum(~np.isin(b, points.design(base, N))) <= K


def test_nested_too_many_anchors_raises():
    with pytest.raises(ValueError, match="cannot nest"):
        points.nested(points.chebyshev2(3), points.chebyshev1(4))
