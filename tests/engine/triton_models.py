"""Models the Triton tests serve (numpy and the standard library only: tests/engine/triton_replica.py loads this
file in the Triton venv, which has neither gencc nor pytest)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def smooth(X: Any) -> np.ndarray:
    """(B, 4) -> (B, 3): smooth, not linear, so a coded decode is close to it but not equal."""
    X = np.asarray(X, dtype=np.float64)
    return np.stack([np.tanh(X).sum(axis=1), X[:, 0] * X[:, 1], np.sin(X[:, 2]) - X[:, 3]], axis=1)


def slow(sleep_s: float, replica: int = 0, slow_replicas: tuple = (0,)) -> Any:
    """`smooth`, `sleep_s` seconds slower per call on the replicas `slow_replicas` (its own model code)."""

    def f(X: Any) -> np.ndarray:
        if replica in slow_replicas:
            time.sleep(sleep_s)
        return smooth(X)

    return f
