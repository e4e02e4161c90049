"""Training workloads for the command line and the benchmark: a fresh (seeded) model, its data and defaults.

- digits-cnn, mnist1d-cnn: the architectures and data of `gencc.workloads` (trained from scratch here);
- digits-logreg: multinomial logistic regression on scikit-learn's digits (64 pixels -> 10 classes), a convex
  problem trained full-batch, the setting of gradient coding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .options import check_workload


@dataclass
class TrainWorkload:
    """A model to train from scratch, its data and the defaults the command line and the benchmark use."""

    name: str
    model: nn.Module
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    lr: float
    batch_size: int | None
    optimizer: str
    target_acc: float


def train_workload(name: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> TrainWorkload:
    """Workload `name` (one of TRAIN_WORKLOADS) with a model initialised from `seed`."""
    check_workload(name)
    from ..workloads import training_data, untrained_module

    base = "digits-cnn" if name == "digits-logreg" else name
    Xtr, ytr, Xte, yte = training_data(base)
    torch.manual_seed(seed)
    if name == "digits-logreg":
        Xtr, Xte = Xtr.reshape(len(Xtr), -1), Xte.reshape(len(Xte), -1)
        return TrainWorkload(name, nn.Linear(64, 10).to(dtype), Xtr, ytr, Xte, yte, lr=0.5, batch_size=None,
                             optimizer="sgd", target_acc=0.9)
    model = untrained_module(name).to(dtype)
    if name == "digits-cnn":
        return TrainWorkload(name, model, Xtr, ytr, Xte, yte, lr=3e-3, batch_size=256, optimizer="adam",
                             target_acc=0.9)
    return TrainWorkload(name, model, Xtr, ytr, Xte, yte, lr=3e-3, batch_size=400, optimizer="adam",
                         target_acc=0.6)
