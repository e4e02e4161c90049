"""Workloads for sweeps: `gencc.workloads.load(name)` for the real ones, plus tiny analytic stand-ins.

The stand-ins (names starting with `toy-`) need no torch and no data; the experiments tests use them so the
machinery is checked in seconds. They follow the workload contract: `f` batched numpy (B, *in) -> (B, *out),
`sample(K, rng) -> (X, y)`, `classifier`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np


@dataclass
class ToyWorkload:
    """An analytic workload: f, an input distribution, and (for classifiers) labels from a noisy rule."""

    name: str
    kind: str
    classifier: bool = False

    def __post_init__(self) -> None:
        self._W = np.random.default_rng(12345).normal(size=(4, 3))
        method = self._xsinx if self.kind == "xsinx" else self._softmax

        def f(X: np.ndarray) -> np.ndarray:
            return method(X)

        f.batched = True  # type: ignore[attr-defined]
        self.f = f

    def _xsinx(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        return X * np.sin(X)

    def _softmax(self, X: np.ndarray) -> np.ndarray:
        z = np.tanh(np.asarray(X, dtype=float).reshape(len(X), -1) @ self._W) * 3.0
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    def sample(self, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        """K draws of the input distribution (and labels for the classifier)."""
        if self.kind == "xsinx":
            return rng.uniform(-3.0, 3.0, size=(K, 1)), None
        X = rng.normal(size=(K, 4))
        y = np.argmax(self._softmax(X) + 0.5 * rng.normal(size=(K, 3)), axis=1)
        return X, y


TOYS = {"toy-xsinx": ("xsinx", False), "toy-softmax": ("softmax", True)}


@cache
def get_workload(name: str) -> Any:
    """The workload called `name` (cached per process): a toy stand-in or `gencc.workloads.load(name)`."""
    if name in TOYS:
        kind, clf = TOYS[name]
        return ToyWorkload(name, kind, clf)
    try:
        from gencc import workloads
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ValueError(f"workload {name!r} needs gencc.workloads, which is not available ({err}); "
                         f"the built-in stand-ins are {', '.join(TOYS)}") from None
    return workloads.load(name, progress=False)
