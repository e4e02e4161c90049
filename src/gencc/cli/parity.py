"""`gencc parity train`: a parity model (ParM) for your own model (`gencc.workloads.parity_training`): a network
F_P trained so that F_P(x_1 + ... + x_k) ~ f(x_1) + ... + f(x_k), which lets one parity worker cover any one of k
requests whose worker straggles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .model import load_cli_model
from .options import ShowProgress, integer, out_file, refuse
from .options import seed as check_seed


def parity_train_command(
    model: Annotated[str, typer.Option(metavar="SPEC", help="your model: package.module:attr (a torch module, or a "
                                                            "factory of one) or a .pt2 / TorchScript file")],
    data: Annotated[Path, typer.Option(help="training inputs: a .npy or .npz file, shape (n, *input shape)")],
    out: Annotated[Path, typer.Option(metavar="FILE", help="parity weights to write (.pt); the metadata (.json) and "
                                                           "a checkpoint (.ckpt) go beside it", callback=out_file)],
    k: Annotated[int, typer.Option("--K", metavar="K", help="the requests one parity worker covers: inputs "
                                                      "summed per parity query (2 to 4)",
                                   callback=integer(at_least=2, at_most=4))] = 2,
    packed: Annotated[bool, typer.Option("--packed-parity", help="the parity model takes the K inputs stacked (its "
                                                                 "first layer gets K times the channels)")] = False,
    input_shape: Annotated[str | None, typer.Option(help="the shape of one input, e.g. 1,8,8 (default: read from "
                                                         "--data)")] = None,
    epochs: Annotated[int, typer.Option(help="training epochs of --per-epoch random groups of k inputs each",
                                        callback=integer(at_least=1))] = 40,
    per_epoch: Annotated[int, typer.Option(help="random groups of k training inputs per epoch",
                                           callback=integer(at_least=1))] = 8192,
    seed: Annotated[int, typer.Option(help="seeds the random groups and the held-out split",
                                      callback=check_seed)] = 0,
    fresh: Annotated[bool, typer.Option("--fresh", help="ignore a checkpoint from an interrupted run")] = False,
    progress: ShowProgress = True,
) -> None:
    """Train a parity model F_P for your model f: a network of f's own architecture, started from f's weights and
    trained on random groups of k training inputs so that F_P(x_1 + ... + x_k) ~ f(x_1) + ... + f(x_k). Resumable:
    rerun the same command after an interruption. Serve it with `gencc serve --model SPEC --parity OUT --scheme
    sgcc-parity`.

    Served beside f, one parity worker then covers any one of k requests whose worker straggles: that request's
    answer is F_P's output on the sum of the k inputs minus the k - 1 answers that came back (ParM:
    parity models, SOSP 2019). With --packed-parity, F_P takes the k inputs stacked instead of summed."""
    if out.suffix in (".json", ".ckpt"):
        raise refuse("--out", f"--out is the weights file (e.g. parity.pt); {out.suffix} is the metadata's or the "
                              "checkpoint's suffix")
    m, X = load_cli_model(model, input_shape, data)
    from ..workloads.parity_training import MIN_INPUTS, meta_path, parity_module, train_parity_model

    if len(X) < max(MIN_INPUTS, 2 * k):
        raise refuse("--data", f"parity training needs at least {max(MIN_INPUTS, 2 * k)} inputs, got {len(X)}")
    try:
        parity_module(m, k, packed)  # refuses a model it cannot train (a plain callable, --packed unsupported)
    except ValueError as e:
        raise refuse("--packed-parity" if packed else "--model", str(e)) from None
    meta = train_parity_model(m, X, k, out, packed=packed, epochs=epochs, per_epoch=per_epoch, seed=seed,
                              progress=progress, resume=not fresh)
    h = meta["held_out"]
    typer.echo(f"parity model for {m.name} (k={k}{', packed' if packed else ''}) -> {out} and {meta_path(out).name}; "
               f"{meta['train_seconds']:.1f} s; held out ({meta['n_held_out']} inputs): reconstruction rel_mse "
               f"{h['rel_mse']:.3f}, top-1 agreement {h['agreement']:.3f}")
