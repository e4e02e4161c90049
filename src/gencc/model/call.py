"""The batch calling convention: the one place gencc calls f on inputs.

Every front end (simulate, jobs, serving, calibration) goes through `apply_batch`, so a function's calling
convention is decided once: a function marked `f.batched = True` (or called with `batched=True`) gets the
whole stack at once, any other gets one input at a time; the result is a float64 numpy array, one row per input.
What a user brings (a torch module, an import path, a saved file) becomes such a function through
`gencc.model.as_model`; the entry points call `gencc.model.resolve(f)` first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._util.arrays import is_torch, to_numpy

__all__ = ["apply_batch", "apply_one"]


def apply_batch(f: Callable, X: Any, batched: bool | None = None) -> np.ndarray:
    """f applied to every row of X as a float64 numpy array (len(X), *out_shape)."""
    if batched is None:
        batched = bool(getattr(f, "batched", False))
    if batched:
        out = np.asarray(to_numpy(f(X)), dtype=float)
    else:
        out = np.stack([np.asarray(to_numpy(f(X[i])), dtype=float) for i in range(len(X))])
    if out.ndim == 0 or out.shape[0] != len(X):
        got = "a scalar" if out.ndim == 0 else f"{out.shape[0]} outputs"
        raise ValueError(f"f returned {got} for {len(X)} inputs: a batched f must return one row per input")
    return out


def apply_one(f: Callable, x: Any, batched: bool | None = None) -> np.ndarray:
    """f applied to one input (a batch of one for a batched f), as a float64 numpy array."""
    x = x if is_torch(x) else np.asarray(x)
    return apply_batch(f, x[None], batched)[0]
