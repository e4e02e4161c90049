"""A job's inputs checked and converted: X, injected delays, deadlines, seeds; outputs in X's array kind."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._util.arrays import all_finite, is_torch, to_numpy
from .._util.validate import check_positive


def check_deadline(deadline: float | None) -> float | None:
    return check_positive("deadline", deadline, optional=True, unit="seconds")


def check_timeout(timeout: float) -> float:
    return check_positive("timeout", timeout, unit="seconds")  # type: ignore[return-value]


#: the generator of unseeded jobs: one for the process (seeding a fresh one from the OS costs more than the rest
#: of a small job's set-up; numpy's bit generators lock, so the jobs of `stream`'s threads can share it)
_UNSEEDED = np.random.default_rng()


def as_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return _UNSEEDED if seed is None else np.random.default_rng(seed)


NONFINITE_X = "X contains non-finite values (NaN or inf); coded computing needs finite inputs"


def check_inputs(X: Any, K: int) -> np.ndarray:
    """X as numpy, checked: first dimension K, numeric, finite."""
    if type(X) is np.ndarray and X.dtype.kind == "f" and X.ndim and X.shape[0] == K:  # the common case
        if not all_finite(X):
            raise ValueError(NONFINITE_X)
        return X
    if X is None or not hasattr(X, "shape") and not isinstance(X, (list, tuple)):
        raise ValueError(f"X must be an array of shape (K={K}, *in_shape), got {type(X).__name__}")
    Xn = np.asarray(to_numpy(X))
    if Xn.ndim == 0 or Xn.shape[0] != K:
        raise ValueError(f"X must have first dimension K={K} (one row per input), got shape {Xn.shape}")
    if Xn.dtype == object or not np.issubdtype(Xn.dtype, np.number):
        raise ValueError(f"X must be numeric, got dtype {Xn.dtype}")
    if not np.isfinite(Xn).all():
        raise ValueError(NONFINITE_X)
    return Xn


def restore_kind(out: np.ndarray, X: Any) -> Any:
    """numpy out for numpy in; a torch tensor on X's device (X's float dtype) for torch in."""
    if is_torch(X):
        import torch

        dtype = X.dtype if X.is_floating_point() else torch.get_default_dtype()
        return torch.as_tensor(out, device=X.device).to(dtype)
    return out


