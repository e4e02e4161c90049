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
    MODEL,
    OUTPUT,
    SCHEME,
    SLOW,
    TRAINING,
    WORKERS,
    ShowProgress,
    SlowFactor,
    SlowFraction,
    check_backend,
    code_options,
    integer,
    not_used,
    number,
    out_dir,
    out_file,
    refuse,
    reported,
)
from .options import seed as check_seed

#: the option of `gencc train` each field of `TrainOptions` (and the workload) comes from; the command leaves
#: replication at its default (agc pairs workers), so a refusal of it is about --workers
OPTIONS = {"workload": "--workload", "scheme": "--scheme", "workers": "--workers", "stragglers": "--stragglers",
           "tolerate": "--tolerate", "steps": "--steps", "batch_size": "--batch-size", "lr": "--lr",
           "optimizer": "--optimizer", "partitions": "--K", "gc_kind": "--gc-kind", "replication": "--workers",
           "placement": "--placement", "sample_s": "--sample-ms", "delay_s": "--delay-ms",
           "slow_fraction": "--slow-fraction", "slow_factor": "--slow-factor", "eval_every": "--eval-every",
           "seed": "--seed", "backend": "--backend", "address": "--address", "code_options": "--opt"}

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
    workload: Annotated[str | None, typer.Option(metavar="NAME", help=f"{', '.join(TRAIN_WORKLOADS)} (default "
                                                 f"{TRAIN_WORKLOADS[0]}), or --model", rich_help_panel=MODEL)] = None,
    model: Annotated[str | None, typer.Option(metavar="SPEC", help="your torch module instead of a workload: "
                                              "package.module:attr (a module, or a factory of one)",
                                              rich_help_panel=MODEL)] = None,
    data: Annotated[Path | None, typer.Option(metavar="FILE", help="--model: training inputs, .npy / .npz of shape "
                                              "(n, *input shape); 20% held out for the test accuracy",
                                              rich_help_panel=MODEL)] = None,
    labels: Annotated[Path | None, typer.Option(metavar="FILE", help="--model: the class of each input of --data, "
                                                ".npy / .npz of n integers >= 0", rich_help_panel=MODEL)] = None,
    scheme: Annotated[str, typer.Option(metavar="NAME", help=f"{', '.join(TRAINING_SCHEMES)}",
                                        rich_help_panel=SCHEME)] = "ignore",
    workers: Annotated[int, typer.Option("--workers", metavar="N", help="N workers (engine threads, or Ray actors)",
                                         callback=integer(at_least=1), rich_help_panel=WORKERS)] = 8,
    stragglers: Annotated[str, typer.Option(metavar="SPEC", help="an int S, or models joined by '+' (bernoulli:, "
                                            "exp:, pareto:, persistent:, faults:; docs: training guide)",
                                            rich_help_panel=SLOW)] = "1",
    tolerate: Annotated[int | None, typer.Option(metavar="S", help="stragglers per step the scheme plans for "
                                                 "(default: from --stragglers)", rich_help_panel=SCHEME)] = None,
    steps: Annotated[int, typer.Option(metavar="N", help="optimizer steps", callback=integer(at_least=1),
                                       rich_help_panel=TRAINING)] = 100,
    batch_size: Annotated[int | None, typer.Option(metavar="N", help="samples per step (0: full batch; default: "
                                                   "the workload's)", callback=integer(at_least=0),
                                                   rich_help_panel=TRAINING)] = None,
    lr: Annotated[float | None, typer.Option(metavar="NUM", help="learning rate (default: the workload's)",
                                             callback=number(above=0), rich_help_panel=TRAINING)] = None,
    optimizer: Annotated[str | None, typer.Option(metavar="NAME", help=f"{', '.join(OPTIMIZERS)} (default: the "
                                                  "workload's)", rich_help_panel=TRAINING)] = None,
    K: Annotated[int | None, typer.Option("--K", metavar="K", help="gcc/bacc: K partitions of the data (default "  # noqa: N803
                                          "ceil(N/(S+1)))", callback=integer(at_least=1),
                                          rich_help_panel=SCHEME)] = None,
    gc_kind: Annotated[str, typer.Option(metavar="NAME", help=f"gc: {', '.join(GC_KINDS)}",
                                         rich_help_panel=SCHEME)] = "cyclic",
    placement: Annotated[str, typer.Option(metavar="NAME", help=f"{', '.join(PLACEMENTS)}",
                                           rich_help_panel=SCHEME)] = "stratified",
    opt: Annotated[list[str] | None, typer.Option("--opt", help="gcc/bacc: an option of the placement's code, "
                                                  "repeatable, e.g. gcc.colluders=1 (private shards)",
                                                  rich_help_panel=SCHEME)] = None,
    sample_ms: Annotated[float, typer.Option(metavar="MS", help="modelled compute per sample, in ms (injected)",
                                             callback=number(at_least=0), rich_help_panel=SLOW)] = 0.0,
    delay_ms: Annotated[float, typer.Option(metavar="MS", help="an int --stragglers S: how long each is held back, "
                                            "in ms", callback=number(at_least=0), rich_help_panel=SLOW)] = 50.0,
    slow_fraction: SlowFraction = 0.0,
    slow_factor: SlowFactor = None,
    eval_every: Annotated[int, typer.Option(metavar="N", help="evaluate the test accuracy every this many steps",
                                            callback=integer(at_least=1), rich_help_panel=TRAINING)] = 10,
    track_grad_error: Annotated[bool, typer.Option("--track-grad-error", help="record grad_rel_err against the "
                                                   "full gradient", rich_help_panel=OUTPUT)] = False,
    seed: Annotated[int, typer.Option(metavar="INT", help="seed of the model, the placement, the rows and the "
                                      "stragglers", callback=check_seed, rich_help_panel=TRAINING)] = 0,
    backend: Annotated[str, typer.Option(metavar="local|ray", help="local (engine threads; also: threads) or ray "
                                         "(one actor per worker)", rich_help_panel=WORKERS)] = "local",
    address: Annotated[str | None, typer.Option(metavar="ADDRESS", help="ray: join this cluster (default: a "
                                                "private Ray on 127.0.0.1)", rich_help_panel=WORKERS)] = None,
    isolate: Annotated[bool, typer.Option(help="ray without --address: run in a loopback-only network namespace "
                                          "(unshare -n)", rich_help_panel=WORKERS)] = True,
    out: Annotated[Path | None, typer.Option(metavar="FILE", help="write the history here (CSV)", callback=out_file,
                                             rich_help_panel=OUTPUT)] = None,
    plot: Annotated[Path | None, typer.Option(metavar="DIR", help="folder for the figure (PNG: test accuracy "
                                              "against time, loss against step)", callback=out_dir,
                                              rich_help_panel=OUTPUT)] = None,
    progress: ShowProgress = True,
) -> None:
    """Train a workload, or your own torch module (--model, --data, --labels), data-parallel on N workers with a
    straggler-resilient scheme; print a summary. With --backend ray and no --address, the command re-runs itself
    inside a loopback-only network namespace (as `gencc run` does) and starts a private Ray there (127.0.0.1
    only)."""
    own = _check_own_model(workload, model, data, labels)
    workload = workload if workload is not None or own else TRAIN_WORKLOADS[0]
    backend = check_backend(backend)
    given = {"lr": lr, "optimizer": optimizer, "batch_size": batch_size}  # None: the workload's default
    given = {k: (None if k == "batch_size" and v == 0 else v) for k, v in given.items() if v is not None}
    code_opts = code_options(opt or [], (scheme,), "training").get(scheme) if opt else None
    try:
        if workload is not None:
            check_workload(workload)
        options = TrainOptions(scheme=scheme, workers=workers, stragglers=parse_stragglers(stragglers, workers, seed),
                               steps=steps, seed=seed, eval_every=eval_every, track_grad_error=track_grad_error,
                               backend=backend, tolerate=tolerate, gc_kind=gc_kind, placement=placement,
                               sample_s=sample_ms / 1e3, delay_s=delay_ms / 1e3, address=address,
                               slow_fraction=slow_fraction, slow_factor=slow_factor, code_options=code_opts,
                               **given)
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

    if own:
        module, (X, y), (X_test, y_test) = _own_model(model, data, labels, seed)
        name, target = module.__class__.__name__, None
    else:
        w = train_workload(workload, seed)
        module, X, y, X_test, y_test, name, target = w.model, w.X, w.y, w.X_test, w.y_test, workload, w.target_acc
        options = replace(options, **{k: getattr(w, k) for k in ("lr", "optimizer", "batch_size") if k not in given})
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]train[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total} steps"), TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console,
                  transient=False, disable=not progress) as bar:
        tid = bar.add_task(f"{name} {scheme} N={workers}", total=steps, info="")

        def tick(h: dict) -> None:
            acc = f" acc {h['eval_acc']:.3f}" if "eval_acc" in h else ""
            bar.update(tid, advance=1, info=f"loss {h['train_loss']:.3g}{acc}")

        try:
            res = train(module, (X, y), **options.kwargs(), eval_data=(X_test, y_test), progress=tick)
        except ValueError as e:
            if not own:
                raise
            raise refuse("--model", str(e)) from None
    h = res.history
    reached = "" if target is None else f"time to {target:.2f}: {res.time_to_accuracy(target):.2f} s; "
    print(f"{name} {scheme}: N={res.N} K={res.K} tolerate={res.tolerate} wait_for={res.wait_for} "
          f"compute/worker/step={res.compute_per_worker} samples; final test accuracy {res.final_accuracy():.4f}; "
          f"{reached}wall {h[-1]['wall_s']:.2f} s")
    code = res.plan.code
    if getattr(code, "private", False):
        from ..runtime.metrics import leakage_bits

        print(f"private shards: {code.colluders} colluding worker(s) learn at most {leakage_bits(code):.3g} bits "
              f"per input coordinate (mask_scale {code.mask_scale:g})")
    if out is not None:
        write_history(h, out)
        print(f"history: {out}")
    if plot is not None:
        plot.mkdir(exist_ok=True)
        path = plot / f"train-{name}-{scheme}.png"
        plot_history(h, path, f"{name} {scheme} N={workers}")
        print(f"plot: {path}")


def _check_own_model(workload: str | None, model: str | None, data: Path | None, labels: Path | None) -> bool:
    """Whether the user trains a model of their own (--model with --data and --labels); the options that go with
    it refused without it, and beside --workload."""
    if model is None:
        for option, value in (("--data", data), ("--labels", labels)):
            if value is not None:
                raise refuse(option, f"{option} goes with --model (your own torch module)")
        return False
    if workload is not None:
        raise refuse("--workload", "give --workload (a built-in workload) or --model (your own torch module), not "
                                   "both")
    for option, value in (("--data", data), ("--labels", labels)):
        if value is None:
            raise refuse(option, f"--model trains on your data: give --data INPUTS.npy and --labels LABELS.npy "
                                 f"(missing {option})")
    return True


def _own_model(spec: str, data: Path, labels: Path, seed: int) -> tuple[Any, tuple, tuple]:
    """(the torch module of --model, (X, y) to train on, (X, y) held out: 20% of the rows, drawn with `seed`)."""
    import numpy as np

    from ..model import ModelError
    from ..model.spec import is_torch_module, looks_like_file, resolve_import
    from .model import load_cli_inputs

    if looks_like_file(spec):
        raise refuse("--model", f"gencc train trains a torch module you define: give its import path "
                                f"package.module:attr (a module, or a factory of one), not the file {spec}")
    try:
        module = resolve_import(spec)
    except ModelError as e:
        raise refuse("--model", str(e)) from None
    if not is_torch_module(module):
        raise refuse("--model", f"{spec} is a {type(module).__name__}, not a torch.nn.Module (or a factory of one): "
                                "gencc train trains a torch module")
    X = load_cli_inputs(data)
    y = _labels(labels)
    if y.ndim != 1 or len(y) != len(X):
        raise refuse("--labels", f"need one label per input of --data ({len(X)} inputs), got an array of shape "
                                 f"{y.shape} in {labels}")
    if not (np.issubdtype(y.dtype, np.number) and np.all(y >= 0) and np.all(y == np.round(y))):
        raise refuse("--labels", f"labels are class numbers, integers >= 0; {labels} holds others")
    if len(X) < 10:
        raise refuse("--data", f"training needs at least 10 inputs (a fifth is held out), got {len(X)}")
    order = np.random.default_rng([seed, 7]).permutation(len(X))
    test, train_rows = order[: len(X) // 5], order[len(X) // 5:]
    y = y.astype(np.int64)
    return module, (X[train_rows], y[train_rows]), (X[test], y[test])


def _labels(path: Path) -> Any:
    """The array of --labels FILE (.npy, or an .npz of one array or of `y` / `labels`); refused naming --labels."""
    import numpy as np

    if not path.is_file():
        raise refuse("--labels", f"labels file {path} does not exist (or is a folder)")
    if path.suffix not in (".npy", ".npz"):
        raise refuse("--labels", f"labels file {path} must be .npy or .npz (numpy.save of the labels)")
    try:
        z = np.load(path, allow_pickle=False)
        if isinstance(z, np.ndarray):
            return z
        with z:
            return np.asarray(z[next((k for k in ("y", "labels") if k in z.files), z.files[0])])
    except Exception as e:  # noqa: BLE001 (a corrupt or foreign file)
        raise refuse("--labels", f"cannot read {path} as a numpy file ({e})") from None
