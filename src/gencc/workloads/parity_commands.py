"""The command line's loaders of a user's model and inputs (--model, --input-shape, --data): usage errors naming
the option."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cli.options import refuse


def load_cli_model(spec: str, input_shape: str | None, option: str = "--model"):  # noqa: ANN201
    """The Model of --model SPEC (with --input-shape C,H,W): a usage error naming the option when it fails."""
    from ..model_adapter import as_model
    from ..model_data import parse_shape

    shape = None
    if input_shape is not None:
        try:
            shape = parse_shape(input_shape)
        except ValueError as e:
            raise refuse("--input-shape", str(e)) from None
    try:
        return as_model(spec, input_shape=shape)
    except ValueError as e:
        raise refuse(option, str(e)) from None


def load_cli_inputs(path: Path, in_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The inputs of --data FILE (.npy / .npz) as float64, rows reshaped to `in_shape` when given; refused (exit 2)
    naming --data."""
    from ..model_data import load_inputs

    try:
        return load_inputs(path, in_shape)
    except ValueError as e:
        raise refuse("--data", str(e)) from None


def load_cli_data(path: Path, model) -> object:  # noqa: ANN001
    """The inputs of --data FILE, checked against the model (its input shape read from them when unknown)."""
    X = load_cli_inputs(path, model.in_shape)
    try:
        model(X[:2])
    except Exception as e:  # noqa: BLE001 (the user's model may raise anything on inputs it cannot take)
        lines = str(e).strip().splitlines() or [""]
        raise refuse("--data", f"{model.name} fails on inputs of shape {X.shape[1:]} from {path}: "
                               f"{type(e).__name__}: {lines[0][:200]}") from None
    return X
