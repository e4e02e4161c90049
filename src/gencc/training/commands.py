"""`gencc train`: coded data-parallel training of a workload under injected stragglers, with a progress bar;
writes the history as CSV and, optionally, a plot of test accuracy against wall-clock time."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .gradcodes import GC_KINDS
from .injection import parse_stragglers
from .options import BACKENDS, OPTIMIZERS, TRAIN_WORKLOADS
from .schemes import PLACEMENTS, SCHEMES

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


def _check(ok: bool, option: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{option}: {message}")


def _writable(path: Path | None, option: str) -> None:
    if path is not None:
        _check(path.parent.is_dir(), option, f"folder {path.parent} does not exist")
        _check(not path.is_dir(), option, f"{path} is a folder; give a file name")


def _rerun_isolated(ctx: typer.Context) -> None:
    """Run this same command again inside a loopback-only network namespace and exit with its status (nothing to
    do when already inside one)."""
    from ..testing.isolation import can_unshare, in_loopback_namespace, rerun_in_loopback

    if in_loopback_namespace():
        return
    ok, how = can_unshare()
    _check(ok, "--backend", f"a local Ray runs inside a loopback-only network namespace, which cannot be made here "
                            f"({how}); pass --ray-address of a cluster you run, or --no-isolate to start Ray bound "
                            "to 127.0.0.1 without the namespace")
    print(f"training inside a loopback-only network namespace, made with {how}", file=sys.stderr)
    raise typer.Exit(rerun_in_loopback(ctx))


def train_command(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option(help=f"one of {', '.join(TRAIN_WORKLOADS)}")] = "digits-cnn",
    scheme: Annotated[str, typer.Option(help=f"one of {', '.join(SCHEMES)}")] = "ignore",
    workers: Annotated[int, typer.Option(help="N workers (engine threads, or Ray actors)")] = 8,
    stragglers: Annotated[str, typer.Option(help="an int S, or parts joined by '+': bernoulli:p=,factor=,base=; "
                                                 "exp:shift=,rate=; pareto:x_m=,a=; persistent:fraction=,factor=,"
                                                 "mean_slow_s=; faults:raise_p=,nan_p=,hang_p=,crash_p=")] = "1",
    tolerate: Annotated[int | None, typer.Option(help="stragglers per step the scheme plans for (default: "
                                                      "from --stragglers)")] = None,
    steps: Annotated[int, typer.Option(help="optimizer steps")] = 100,
    batch_size: Annotated[int | None, typer.Option(help="samples per step (0: full batch; default: the "
                                                        "workload's)")] = None,
    lr: Annotated[float | None, typer.Option(help="learning rate (default: the workload's)")] = None,
    optimizer: Annotated[str | None, typer.Option(help=f"{', '.join(OPTIMIZERS)} (default: the workload's)")] = None,
    partitions: Annotated[int | None, typer.Option(help="gcc/bacc: K partitions (default ceil(N/(S+1)))")] = None,
    gc_kind: Annotated[str, typer.Option(help=f"gc: {', '.join(GC_KINDS)}")] = "cyclic",
    placement: Annotated[str, typer.Option(help=f"{', '.join(PLACEMENTS)}")] = "stratified",
    sample_s: Annotated[float, typer.Option(help="modelled compute per sample, seconds (injected)")] = 0.0,
    delay_s: Annotated[float, typer.Option(help="an int --stragglers S: seconds each is held back")] = 0.05,
    eval_every: Annotated[int, typer.Option(help="evaluate the test accuracy every this many steps")] = 10,
    track_grad_error: Annotated[bool, typer.Option(help="record grad_rel_err against the full gradient")] = False,
    seed: Annotated[int, typer.Option(help="seed of the model, the placement, the rows and the stragglers")] = 0,
    backend: Annotated[str, typer.Option(help=f"{', '.join(BACKENDS)}")] = "threads",
    ray_address: Annotated[str | None, typer.Option(help="ray: join this cluster (default: a private Ray on "
                                                         "127.0.0.1)")] = None,
    isolate: Annotated[bool, typer.Option(help="ray without --ray-address: run inside a loopback-only network "
                                               "namespace (unshare -n, or -rn as an ordinary user)")] = True,
    out: Annotated[Path | None, typer.Option(help="write the history here (CSV)")] = None,
    plot: Annotated[Path | None, typer.Option(help="write a plot here (PNG)")] = None,
) -> None:
    """Train a workload data-parallel on N workers with a straggler-resilient scheme; print a summary. With
    --backend ray and no --ray-address, the command re-runs itself inside a loopback-only network namespace (as
    `gencc run` does) and starts a private Ray there (127.0.0.1 only)."""
    _check(workload in TRAIN_WORKLOADS, "--workload", f"choose one of {', '.join(TRAIN_WORKLOADS)}, got {workload!r}")
    _check(scheme in SCHEMES, "--scheme", f"choose one of {', '.join(SCHEMES)}, got {scheme!r}")
    _check(workers >= 1, "--workers", f"must be at least 1, got {workers}")
    _check(steps >= 1, "--steps", f"must be at least 1, got {steps}")
    _check(eval_every >= 1, "--eval-every", f"must be at least 1, got {eval_every}")
    _check(batch_size is None or batch_size >= 0, "--batch-size", f"must be 0 or more, got {batch_size}")
    _check(lr is None or (math.isfinite(lr) and lr > 0), "--lr", f"must be a positive number, got {lr}")
    _check(optimizer is None or optimizer in OPTIMIZERS, "--optimizer",
           f"choose one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    _check(gc_kind in GC_KINDS, "--gc-kind", f"choose one of {', '.join(GC_KINDS)}, got {gc_kind!r}")
    _check(placement in PLACEMENTS, "--placement", f"choose one of {', '.join(PLACEMENTS)}, got {placement!r}")
    _check(backend in BACKENDS, "--backend", f"choose one of {', '.join(BACKENDS)}, got {backend!r}")
    _check(sample_s >= 0 and delay_s >= 0, "--sample-s/--delay-s", "must be non-negative")
    _check(tolerate is None or 0 <= tolerate < workers, "--tolerate", f"must lie in [0, {workers - 1}]")
    _check(partitions is None or scheme in ("gcc", "bacc"), "--partitions", "applies to gcc and bacc only")
    _check(partitions is None or 1 <= partitions <= workers, "--partitions", f"must lie in [1, {workers}]")
    try:
        spec = parse_stragglers(stragglers, workers, seed)
    except ValueError as e:
        raise ValueError(str(e) if str(e).startswith("--stragglers") else f"--stragglers: {e}") from None
    _check(all(not isinstance(s, int) or s < workers for s in spec), "--stragglers",
           f"a count must be below --workers ({workers})")
    _writable(out, "--out")
    _writable(plot, "--plot")
    if backend == "ray" and ray_address is None and isolate:
        _rerun_isolated(ctx)

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .trainer import train
    from .workloads import train_workload

    w = train_workload(workload, seed)
    bs = w.batch_size if batch_size is None else (None if batch_size == 0 else batch_size)
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]train[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total} steps"), TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                  transient=False) as bar:
        tid = bar.add_task(f"{workload} {scheme} N={workers}", total=steps, info="")

        def tick(h: dict) -> None:
            acc = f" acc {h['eval_acc']:.3f}" if "eval_acc" in h else ""
            bar.update(tid, advance=1, info=f"loss {h['train_loss']:.3g}{acc}")

        res = train(w.model, (w.X, w.y), scheme=scheme, workers=workers, stragglers=spec, steps=steps,
                    batch_size=bs, lr=w.lr if lr is None else lr, seed=seed, eval_data=(w.X_test, w.y_test),
                    eval_every=eval_every, track_grad_error=track_grad_error,
                    optimizer=w.optimizer if optimizer is None else optimizer, backend=backend, tolerate=tolerate,
                    partitions=partitions, gc_kind=gc_kind, placement=placement, sample_s=sample_s,
                    delay_s=delay_s, ray_address=ray_address, progress=tick)
    h = res.history
    print(f"{workload} {scheme}: N={res.N} K={res.K} tolerate={res.tolerate} wait_for={res.wait_for} "
          f"compute/worker/step={res.compute_per_worker} samples; final test accuracy {res.final_accuracy():.4f}; "
          f"time to {w.target_acc:.2f}: {res.time_to_accuracy(w.target_acc):.2f} s; wall {h[-1]['wall_s']:.2f} s")
    if out is not None:
        write_history(h, out)
        print(f"history: {out}")
    if plot is not None:
        plot_history(h, plot, f"{workload} {scheme} N={workers}")
        print(f"plot: {plot}")
