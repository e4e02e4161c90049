"""The command line's options for a user's model (--model, --input-shape, --data, --parity): loaded and checked
before any slow work, refused with the option's name (exit 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..serving.parity import PARITY_SCHEMES, parity_k
from .options import refuse

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


def check_model_options(workload: str | None, model: str | None, input_shape: str | None, data: Path | None,
                         parity: Path | None) -> None:
    if model is not None and workload is not None:
        raise refuse("--model", "give --model (your model) or --workload (a built-in one), not both")
    if model is None:
        for option, value in (("--input-shape", input_shape), ("--data", data), ("--parity", parity)):
            if value is not None:
                raise refuse(option, f"{option} goes with --model (your own model)")


def load_served_model(spec: str, input_shape: str | None, data: Path | None, parity: Path | None, scheme: str,
                K: int, workers: int, parm_k: int, check_results: str, packed: bool) -> tuple:  # noqa: N803
    """(Model, training inputs or None, parity model or None) of --model, each refused with the option's name."""
    m, X = load_cli_model(spec, input_shape, data)
    if X is None and (scheme.startswith("sgcc-parity") or check_results != "off"):
        what = "sgcc-parity calibrates" if scheme.startswith("sgcc-parity") else "--check-results calibrates"
        raise refuse("--data", f"{what} on your model's training inputs: give --data FILE.npy")
    pk = parity_k(scheme, K, workers, parm_k)
    if pk is None:
        if parity is not None:
            raise refuse("--parity", f"--parity applies to {' and '.join(PARITY_SCHEMES)} (and their -hedge forms), "
                                     f"not {scheme!r}")
        return m, X, None
    if parity is None:
        raise refuse("--parity", f"{scheme} runs a parity model for k={pk}: train one with `gencc parity train "
                                 f"--model {spec} --data FILE --K {pk} --out parity.pt`, then pass --parity parity.pt")
    from ..workloads.parity_training import load_parity_file

    try:
        return m, X, load_parity_file(parity, m, k=pk, packed=True if packed else None)
    except ValueError as e:
        raise refuse("--parity", str(e)) from None
