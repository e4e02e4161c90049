"""Training tests: a small float64 classification problem (a slice of digits) and a model gencc does not ship."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gencc.workloads._data import digits


class TinyNet(nn.Module):
    """A two-layer tanh network defined here, not in gencc."""

    def __init__(self, d: int = 64, h: int = 12, c: int = 10):
        super().__init__()
        self.a, self.b = nn.Linear(d, h), nn.Linear(h, c)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.fixture(scope="session")
def problem():
    """(X, y, X_test, y_test): 480 training and 200 test digits, flattened, float64."""
    Xtr, ytr, Xte, yte = digits()
    return (Xtr.reshape(len(Xtr), -1)[:480], ytr[:480], Xte.reshape(len(Xte), -1)[:200], yte[:200])


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return TinyNet().double()


@pytest.fixture
def linear():
    torch.manual_seed(0)
    return nn.Linear(64, 10).double()
