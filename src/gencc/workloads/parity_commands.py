"""The command line's loaders of a user's model and inputs (--model, --input-shape, --data): usage errors naming
the option."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..cli.options import refuse

#: the command-line option of each `gencc.errors.ModelError.source`
MODEL_OPTIONS = {"model": "--model", "input_shape": "--input-shape", "data": "--data"}


def load_cli_model(spec: str, input_shape: str | None, data: Path | None = None) -> tuple:
    """(Model, inputs of --data or None) of --model SPEC with --input-shape C,H,W: `gencc.model.load_model`, which
    builds the model and tries it once; a usage error (exit 2) naming the option to fix when it fails."""
    from ..model import ModelError, load_model

    try:
        return load_model(spec, input_shape, data)
    except ModelError as e:
        raise refuse(MODEL_OPTIONS.get(e.source, "--model"), str(e)) from None


def load_cli_inputs(path: Path, in_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The inputs of --data FILE (.npy / .npz) as float64, rows reshaped to `in_shape` when given; refused (exit 2)
    naming --data."""
    from ..model import load_inputs

    try:
        return load_inputs(path, in_shape)
    except ValueError as e:
        raise refuse("--data", str(e)) from None


