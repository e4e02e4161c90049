"""Array-kind plumbing: numpy in gives numpy out, torch in gives torch out.

torch is imported lazily, only when the caller already handed us a tensor, so `import gencc` stays light.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np


def is_torch(x: Any) -> bool:
    """True when `x` is a torch tensor (checked without importing torch)."""
    if type(x) is np.ndarray:  # the common case, asked several times per job
        return False
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x: Any) -> np.ndarray:
    """A numpy view or copy of a numpy array, torch tensor or nested sequence."""
    if type(x) is np.ndarray:
        return x
    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def float_dtype(x: np.ndarray) -> np.dtype:
    """The float dtype data of this dtype is computed in: float32 stays float32, everything else float64."""
    if x.dtype in (np.float32, np.float16):
        return x.dtype
    return np.dtype(np.float64)


def check_finite(x: np.ndarray, what: str, message: str | None = None) -> None:
    """Raise a ValueError naming `what` (or saying `message`) when `x` holds NaN or infinity."""
    if not np.all(np.isfinite(x)):
        if message is not None:
            raise ValueError(message)
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{what} contains {bad} non-finite value(s) (NaN or inf); coded computing needs "
                         "finite data: clean or drop those entries first")


_F64 = np.dtype(np.float64)
#: LinearMap looks for a row without zeros in matrices of at most this many columns
DENSE_ROW_MAX = 4096
_SUM = np.add.reduce  # called positionally: keywords cost a microsecond on the hot path
#: OpenBLAS multiplies products of at most this many multiply-adds (rows x inner x columns) by its small-matrix
#: kernel, much faster there than its blocked one: LinearMap's checksum row is left out where it would push a
#: product past this size (the data's own sum is cheaper there, as the data sits in cache)
SMALL_PRODUCT = 1_000_000


def all_finite(x: np.ndarray) -> bool:
    """True when `x` holds no NaN or infinity: one sum (NaN and inf propagate, so a finite sum proves it) with
    no temporary, and an exact scan only when the sum is not finite (which finite values can give by overflow)."""
    return math.isfinite(_SUM(x, None)) or bool(np.isfinite(x).all())


def apply_matrix(M: np.ndarray, data: Any, what: str, nonfinite: str | None = None) -> Any:
    """Return M @ data over the first axis of `data`, in data's array kind, device and float dtype.

    M is built in float64; it is cast to the data's float dtype before the product (float32 data stays
    float32, which is what a GPU or a float32 network wants). Non-finite data raises a ValueError (with
    the `nonfinite` message when given). For a matrix applied many times, keep a `LinearMap` instead.
    """
    return LinearMap(M).apply(data, what, nonfinite)


class LinearMap:
    """A fixed float64 matrix M (kept read-only) applied to data over its first axis, in the data's array kind,
    device and float dtype, with M's casts (float32, torch tensors per device) kept for the next call.

    `apply(..., check_result=True)` proves the data finite from the product instead of the data: NaN and inf
    propagate through M @ data wherever M's entry is not zero, so for numpy float data one row of the product
    suffices when M has a row without zeros (found once; smoothing and interpolation weights have one); when M
    has all-zero columns instead (workers no estimate uses), M is kept with a checksum row of ones under it
    (one allocation, M a view of its first rows) and that row of the one product proves every data row finite;
    otherwise the whole product's sum does. The data itself is scanned only when that fails, to tell non-finite
    data (refused) from an overflow (returned, as before). Nothing is copied or re-checked per call beyond the
    product and one row's sum.
    """

    __slots__ = ("M", "_casts", "_zero64", "_dense", "_aug")

    def __init__(self, M: np.ndarray):
        M = np.asarray(M, dtype=np.float64)
        if M.flags.writeable:
            M = M.view()
            M.setflags(write=False)
        self.M = M
        self._casts: dict[Any, tuple[Any, Any]] = {}
        self._zero64: np.ndarray | None | bool = False  # M's all-zero columns (None: none), once found
        self._dense = -1  # a row of M without zeros (-1: none)
        self._aug: np.ndarray | None = None  # M with a row of ones under it, where M has all-zero columns

    def _cast(self, dtype: np.dtype) -> tuple[np.ndarray, int, np.ndarray | None, np.ndarray | None]:
        """(M in `dtype`, a row of it without zeros or -1, the indices of its all-zero columns or None, M with a
        checksum row of ones under it or None): found once per dtype (a cast can underflow weights to zero)."""
        got = self._casts.get(dtype)
        if got is None:
            Mc = self.M.astype(dtype, copy=False)
            K, F = Mc.shape
            # (wide matrices: the product's scan is 1/F of it; their rows have zeros where weights underflow)
            dense = next((k for k in range(K) if np.count_nonzero(Mc[k]) == F), -1) if F <= DENSE_ROW_MAX else -1
            if dense >= 0:  # a row without zeros: no column is all zero
                zero = None
            else:
                zero = np.flatnonzero(~Mc.any(axis=0)) if K else np.arange(F)
                zero = zero if zero.size else None
            aug = None
            if zero is not None and K:
                aug = np.empty((K + 1, F), dtype=dtype)
                aug[:K] = Mc
                aug[K] = 1.0
                Mc = aug[:K]
                Mc.setflags(write=False)
            if dtype == np.float64:
                if aug is not None:
                    self._aug, self.M = aug, Mc
                self._dense, self._zero64 = dense, zero
            got = self._casts[dtype] = (Mc, dense, zero, aug)
        return got

    def apply(self, data: Any, what: str, nonfinite: str | None = None, *, check_result: bool = False) -> Any:
        """M @ data (see the class); non-finite data raises a ValueError naming `what` (or saying `nonfinite`)."""
        if type(data) is not np.ndarray:
            if is_torch(data):
                return self._apply_torch(data, what, nonfinite, check_result)
            data = np.asarray(data)
        dt = data.dtype
        if dt is not _F64 and dt != np.float64 and dt != np.float32:
            if dt.kind == "O" or not np.issubdtype(dt, np.number):
                raise ValueError(f"{what} must be a numeric array, got dtype {dt}")
            dt = float_dtype(data)
            data = data.astype(dt, copy=False)
        shape = data.shape
        flat = data if len(shape) == 2 else data.reshape(shape[0], math.prod(shape[1:]))
        if not check_result:
            if not all_finite(flat):
                check_finite(flat, what, nonfinite)
            out = (self.M if dt is _F64 else self.M.astype(dt, copy=False)) @ flat
        else:
            out = self.product(dt, what, nonfinite)(flat)
        return out if len(shape) == 2 else out.reshape((self.M.shape[0], *shape[1:]))

    def product(self, dtype: np.dtype, what: str, nonfinite: str | None = None
                ) -> Callable[[np.ndarray], np.ndarray]:
        """data -> `apply(data, what, nonfinite, check_result=True)` for numpy data of this float dtype and shape
        (n, m), as one closure over what it needs (kept per dtype and message; a decode's hot path keeps it for
        its pattern: no attribute look-ups or branches on M per call)."""
        key = (dtype, what, nonfinite)
        fn = self._casts.get(key)
        if fn is None:
            fn = self._casts[key] = _product(*self._cast(np.dtype(dtype)), what, nonfinite)
        return fn

    def _apply_torch(self, data: Any, what: str, nonfinite: str | None, check_result: bool) -> Any:
        import torch

        dtype = data.dtype if data.is_floating_point() else torch.get_default_dtype()
        key = (dtype, data.device)
        got = self._casts.get(key)
        if got is None:
            # a copy: torch.as_tensor would share the read-only M and warn about it
            Mt = torch.tensor(self.M, dtype=dtype, device=data.device)
            zero = torch.nonzero(~(Mt != 0).any(dim=0)).flatten() if Mt.shape[0] else torch.arange(Mt.shape[1])
            got = self._casts[key] = (Mt, zero if zero.numel() else None)
        Mt, zero = got
        flat = data.reshape(data.shape[0], math.prod(data.shape[1:])).to(dtype)

        def finite(x: Any) -> bool:
            x = x.detach()
            return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())

        if not check_result and not finite(flat):
            check_finite(flat.detach().cpu().numpy(), what, nonfinite)
        out = Mt @ flat
        if check_result and (not finite(out) or (zero is not None and not finite(flat[zero]))):
            check_finite(flat.detach().cpu().numpy(), what, nonfinite)
        return out.reshape((Mt.shape[0], *data.shape[1:]))


#: a checked row of at most this many entries is summed by Python (its list), a longer one by a BLAS dot with ones
ROW_LIST_MAX = 16


def row_checker(dtype: np.dtype) -> Callable[[np.ndarray], bool]:
    """row -> whether the sum of a 1-D `dtype` row is finite (NaN and inf propagate, so a finite sum proves the row
    finite): Python's sum of its list up to ROW_LIST_MAX entries, else a dot with ones (about 0.6 us at any length
    up to thousands, against 1.3 us for numpy's reduce), the ones kept for the last length seen."""
    isfinite = math.isfinite
    ones = [np.ones(0, dtype=dtype)]

    def finite(row: np.ndarray) -> bool:
        n = len(row)
        if n <= ROW_LIST_MAX:
            return isfinite(sum(row.tolist()))
        o = ones[0]
        if len(o) != n:
            o = ones[0] = np.ones(n, dtype=dtype)
        return isfinite(o.dot(row))
    return finite


def _product(M: np.ndarray, k: int, zero: np.ndarray | None, aug: np.ndarray | None, what: str,
             nonfinite: str | None) -> Callable[[np.ndarray], np.ndarray]:
    """LinearMap.product's closure for M's structure: a row without zeros (k >= 0), a checksum row (aug), or
    the sum of the product or of the data, whichever is smaller (no all-zero column). Products of at most
    SMALL_PRODUCT multiply-adds call M.dot (bound once), the same BLAS product as `@` without the ufunc's
    dispatch (about a microsecond, a tenth of a 100 x 150 x 10 product)."""
    isfinite, tot, dot = math.isfinite, _SUM, M.dot
    K, F = M.shape
    small = SMALL_PRODUCT // max(1, K + (aug is not None))  # data sizes up to which M.dot is used

    def failed(data: np.ndarray, out: np.ndarray) -> np.ndarray:
        check_finite(data, what, nonfinite)  # raises unless the data is finite (the sum overflowed)
        return out

    finite_row = row_checker(M.dtype)
    if k >= 0:
        def by_row(data: np.ndarray) -> np.ndarray:
            out = dot(data) if data.size <= small else M @ data
            row = out[k]
            return out if finite_row(row) else failed(data, out)
        return by_row
    if zero is None:
        by_out = K <= F  # every data row reaches the product: the smaller of the two proves the data finite

        def by_sum(data: np.ndarray) -> np.ndarray:
            out = dot(data) if data.size <= small else M @ data
            return out if isfinite(tot(out if by_out else data, None)) else failed(data, out)
        return by_sum
    if aug is None:  # no rows: nothing reaches the product
        def by_data(data: np.ndarray) -> np.ndarray:
            out = M @ data
            return out if isfinite(tot(data, None)) else failed(data, out)
        return by_data

    aug_dot = aug.dot

    def by_checksum(data: np.ndarray) -> np.ndarray:
        size = data.size
        if size * K <= SMALL_PRODUCT < size * (K + 1):  # the checksum row would cost the small kernel
            out = dot(data)
            return out if isfinite(tot(data, None)) else failed(data, out)
        full = aug_dot(data) if size <= small else aug @ data
        out = full[:K]
        return out if finite_row(full[K]) else failed(data, out)
    return by_checksum


def take_rows(Xt: Any, rows: Any) -> Any:
    """Rows `rows` of Xt stacked into one array of Xt's kind (torch stays torch, on its device): Xt is an array
    (N, ...) or a list of N arrays (coded inputs that differ in shape: packed parity queries); the rows taken
    from a list must match in shape."""
    if not isinstance(Xt, list):
        idx = np.asarray(rows, dtype=np.int64).ravel()
        if is_torch(Xt):
            import torch

            return Xt[torch.as_tensor(idx, device=Xt.device)]
        return Xt[idx]
    rows = [int(r) for r in np.asarray(rows).ravel()]
    parts = [Xt[r] for r in rows]
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) > 1:
        raise ValueError(f"coded inputs of different shapes {sorted(shapes)} cannot be stacked")
    if parts and is_torch(parts[0]):
        import torch

        return torch.stack(parts)
    return np.stack(parts) if parts else np.zeros((0,))
