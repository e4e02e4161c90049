"""Array-kind plumbing: numpy in gives numpy out, torch in gives torch out.

torch is imported lazily, only when the caller already handed us a tensor, so `import gencc` stays light.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_torch(x: Any) -> bool:
    """True when `x` is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x: Any) -> np.ndarray:
    """A numpy view or copy of a numpy array, torch tensor or nested sequence."""
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


def apply_matrix(M: np.ndarray, data: Any, what: str, nonfinite: str | None = None) -> Any:
    """Return M @ data over the first axis of `data`, in data's array kind, device and float dtype.

    M is built in float64; it is cast to the data's float dtype before the product (float32 data stays
    float32, which is what a GPU or a float32 network wants). Non-finite data raises a ValueError (with
    the `nonfinite` message when given).
    """
    if is_torch(data):
        import torch

        if not torch.all(torch.isfinite(data)):
            check_finite(data.detach().cpu().numpy(), what, nonfinite)
        dtype = data.dtype if data.is_floating_point() else torch.get_default_dtype()
        flat = data.reshape(data.shape[0], _row_size(data.shape)).to(dtype)
        # a copy: M may be a code's read-only matrix, which torch.as_tensor would share and warn about
        Mt = torch.tensor(M, dtype=dtype, device=data.device)
        return (Mt @ flat).reshape((M.shape[0], *data.shape[1:]))
    arr = np.asarray(data)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{what} must be a numeric array, got dtype {arr.dtype}")
    dtype = float_dtype(arr)
    arr = arr.astype(dtype, copy=False)
    check_finite(arr, what, nonfinite)
    flat = arr.reshape(arr.shape[0], _row_size(arr.shape))
    return (M.astype(dtype, copy=False) @ flat).reshape((M.shape[0], *arr.shape[1:]))


def take_rows(Xt: Any, rows: Any) -> Any:
    """Rows `rows` of coded inputs Xt stacked into one array of Xt's kind: Xt is an array (N, ...) or, when the
    coded inputs differ in shape (packed parity queries), a list of N arrays; the rows taken must match."""
    rows = [int(r) for r in np.asarray(rows).ravel()]
    if not isinstance(Xt, list):
        return Xt[np.asarray(rows, dtype=np.int64)] if not is_torch(Xt) else Xt[rows]
    parts = [Xt[r] for r in rows]
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) > 1:
        raise ValueError(f"coded inputs of different shapes {sorted(shapes)} cannot be stacked")
    if parts and is_torch(parts[0]):
        import torch

        return torch.stack(parts)
    return np.stack(parts) if parts else np.zeros((0,))


def _row_size(shape: tuple) -> int:
    """Entries per row; explicit because reshape(0, -1) is ambiguous (no results returned at all)."""
    return int(np.prod(shape[1:], dtype=np.int64))
