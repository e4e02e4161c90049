"""Point designs on Omega = [-1, 1], always returned sorted ascending."""

from __future__ import annotations

import numpy as np

from .._util.validate import check_int

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
    vals = b.tolist()  # the free points keep these values, sorted: the nearest free one is beside x's place
    taken = bytearray(b.size)
    for x, p in zip(a.tolist(), np.searchsorted(b, a).tolist(), strict=True):
        j = _nearest_free(vals, taken, x, p)
        b[j] = x
        taken[j] = 1
    out = np.sort(b)
    if np.unique(out).size != out.size:
        raise ValueError("nesting produced repeated points; anchors must be distinct")
    return out


def _nearest_free(vals: list[float], taken: bytearray, x: float, p: int) -> int:
    """The free index whose value is nearest x, the lowest index on ties (as an argmin over the free points
    in index order would pick); `vals` sorted, p = the place of x among them (values below x lie before p)."""
    lo = p - 1
    while lo >= 0 and taken[lo]:
        lo -= 1
    if lo >= 0:  # the lowest free index holding the same value as lo
        k = lo - 1
        while k >= 0 and vals[k] == vals[lo]:
            if not taken[k]:
                lo = k
            k -= 1
    hi = p
    while hi < len(vals) and taken[hi]:
        hi += 1
    if hi == len(vals):
        return lo
    if lo < 0:
        return hi
    return lo if abs(vals[lo] - x) <= abs(vals[hi] - x) else hi
