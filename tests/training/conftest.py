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



def pytest_collection_modifyitems(config, items):
    """Ray-marked training tests run only inside a loopback-only network namespace (test_ray_namespace.py
    re-executes them there); outside they are skipped with the reason."""
    from gencc.testing.isolation import can_unshare, in_loopback_namespace

    if in_loopback_namespace():
        return
    here = str(__file__).rsplit("/", 1)[0]
    ray_items = [i for i in items if "ray" in i.keywords and str(i.fspath).startswith(here)]
    if not ray_items:
        return
    ok, how = can_unshare()
    reason = (f"run by test_ray_namespace.py in a loopback-only namespace made with {how}" if ok else
              f"not run: no loopback-only network namespace can be made here ({how})")
    for item in ray_items:
        item.add_marker(pytest.mark.skip(reason=reason))
