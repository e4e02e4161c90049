"""A decoding matrix most of whose rows each select one result, kept as that selection and its few other rows.

GCC's default decoder interpolates through systematic workers (a worker on every data point): each input whose
worker returned is decoded as that worker's result, exactly, so its row of D_F is one-hot with weight 1 and
only the inputs whose worker straggled have rows with real weights. `decoder_map` keeps such a D_F as a
`SelectionMap`: the decode is a gather of the selected results plus one small product for the other rows, far
below D_F @ Y, with the same values (a one-hot row's product is its result exactly); other matrices stay a
`gencc._util.arrays.LinearMap`. Both give `apply`, `product`, `M` and `dense()`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._util.arrays import _F64, SMALL_PRODUCT, LinearMap, check_finite, row_checker


def decoder_map(D: np.ndarray) -> LinearMap | SelectionMap:
    """D (K, F) as a `SelectionMap` when at least half its rows are one-hot with weight 1, else a LinearMap."""
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] == 0 or D.shape[1] == 0:
        return LinearMap(D)
    K = D.shape[0]
    top = np.argmax(D, axis=1)  # one pass; a one-hot row's 1 is its largest entry
    cand = np.flatnonzero(D[np.arange(K), top] == 1.0)
    if 2 * cand.size < K:
        return LinearMap(D)
    one = np.array([np.count_nonzero(D[k]) == 1 for k in cand.tolist()], dtype=bool)
    sel = cand[one]
    if 2 * sel.size < K:
        return LinearMap(D)
    cols = top[sel]
    other = np.setdiff1d(np.arange(K), sel)
    return SelectionMap(D.shape, sel, cols, other, D[other])


class SelectionMap:
    """A (K, F) matrix whose rows `sel` are one-hot (weight 1 on column `cols`) and whose rows `other` are
    `weights`, applied to data over its first axis like a LinearMap (numpy in, numpy out; torch tensors and
    other dtypes go through the dense matrix). Finite data is proven by a checksum row of ones in the one product the
    decode makes (every data row reaches it, used or not); the data is scanned only when that fails, to tell
    non-finite data (refused) from an overflow."""

    __slots__ = ("shape", "sel", "cols", "other", "_src", "_aug", "_lm", "_fns")

    def __init__(self, shape: tuple[int, int], sel: np.ndarray, cols: np.ndarray, other: np.ndarray,
                 weights: np.ndarray):
        K, F = shape
        self.shape = (K, F)
        self.sel, self.cols, self.other = sel, cols, other
        src = np.zeros(K, dtype=np.intp)
        src[sel] = cols
        self._src = src  # the data row each output row starts as (the other rows are overwritten)
        aug = np.empty((other.size + 1, F))
        aug[:-1] = weights
        aug[-1] = 1.0
        self._aug = aug
        self._lm: LinearMap | None = None
        self._fns: dict[tuple, Callable[[np.ndarray], np.ndarray]] = {}
        for a in (sel, cols, other, src, aug):
            a.setflags(write=False)

    def dense(self) -> np.ndarray:
        """A new writable (K, F) array of the matrix."""
        D = np.zeros(self.shape)
        D[self.sel, self.cols] = 1.0
        D[self.other] = self._aug[:-1]
        return D

    @property
    def M(self) -> np.ndarray:
        """The dense matrix, read-only (built on first use and kept)."""
        return self._linear().M

    def _linear(self) -> LinearMap:
        lm = self._lm
        if lm is None:
            lm = self._lm = LinearMap(self.dense())
        return lm

    def reordered(self, order: np.ndarray) -> SelectionMap:
        """The map with column i moved to column order[i] (the sorted workers put back in the caller's order)."""
        weights = np.empty_like(self._aug[:-1])
        weights[:, order] = self._aug[:-1]
        return SelectionMap(self.shape, self.sel, order[self.cols], self.other, weights)

    def product(self, dtype: np.dtype, what: str, nonfinite: str | None = None
                ) -> Callable[[np.ndarray], np.ndarray]:
        """data -> the product for numpy data of this float dtype and shape (F, m), as one closure (kept per
        dtype and message, as `LinearMap.product`)."""
        key = (np.dtype(dtype), what, nonfinite)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = _product(self._src, self._aug.astype(key[0], copy=False),
                                           self.other if self.other.size else None, what, nonfinite)
        return fn

    def apply(self, data: Any, what: str, nonfinite: str | None = None, *, check_result: bool = False) -> Any:
        """M @ data over data's first axis (see the class); non-finite data raises a ValueError."""
        if (type(data) is np.ndarray and (data.dtype is _F64 or data.dtype == np.float32) and data.ndim >= 2
                and data.shape[0] == self.shape[1]):
            shape = data.shape
            fn = self.product(data.dtype, what, nonfinite)
            if len(shape) == 2:
                return fn(data)
            return fn(data.reshape(shape[0], math.prod(shape[1:]))).reshape((self.shape[0], *shape[1:]))
        return self._linear().apply(data, what, nonfinite, check_result=check_result)


def _product(src: np.ndarray, aug: np.ndarray, other: np.ndarray | None, what: str, nonfinite: str | None
             ) -> Callable[[np.ndarray], np.ndarray]:
    """SelectionMap.product's closure: the selected rows gathered, the other rows and the checksum row from one
    product."""
    dot, finite_row = aug.dot, row_checker(aug.dtype)
    small = SMALL_PRODUCT // aug.shape[0]  # data sizes up to which aug.dot (no ufunc dispatch, the same product)

    def product(data: np.ndarray) -> np.ndarray:
        out = data.take(src, axis=0)
        full = dot(data) if data.size <= small else aug @ data
        if other is not None:
            out[other] = full[:-1]
        if not finite_row(full[-1]):
            check_finite(data, what, nonfinite)  # raises unless the data is finite (the sum overflowed)
        return out
    return product
