"""What a training worker runs: the gradient of the cross-entropy on the rows it holds, at the parameters the
master broadcast (a task's input: [step, theta]). The engine calls it like any f (`gencc.faults.run_injected`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .schemes import Block


def flat_params(model: nn.Module) -> np.ndarray:
    """The model's parameters as one float64 vector (the broadcast)."""
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().cpu().double().numpy()


def param_dtype(model: nn.Module) -> torch.dtype:
    p = next(model.parameters(), None)
    if p is None:
        raise ValueError("the model has no parameters to train")
    return p.dtype


def param_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def step_rows(m: int, batch: int | None, seed: int, step: int) -> np.ndarray:
    """The partition rows used at `step` (the same rows of every partition: coded shards stay aligned); all of
    them for full-batch training."""
    if batch is None or batch >= m:
        return np.arange(m)
    return np.sort(np.random.default_rng([seed, 7, step]).choice(m, size=batch, replace=False))


def loss_and_grad(model: nn.Module, blocks: Sequence[Block], rows: np.ndarray) -> tuple[float, np.ndarray]:
    """(sum over the blocks of coef * sum over rows of -T . log_softmax(model(X)), its gradient as float64):
    with one-hot T this is cross-entropy with summed reduction; with coded T it is linear in T, as coding needs."""
    dtype, device = param_dtype(model), param_device(model)
    X = torch.as_tensor(np.concatenate([b.X[rows] for b in blocks]), dtype=dtype, device=device)
    T = torch.as_tensor(np.concatenate([b.coef * b.T[rows] for b in blocks]), dtype=dtype, device=device)
    model.zero_grad(set_to_none=False)
    loss = -(T * torch.log_softmax(model(X), dim=1)).sum()
    loss.backward()
    g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])
    return float(loss.detach()), g.detach().cpu().double().numpy()


def set_params(model: nn.Module, theta: np.ndarray) -> None:
    with torch.no_grad():
        vec = torch.as_tensor(theta, dtype=param_dtype(model), device=param_device(model))
        torch.nn.utils.vector_to_parameters(vec, model.parameters())


class GradientWorker:
    """Worker n's f: holds its blocks (placed once) and a replica of the model; x = [step, theta] gives
    [loss, gradient] on its blocks' rows of that step. Picklable (shipped once to a Ray actor)."""

    batched = False

    def __init__(self, model: nn.Module, blocks: list[Block], m: int, batch: int | None, seed: int):
        self.model = copy.deepcopy(model)
        self.blocks, self.m, self.batch, self.seed = blocks, m, batch, seed
        self._lock = threading.Lock()  # a preempted call may still be running on the replica

    @property
    def rows_per_step(self) -> int:
        """Samples this worker processes per step (its compute)."""
        return len(self.blocks) * len(step_rows(self.m, self.batch, self.seed, 0))

    def __call__(self, x: Any) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        step = int(x[0])
        with self._lock:
            set_params(self.model, x[1:])
            loss, g = loss_and_grad(self.model, self.blocks, step_rows(self.m, self.batch, self.seed, step))
        return np.concatenate([[loss], g])

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
