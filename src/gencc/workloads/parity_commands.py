"""`gencc parity train`: ParM's parity model for your own model (`gencc.workloads.parity_training`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from .._cli_options import out_file, refuse

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


def parity_train_command(
    model: Annotated[str, typer.Option(help="your model: an import path package.module:attr (a torch module, or a "
                                            "zero-argument factory of one) or a .pt2 / TorchScript file")],
    data: Annotated[Path, typer.Option(help="training inputs: a .npy or .npz file, shape (n, *input shape)")],
    out: Annotated[Path, typer.Option(help="parity weights to write (.pt); the metadata goes beside it (.json), a "
                                           "checkpoint (.ckpt) while training", callback=out_file)],
    k: Annotated[int, typer.Option("--k", min=2, max=4, help="inputs per parity query (2 to 4)")] = 2,
    packed: Annotated[bool, typer.Option(help="the parity model takes the k inputs stacked (its first Conv / "
                                              "Linear layer gets k times the input channels)")] = False,
    input_shape: Annotated[str | None, typer.Option(help="the shape of one input, e.g. 1,8,8 (default: read from "
                                                         "--data)")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="epochs of --per-epoch random k-tuples each (the built-in "
                                                    "workloads' setting)")] = 40,
    per_epoch: Annotated[int, typer.Option(min=1, help="random k-tuples per epoch")] = 8192,
    seed: Annotated[int, typer.Option(min=0, help="seeds the k-tuples and the held-out split")] = 0,
    fresh: Annotated[bool, typer.Option(help="ignore a checkpoint from an interrupted run")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Train ParM's parity model for your model: its own architecture, from its weights, so that
    F_P(x_1 + ... + x_k) ~ f(x_1) + ... + f(x_k) on random k-tuples of the training inputs. Resumable: rerun the
    same command after an interruption. Serve it with `gencc serve --model SPEC --parity OUT --scheme sgcc-parity`."""
    if out.suffix in (".json", ".ckpt"):
        raise refuse("--out", f"--out is the weights file (e.g. parity.pt); {out.suffix} is the metadata's or the "
                              "checkpoint's suffix")
    m, X = load_cli_model(model, input_shape, data)
    from .parity_training import MIN_INPUTS, meta_path, parity_module, train_parity_model

    if len(X) < max(MIN_INPUTS, 2 * k):
        raise refuse("--data", f"parity training needs at least {max(MIN_INPUTS, 2 * k)} inputs, got {len(X)}")
    try:
        parity_module(m, k, packed)  # refuses a model it cannot train (a plain callable, --packed unsupported)
    except ValueError as e:
        raise refuse("--packed" if packed else "--model", str(e)) from None
    meta = train_parity_model(m, X, k, out, packed=packed, epochs=epochs, per_epoch=per_epoch, seed=seed,
                              progress=progress, resume=not fresh)
    h = meta["held_out"]
    typer.echo(f"parity model for {m.name} (k={k}{', packed' if packed else ''}) -> {out} and {meta_path(out).name}; "
               f"{meta['train_seconds']:.1f} s; held out ({meta['n_held_out']} inputs): reconstruction rel_mse "
               f"{h['rel_mse']:.3f}, top-1 agreement {h['agreement']:.3f}")
