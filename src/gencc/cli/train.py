"""`gencc train`: coded data-parallel training of a workload under injected stragglers, with a progress bar;
writes the history as CSV and, optionally, a plot of test accuracy against wall-clock time."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from ..training.gradcodes import GC_KINDS
from ..training.injection import parse_stragglers
from ..training.options import OPTIMIZERS, PLACEMENTS, TRAIN_WORKLOADS, TrainOptions, check_workload
from ..training.schemes import TRAINING_SCHEMES
from .isolate import rerun_isolated
from .options import (
    SlowFactor,
    SlowFraction,
    check_backend,
    integer,
    not_used,
    number,
    out_dir,
    out_file,
    reported,
)
from .options import seed as check_seed

#: the option of `gencc train` each field of `TrainOptions` (and the workload) comes from; the command leaves
#: replication at its default (agc pairs workers), so a refusal of it is about --workers
OPTIONS = {"workload": "--workload", "scheme": "--scheme", "workers": "--workers", "stragglers": "--stragglers",
           "tolerate": "--tolerate", "steps": "--steps", "batch_size": "--batch-size", "lr": "--lr",
           "optimizer": "--optimizer", "partitions": "--K", "gc_kind": "--gc-kind", "replication": "--workers",
           "placement": "--placement", "sample_s": "--sample-s", "delay_s": "--delay-s",
           "slow_fraction": "--slow-fraction", "slow_factor": "--slow-factor", "eval_every": "--eval-every",
           "seed": "--seed", "backend": "--backend", "address": "--address"}

#: the history's CSV columns, in order
COLUMNS = ("step", "wall_s", "step_s", "train_loss", "eval_acc", "grad_rel_err", "loss_full", "compute_per_worker",
           "updated", "returned", "stragglers")


def write_history(history: list[dict], path: str | Path) -> None:
    """The history as CSV (COLUMNS; returned as space-separated ids, stragglers as worker:reason;...)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for h in history:
            row: list[Any] = []
            for c in COLUMNS:
                v = h.get(c, "")
                if c == "returned":
                    v = " ".join(map(str, v))
                elif c == "stragglers":
                    v = ";".join(f"{k}:{r}" for k, r in v.items())
                row.append(v)
            w.writerow(row)


def plot_history(history: list[dict], path: str | Path, title: str) -> None:
    """Test accuracy against wall-clock time and training loss against step, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    ev = [h for h in history if "eval_acc" in h]
    a.plot([h["wall_s"] for h in ev], [h["eval_acc"] for h in ev], marker="o")
    a.set(xlabel="wall-clock time (s)", ylabel="test accuracy", title=title)
    b.plot([h["step"] for h in history], [h["train_loss"] for h in history])
    b.set(xlabel="step", ylabel="training loss (estimate)", yscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train_command(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option(help=f"one of {', '.join(TRAIN_WORKLOADS)}")] = "digits-cnn",
    scheme: Annotated[str, typer.Option(help=f"one of {', '.join(TRAINING_SCHEMES)}")] = "ignore",
    workers: Annotated[int, typer.Option("--workers", "--N", help="N workers (engine threads, or Ray actors)",
                                         callback=integer(at_least=1))] = 8,
    stragglers: Annotated[str, typer.Option(help="an int S, or parts joined by '+': bernoulli:p=,factor=,base=; "
                                                 "exp:shift=,rate=; pareto:x_m=,a=; persistent:fraction=,factor=,"
                                                 "mean_slow_s=; faults:raise_p=,nan_p=,hang_p=,crash_p=")] = "1",
    tolerate: Annotated[int | None, typer.Option(help="stragglers per step the scheme plans for (default: "
                                                      "from --stragglers)")] = None,
    steps: Annotated[int, typer.Option(help="optimizer steps", callback=integer(at_least=1))] = 100,
    batch_size: Annotated[int | None, typer.Option(help="samples per step (0: full batch; default: the "
                                                        "workload's)", callback=integer(at_least=0))] = None,
    lr: Annotated[float | None, typer.Option(help="learning rate (default: the workload's)",
                                             callback=number(above=0))] = None,
    optimizer: Annotated[str | None, typer.Option(help=f"{', '.join(OPTIMIZERS)} (default: the workload's)")] = None,
    K: Annotated[int | None, typer.Option("--K", "--partitions", help="gcc/bacc: K partitions of the data "
                                                                      "(default ceil(N/(S+1)))",
                                          callback=integer(at_least=1))] = None,  # noqa: N803
    gc_kind: Annotated[str, typer.Option(help=f"gc: {', '.join(GC_KINDS)}")] = "cyclic",
    placement: Annotated[str, typer.Option(help=f"{', '.join(PLACEMENTS)}")] = "stratified",
    sample_s: Annotated[float, typer.Option(help="modelled compute per sample, seconds (injected)",
                                            callback=number(at_least=0))] = 0.0,
    delay_s: Annotated[float, typer.Option(help="an int --stragglers S: seconds each is held back",
                                           callback=number(at_least=0))] = 0.05,
    slow_fraction: SlowFraction = 0.0,
    slow_factor: SlowFactor = None,
    eval_every: Annotated[int, typer.Option(help="evaluate the test accuracy every this many steps",
                                            callback=integer(at_least=1))] = 10,
    track_grad_error: Annotated[bool, typer.Option(help="record grad_rel_err against the full gradient")] = False,
    seed: Annotated[int, typer.Option(help="seed of the model, the placement, the rows and the stragglers",
                                      callback=check_seed)] = 0,
    backend: Annotated[str, typer.Option(help="local (engine threads; also: threads) or ray (one actor per "
                                              "worker)")] = "local",
    address: Annotated[str | None, typer.Option(help="ray: join this cluster (default: a private Ray on "
                                                     "127.0.0.1)")] = None,
    isolate: Annotated[bool, typer.Option(help="ray without --address: run inside a loopback-only network "
                                               "namespace (unshare -n, or -rn as an ordinary user)")] = True,
    out: Annotated[Path | None, typer.Option(help="write the history here (CSV)", callback=out_file)] = None,
    plot: Annotated[Path | None, typer.Option(help="folder for the figure (PNG: test accuracy against time, loss "
                                                   "against step)", callback=out_dir)] = None,
) -> None:
    """Train a workload data-parallel on N workers with a straggler-resilient scheme; print a summary. With
    --backend ray and no --address, the command re-runs itself inside a loopback-only network namespace (as
    `gencc run` does) and starts a private Ray there (127.0.0.1 only)."""
    backend = check_backend(backend)
    given = {"lr": lr, "optimizer": optimizer, "batch_size": batch_size}  # None: the workload's default
    given = {k: (None if k == "batch_size" and v == 0 else v) for k, v in given.items() if v is not None}
    try:
        check_workload(workload)
        options = TrainOptions(scheme=scheme, workers=workers, stragglers=parse_stragglers(stragglers, workers, seed),
                               steps=steps, seed=seed, eval_every=eval_every, track_grad_error=track_grad_error,
                               backend=backend, tolerate=tolerate, gc_kind=gc_kind, placement=placement,
                               sample_s=sample_s, delay_s=delay_s, address=address, slow_fraction=slow_fraction,
                               slow_factor=slow_factor, **given)
        if K is not None and not options.coded:
            not_used("--K", scheme, "only gcc and bacc code K partitions of the data")
        elif K is not None:
            options = replace(options, partitions=K)
    except ValueError as e:
        raise reported(e, OPTIONS, "--scheme") from None
    if backend == "ray" and address is None and isolate:
        rerun_isolated(ctx, "training")

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..training.trainer import train
    from ..training.workloads import train_workload

    w = train_workload(workload, seed)
    options = replace(options, **{k: getattr(w, k) for k in ("lr", "optimizer", "batch_size") if k not in given})
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]train[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total} steps"), TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                  transient=False) as bar:
        tid = bar.add_task(f"{workload} {scheme} N={workers}", total=steps, info="")

        def tick(h: dict) -> None:
            acc = f" acc {h['eval_acc']:.3f}" if "eval_acc" in h else ""
            bar.update(tid, advance=1, info=f"loss {h['train_loss']:.3g}{acc}")

        res = train(w.model, (w.X, w.y), **options.kwargs(), eval_data=(w.X_test, w.y_test), progress=tick)
    h = res.history
    print(f"{workload} {scheme}: N={res.N} K={res.K} tolerate={res.tolerate} wait_for={res.wait_for} "
          f"compute/worker/step={res.compute_per_worker} samples; final test accuracy {res.final_accuracy():.4f}; "
          f"time to {w.target_acc:.2f}: {res.time_to_accuracy(w.target_acc):.2f} s; wall {h[-1]['wall_s']:.2f} s")
    if out is not None:
        write_history(h, out)
        print(f"history: {out}")
    if plot is not None:
        plot.mkdir(exist_ok=True)
        path = plot / f"train-{workload}-{scheme}.png"
        plot_history(h, path, f"{workload} {scheme} N={workers}")
        print(f"plot: {path}")
