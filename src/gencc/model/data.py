"""A user's inputs for their model: a `.npy` / `.npz` file (or an array) of training or demo inputs, and the
`C,H,W` shapes the command line takes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .._util.arrays import to_numpy

#: the array names looked for in an .npz holding several
NPZ_KEYS = ("X", "x", "inputs", "data", "X_train")


def parse_shape(text: str) -> tuple[int, ...]:
    """'1,8,8' (or '1x8x8') -> (1, 8, 8): positive integers."""
    parts = [p for p in str(text).replace("x", ",").replace(" ", "").split(",") if p]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ValueError(f"an input shape is positive integers separated by commas, like 1,8,8; got {text!r}")
    return shape


def load_inputs(data: Any, in_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Inputs (n, *in_shape) as float64 from an array or a `.npy` / `.npz` file (an .npz with one array, or one
    named X, x, inputs, data or X_train); rows are reshaped to `in_shape` when it is given and the sizes agree."""
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if not path.is_file():
            raise ValueError(f"data file {path} does not exist (or is a folder)")
        if path.suffix not in (".npy", ".npz"):
            raise ValueError(f"data file {path} must be .npy or .npz (numpy.save / numpy.savez of the inputs)")
        try:
            loaded = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise ValueError(f"cannot read {path} as a numpy file ({err})") from None
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                keys = list(loaded.files)
                key = keys[0] if len(keys) == 1 else next((k for k in NPZ_KEYS if k in keys), None)
                if key is None:
                    raise ValueError(f"{path} holds arrays {keys}; name the inputs one of {', '.join(NPZ_KEYS)}")
                arr = loaded[key]
        else:
            arr = loaded
        what = str(path)
    else:
        arr, what = np.asarray(to_numpy(data)), "data"
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{what}: inputs must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim < 2 or len(arr) == 0:
        raise ValueError(f"{what}: expected inputs of shape (n, *input shape), got {arr.shape}")
    if in_shape is not None and arr.shape[1:] != tuple(in_shape):
        if int(np.prod(arr.shape[1:])) != int(np.prod(in_shape)):
            raise ValueError(f"{what}: inputs of shape {arr.shape[1:]} do not fit the input shape {tuple(in_shape)}")
        arr = arr.reshape(len(arr), *in_shape)
    if not np.isfinite(arr).all():
        raise ValueError(f"{what}: the inputs contain NaN or inf")
    return arr
