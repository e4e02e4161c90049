"""`train`: coded data-parallel training on the engine. A training step is a job whose f is a gradient: the
master broadcasts its parameters, the engine's N long-lived workers (threads, or Ray actors) each return the
gradient on the data placed on them, the master aggregates the ones that arrive by the scheme's rule
(`gencc.training.schemes`) and steps a torch optimizer. Stragglers come from `gencc.faults` (the engine applies
them); a failed worker is a straggler.
"""

from __future__ import annotations

import copy
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.arrays import to_numpy
from ..engine import Task, Workers, make_backend, make_pool
from ..faults import ServiceTimes
from .options import TrainOptions
from .schemes import Block, Plan, make_plan
from .worker import GradientWorker, flat_params, loss_and_grad, param_device, param_dtype, set_params, step_rows


@dataclass
class TrainResult:
    """`model`: the trained module (a copy of the one passed in); `history`: one dict per step (see `train`);
    `plan`: the scheme's placement and rule; `compute_per_worker`: samples each worker processes per step."""

    model: nn.Module
    history: list[dict]
    scheme: str
    N: int
    K: int
    tolerate: int
    wait_for: int
    compute_per_worker: int
    plan: Plan = field(repr=False)

    def final_accuracy(self) -> float:
        """The last evaluated test accuracy (NaN without eval data)."""
        accs = [h["eval_acc"] for h in self.history if "eval_acc" in h]
        return accs[-1] if accs else float("nan")

    def time_to_accuracy(self, target: float) -> float:
        """Wall-clock seconds until the first evaluation at or above `target` (inf if never)."""
        return next((h["wall_s"] for h in self.history if h.get("eval_acc", -1.0) >= target), float("inf"))


def _data(model: nn.Module, data: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"{what} must be a pair (X, y) of inputs and integer labels")
    X = np.ascontiguousarray(to_numpy(data[0]))
    y = np.asarray(to_numpy(data[1]))
    if X.ndim < 1 or len(X) != len(y) or y.ndim != 1 or len(y) == 0:
        raise ValueError(f"{what}: X and y must hold the same positive number of samples (y one label each); got "
                         f"shapes {X.shape} and {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise ValueError(f"{what}: y must hold non-negative integer class labels (cross-entropy), got {y.dtype}")
    dtype = np.float64 if param_dtype(model) == torch.float64 else np.float32
    X = X.astype(dtype)
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{what}: X contains NaN or inf")
    return X, y.astype(np.int64)


def _optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    """The torch optimizer of `name`, one of OPTIMIZERS (checked by `TrainOptions`)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.Adam(params, lr=lr)


def accuracy(model: nn.Module, X: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy of `model` on (X, y)."""
    was = model.training
    model.eval()
    with torch.no_grad():
        Xt = torch.as_tensor(X, dtype=param_dtype(model), device=param_device(model))
        pred = model(Xt).argmax(dim=1).cpu().numpy()
    model.train(was)
    return float(np.mean(pred == y))


def train(model: nn.Module, data: Any, scheme: str = "sync", workers: int = 8, stragglers: Any = 0,
          steps: int = 100, batch_size: int | None = None, lr: float = 0.1, seed: int = 0,
          eval_data: Any = None, eval_every: int = 10, track_grad_error: bool = False, optimizer: str = "sgd",
          backend: str = "local", *, tolerate: int | None = None, partitions: int | None = None,
          gc_kind: str = "cyclic", replication: int = 2, placement: str = "stratified", sample_s: float = 0.0,
          delay_s: float = 0.05, step_timeout: float = 60.0, address: str | None = None,
          slow_fraction: float = 0.0, slow_factor: float | None = None, ray_options: dict | None = None,
          progress: Callable[[dict], None] | None = None, code_options: dict | None = None) -> TrainResult:
    """Train a copy of `model` (a torch.nn.Module giving class logits) on `data` = (X, y) with cross-entropy,
    data-parallel over `workers` = N engine workers under `scheme` (one of `gencc.training.TRAINING_SCHEMES`).

    stragglers: an int S (S random workers held back `delay_s` seconds each step), a gencc.faults
    LatencyModel / PersistentStragglers / Faults, or a list of them (`gencc.training.injection`).
    tolerate: the stragglers per step the scheme plans for (ignore waits for N - S, gc codes for s = S, gcc /
    bacc wait for N - S); by default S itself, or the expected count of the straggler models.
    batch_size: samples of the training set per step (each of the K partitions contributes batch_size / K
    rows, the same rows of every partition); None: full batch. partitions: K for gcc / bacc (default
    ceil(N / (S + 1)): the compute of gradient coding with s = S). sample_s: modelled compute per sample,
    injected as each task's service time (slowed by persistent stragglers like real compute).
    slow_fraction, slow_factor: persistent stragglers added to `stragglers` (each worker slow about that
    fraction of the time, slow_factor, by default 10, times slower while slow; seeded by `seed`).
    backend: "local" (engine threads; the default; also "threads") or "ray" (one actor per worker; `address`,
    `ray_options` for `gencc.engine.ray.backend.RayBackend`; tests run it in a loopback-only namespace).
    code_options: keyword options of gcc's / bacc's code, e.g. {"colluders": 1, "mask_scale": 16}: a private
    placement, whose shards carry random masks so that no single worker (no T colluding ones) holds the data in
    the clear; the gradient sum is still read at the data points.

    history: one dict per step with step, wall_s (training time so far, measurement excluded), step_s,
    train_loss (the master's estimate from what returned), returned (worker ids used), stragglers ({worker:
    reason}), compute_per_worker (samples per worker this step), updated (False when too few returned);
    eval_acc on eval steps (every `eval_every` steps and the last); with `track_grad_error`, grad_rel_err =
    ||g_agg - g_full||^2 / ||g_full||^2 against the full gradient over every partition's rows of that step,
    and loss_full (the exact mean loss over them).

    The options are checked before any work, as `gencc.training.TrainOptions` checks them (build one to check
    them without torch or data): a bad one raises a `gencc.errors.ConfigError` naming the parameter.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    opts = TrainOptions(scheme=scheme, workers=workers, stragglers=stragglers, steps=steps, batch_size=batch_size,
                        lr=lr, seed=seed, eval_every=eval_every, track_grad_error=track_grad_error,
                        optimizer=optimizer, backend=backend, tolerate=tolerate, partitions=partitions,
                        gc_kind=gc_kind, replication=replication, placement=placement, sample_s=sample_s,
                        delay_s=delay_s, step_timeout=step_timeout, address=address, slow_fraction=slow_fraction,
                        slow_factor=slow_factor, code_options=code_options)
    N, steps, seed, eval_every, batch_size = opts.workers, opts.steps, opts.seed, opts.eval_every, opts.batch_size
    backend, inj = opts.backend, opts.injected
    model = copy.deepcopy(model)
    X, y = _data(model, data, "data")
    Xv = yv = None
    if eval_data is not None:
        Xv, yv = _data(model, eval_data, "eval_data")
    classes = int(max(y.max(), yv.max() if yv is not None else 0)) + 1
    with torch.no_grad():
        out = model(torch.as_tensor(X[:1], dtype=param_dtype(model), device=param_device(model)))
    if out.ndim != 2 or out.shape[1] < classes:
        raise ValueError(f"the model must map a batch to logits (B, C) with C >= {classes} classes; got "
                         f"{tuple(out.shape)}")
    plan = make_plan(scheme, X, y, classes, N, opts.tolerance, K=opts.partitions, gc_kind=gc_kind,
                     replication=opts.replication, placement=placement, seed=seed, code_options=opts.code_options)
    b = None if batch_size is None else max(1, round(batch_size / plan.K))
    fns = [GradientWorker(model, plan.blocks[n], plan.m, b, seed) for n in range(N)]
    compute = fns[0].rows_per_step
    rows_total = plan.K * len(step_rows(plan.m, b, seed, 0))
    full_blocks = [Block(Xp, Tp) for Xp, Tp in plan.parts]
    opt = _optimizer(optimizer, model.parameters(), opts.lr)
    rng = np.random.default_rng([seed, 19])
    engine = make_pool(N, make_backend(backend, N, address=address, **(ray_options or {})),
                       ServiceTimes(opts.sample_s * compute), inj.persistent, inj.faults, seed=seed, preempt=True,
                       mark_dead=backend != "ray", name="gencc-train")  # Ray replaces a dead actor
    history: list[dict] = []
    wall = 0.0
    try:
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            theta = flat_params(model)
            x = np.concatenate([[float(step)], theta])
            ok, failed, tasks = _gather(engine, fns, x, inj.delays(N, rng), rng, plan.wait_for, opts.step_timeout)
            returned = sorted(ok)
            rec: dict[str, Any] = {"step": step, "returned": returned, "compute_per_worker": compute}
            est = None
            if len(returned) >= plan.min_results():
                est = plan.aggregate(returned, np.stack([ok[w] for w in returned]))
                rec["train_loss"] = float(est[0]) / rows_total
                _apply(model, est[1:] / rows_total)
                opt.step()
            else:
                rec["train_loss"] = float("nan")
            wall += time.perf_counter() - t0
            late = {t.slot: "late: no result when the step stopped" for t in tasks if t.slot not in ok
                    and t.slot not in failed}
            rec.update(wall_s=wall, step_s=time.perf_counter() - t0, updated=est is not None,
                       stragglers=dict(sorted({**failed, **late}.items())))
            if track_grad_error:
                rec.update(_grad_error(model, theta, full_blocks, step_rows(plan.m, b, seed, step), est,
                                       rows_total))
            if Xv is not None and (step % eval_every == 0 or step == steps):
                rec["eval_acc"] = accuracy(model, Xv, yv)
            history.append(rec)
            if progress is not None:
                progress(rec)
    finally:
        engine.close(1.0)
    return TrainResult(model, history, scheme, N, plan.K, plan.tolerate, plan.wait_for, compute, plan)


def _gather(engine: Workers, fns: list[GradientWorker], x: np.ndarray, delays: np.ndarray,
            rng: np.random.Generator, wait_for: int, timeout: float
            ) -> tuple[dict[int, np.ndarray], dict[int, str], list[Task]]:
    """One step on the engine: a task per worker (dispatched in a random order), the first `wait_for` valid
    results (or every worker answered or failed, or `timeout`), the rest cancelled."""
    q: queue.SimpleQueue[Task] = queue.SimpleQueue()  # one per step: a late delivery never reaches the next
    N = len(fns)
    tasks = []
    for n in rng.permutation(N):
        t = Task(x=x, delay=float(delays[n]), fn=fns[n], on_done=q.put, slot=int(n))
        tasks.append(t)
        engine.send(int(n), t)
    ok: dict[int, np.ndarray] = {}
    failed: dict[int, str] = {}
    end = time.perf_counter() + timeout
    while len(ok) < wait_for and len(ok) + len(failed) < N:
        try:
            t = q.get(timeout=max(end - time.perf_counter(), 0.0))
        except queue.Empty:
            break
        out = t.output
        if t.ok and out is not None and np.shape(out) == x.shape and np.all(np.isfinite(out)):
            ok[t.slot] = np.asarray(out, dtype=np.float64)
        else:
            failed[t.slot] = f"{t.reason or 'wrong shape'}: {t.error}" if t.error else (t.reason or "bad output")
    for t in tasks:
        if t.slot not in ok and t.slot not in failed:
            t.cancel()
    return ok, failed, tasks


def _apply(model: nn.Module, g: np.ndarray) -> None:
    """Set the parameters' .grad from the flat mean gradient `g`."""
    i = 0
    for p in model.parameters():
        n = p.numel()
        p.grad = torch.as_tensor(g[i:i + n], dtype=p.dtype, device=p.device).reshape(p.shape).clone()
        i += n


def _grad_error(model: nn.Module, theta: np.ndarray, blocks: list[Block], rows: np.ndarray,
                est: np.ndarray | None, rows_total: int) -> dict[str, float]:
    """grad_rel_err and loss_full at the step's parameters `theta` (the model is put back afterwards)."""

    after = flat_params(model)
    set_params(model, theta)
    loss, g_full = loss_and_grad(model, blocks, rows)
    set_params(model, after)
    for p in model.parameters():
        p.grad = None
    err = float("nan") if est is None else float(np.sum((est[1:] - g_full) ** 2) / max(np.sum(g_full ** 2), 1e-300))
    return {"grad_rel_err": err, "loss_full": loss / rows_total}
