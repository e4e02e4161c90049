"""Point designs on Omega = [-1, 1], always returned sorted ascending."""

from __future__ import annotations

import numpy as np

from ._validate import check_int

DESIGNS = ("equispaced", "chebyshev1", "chebyshev2")
#: worker-point designs that also contain the data points alpha (see `nested`)
NESTED = ("chebyshev2-nested", "equispaced-nested")


def equispaced(n: int) -> np.ndarray:
    """n equally spaced points including both ends (n = 1 gives the midpoint 0)."""
    _check_n(n)
    return np.zeros(1) if n == 1 else np.linspace(-1.0, 1.0, n)


def chebyshev1(n: int) -> np.ndarray:
    """Chebyshev points of the first kind cos((2j-1) pi / (2n)), j = 1..n: interior, clustered at the ends."""
    _check_n(n)
    j = np.arange(1, n + 1)
    return np.sort(np.cos((2 * j - 1) * np.pi / (2 * n)))


def chebyshev2(n: int) -> np.ndarray:
    """Chebyshev points of the second kind cos((j-1) pi / (n-1)), j = 1..n: include both ends."""
    _check_n(n)
    if n == 1:
        return np.zeros(1)
    j = np.arange(1, n + 1)
    return np.sort(np.cos((j - 1) * np.pi / (n - 1)))


def design(name: str, n: int) -> np.ndarray:
    """The point design called `name` with n points."""
    table = {"equispaced": equispaced, "chebyshev1": chebyshev1, "chebyshev2": chebyshev2}
    if name not in table:
        raise ValueError(f"unknown point design {name!r}; choose one of {', '.join(DESIGNS)}")
    return table[name](n)


def _check_n(n: int) -> None:
    check_int("number of points", n, 1)


def nested(base: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """`base` with, for each anchor in turn, the nearest still-unmoved point moved onto it; sorted.

    Used for worker points that contain the data points: a worker sitting on alpha_k computes f(x_k)
    exactly, so while it returns, an interpolating decoder recovers f(x_k) without error.
    """
    b = np.sort(np.asarray(base, dtype=float)).copy()
    a = np.asarray(anchors, dtype=float).ravel()
    if a.size > b.size:
        raise ValueError(f"cannot nest {a.size} anchors in {b.size} points")
    free = np.ones(b.size, dtype=bool)
    for x in a:
        cand = np.flatnonzero(free)
        j = cand[np.argmin(np.abs(b[cand] - x))]
        b[j] = x
        free[j] = False
    out = np.sort(b)
    if np.unique(out).size != out.size:
        raise ValueError("nesting produced repeated points; anchors must be distinct")
    return out
