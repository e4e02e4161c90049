"""Fixtures of the codes' tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest


def _hammer(work: Callable[[int], None], threads: int = 8) -> list[BaseException]:
    """Run work(t) on `threads` threads started together; the exceptions they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def body(t: int) -> None:
        start.wait()
        try:
            work(t)
        except BaseException as e:  # collected and reported by the test
            errors.append(e)

    ts = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


@pytest.fixture
def hammer() -> Callable[..., list[BaseException]]:
    """`hammer(work, threads=8)`: work(t) on threads started at once (a code shared as `gencc.stream` shares it)."""
    return _hammer


_PACKED_A = np.random.default_rng(5).normal(size=(3, 6))


def _packed_f(X):
    """Batched, far from linear: R^6 -> R^3."""
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    return np.tanh(X @ _PACKED_A.T) + 0.2 * (X**2) @ _PACKED_A.T


_packed_f.batched = True


class ExactPackedParity:
    """An exact packed parity model of `packed_f`: the sum of f over the stacked members (B, k, 6) -> (B, 3);
    `shapes` records every batch it was called on."""

    packed, batched = True, True

    def __init__(self, k: int):
        self.k = k
        self.shapes: list[tuple] = []

    def __call__(self, Z):
        Z = np.asarray(Z, dtype=float)
        self.shapes.append(Z.shape)
        return _packed_f(Z.reshape(-1, *Z.shape[2:])).reshape(Z.shape[0], Z.shape[1], -1).sum(axis=1)


@pytest.fixture
def packed_f() -> Callable:
    """A batched f: R^6 -> R^3, far from linear, for the packed-parity tests."""
    return _packed_f


@pytest.fixture
def exact_packed_parity() -> type[ExactPackedParity]:
    """`exact_packed_parity(k)`: an exact packed parity model of `packed_f` for groups of k inputs."""
    return ExactPackedParity


@pytest.fixture
def X8() -> np.ndarray:  # noqa: N802 - the inputs' matrix
    """Eight inputs in R^6."""
    return np.random.default_rng(0).normal(size=(8, 6))
