"""Private coded computing: T-privacy for LCC, BACC and GCC by random masks interpolated with the inputs.

With `colluders=T` the encoder interpolates K + T values: the K inputs at their data points `alpha` and T
Gaussian masks at T points of their own (`mask_points`), drawn fresh for every call of `encode`. A worker's
coded input is then sum_k E[n, k] x_k + sum_t E_mask[n, t] m_t: what any T colluding workers see is the inputs
seen through a Gaussian channel, and `gencc.metrics.leakage_bits` gives its mutual information in bits. The
decoder reads f o u only at the data points, so `decode` keeps its meaning (estimates of f(x_1..x_K)).

The masks' standard deviation is `mask_scale` times the root mean square of the call's inputs (so one number
per call, the inputs' overall size, is what the scale itself reveals). Over the reals nothing is perfectly
hidden: LCC's finite-field guarantee (zero leakage) becomes a leakage that falls like log(1 / mask_scale^2)
once the masks dominate, at the price of the decode's accuracy for approximate codes (f is then evaluated far
from the inputs) and of its conditioning for LCC.

Every point layout here keeps workers off the data points: a worker on alpha_k would receive x_k itself.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import numpy as np

from .._util.arrays import is_torch, to_numpy
from .._util.validate import check_int, check_real
from ..rkhs.points import chebyshev1, design
from .capabilities import Capabilities

#: a worker this close to a data point counts as sitting on it (it would receive that input nearly raw)
POINT_TOL = 1e-6
#: a worker's mask weight below this (relative to its whole encoding row) leaves its coded input unmasked
MASK_TOL = 1e-9
#: the default masks' standard deviation relative to the inputs' root mean square
DEFAULT_MASK_SCALE = 1.0


def private_points(K: int, T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all K + T interpolation points sorted, the indices of the K data points, those of the T mask points).

    The points are Chebyshev points of the first kind; the masks sit evenly spread among the data points (the
    t-th at position round((t + 1/2) (K + T) / T - 1/2)), so every stretch of [-1, 1] has a mask nearby."""
    pts = chebyshev1(K + T)
    masks = np.unique(np.clip(np.round((np.arange(T) + 0.5) * (K + T) / T - 0.5).astype(np.int64), 0, K + T - 1))
    data = np.setdiff1d(np.arange(K + T), masks)
    return pts, data, masks


def worker_points(points: np.ndarray, N: int, designs: tuple[str, ...]) -> np.ndarray:
    """The first of `designs` with N points none of which sits on one of `points` (within POINT_TOL)."""
    for name in designs:
        beta = design(name, N)
        if off_points(beta, points):
            return beta
    raise ValueError(f"every worker design ({', '.join(designs)}) puts a worker on a data or mask point for "
                     f"N={N}: change N by one")


def off_points(beta: np.ndarray, points: np.ndarray) -> bool:
    """True when no worker point lies within POINT_TOL of any of `points`."""
    return bool(np.min(np.abs(np.asarray(beta)[:, None] - np.asarray(points)[None, :])) > POINT_TOL)


class _MaskSource:
    """The masks' generator behind a lock (a code may encode from several threads); pickles without its lock."""

    def __init__(self, seed: int | None):
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        with self.lock:
            return self.rng.standard_normal(shape)

    def __getstate__(self) -> dict:
        return {"rng": self.rng}

    def __setstate__(self, state: dict) -> None:
        self.rng = state["rng"]
        self.lock = threading.Lock()


class PrivateMixin:
    """T-privacy for a code with one interpolating encoder (LCC, BACC, GCC): see the module docstring.

    A code using it calls `_init_private` in its constructor (before choosing its points), places its data
    points at `private_alpha` when `colluders` > 0, and gives `_interpolation_matrix(nodes)`, its encoder through
    any sorted nodes evaluated at `beta`, shape (N, len(nodes))."""

    colluders: int = 0
    mask_scale: float = DEFAULT_MASK_SCALE
    mask_points: np.ndarray = np.zeros(0)
    K: int
    N: int
    alpha: np.ndarray
    beta: np.ndarray

    def _init_private(self, colluders: int, mask_scale: float, seed: int | None) -> None:
        self.colluders = check_int("colluders", colluders, 0, hint="how many workers may pool what they see")
        self.mask_scale = check_real("mask_scale", mask_scale, 0.0,
                                     what="a finite non-negative number (the masks' sd over the inputs' rms)")
        self._masks = _MaskSource(check_int("seed", seed, 0, optional=True))
        self._mask_E: np.ndarray | None = None
        if self.colluders:
            pts, data, masks = private_points(self.K, self.colluders)
            self.private_alpha, self.mask_points = pts[data], pts[masks]
            self._data_cols, self._mask_cols = data, masks

    @property
    def private(self) -> bool:
        """True when the code masks its coded inputs: colluders >= 1 and mask_scale > 0."""
        return bool(self.colluders) and self.mask_scale > 0

    def _interpolation_matrix(self, nodes: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _check_private(self) -> None:
        """Refuse worker points that would hand a worker an input (nearly) raw: on a data point, or with no
        weight on the masks."""
        if not self.colluders:
            return
        if not off_points(self.beta, self.alpha):
            raise ValueError("a private code keeps every worker off the data points (a worker there receives its "
                             "input raw): choose worker points that avoid alpha")
        E = self._full_encoding()
        rows = np.linalg.norm(E, axis=1)
        weak = np.linalg.norm(E[:, self._mask_cols], axis=1) <= MASK_TOL * rows
        if weak.any():
            raise ValueError(f"worker(s) {np.flatnonzero(weak).tolist()[:8]} would receive coded inputs without "
                             "masks: move their points or lower colluders")

    def _full_encoding(self) -> np.ndarray:
        full = np.asarray(self._interpolation_matrix(np.sort(np.concatenate([self.alpha, self.mask_points]))),
                          dtype=float)
        return full

    def _encoding_matrix(self) -> np.ndarray:
        if not self.colluders:
            return self._interpolation_matrix(self.alpha)
        full = self._full_encoding()
        mask = full[:, self._mask_cols].copy()
        mask.setflags(write=False)
        self._mask_E = mask
        return full[:, self._data_cols]

    @property
    def mask_matrix(self) -> np.ndarray:
        """E_mask of shape (N, T): coded input n is sum_k E[n, k] x_k + sum_t E_mask[n, t] m_t."""
        if not self.colluders:
            return np.zeros((self.N, 0))
        if self._mask_E is None:
            self.encoding_matrix  # noqa: B018 - builds both
        assert self._mask_E is not None
        return self._mask_E

    def mask_sd(self, X: Any) -> float:
        """The masks' standard deviation for inputs X: mask_scale times their root mean square (1 when X is 0)."""
        Xn = np.asarray(to_numpy(X), dtype=float)
        rms = float(np.sqrt(np.mean(Xn * Xn))) if Xn.size else 0.0
        return self.mask_scale * (rms if rms > 0 and np.isfinite(rms) else 1.0)

    def encode(self, X: Any) -> Any:
        """Coded inputs E X plus, for a private code, E_mask M with masks M drawn fresh for this call."""
        Z = super().encode(X)  # type: ignore[misc]
        if not self.private:
            return Z
        shape = tuple(Z.shape[1:])
        M = self._masks.normal((self.colluders, int(np.prod(shape, dtype=np.int64))))
        add = (self.mask_matrix @ (M * self.mask_sd(X))).reshape((self.N, *shape))
        if is_torch(Z):
            import torch

            return Z + torch.as_tensor(add, dtype=Z.dtype, device=Z.device)
        return Z + add.astype(Z.dtype, copy=False)

    def reseed(self, seed: int | None) -> None:
        """Restart the masks' generator from `seed` (None: fresh entropy)."""
        self._masks = _MaskSource(check_int("seed", seed, 0, optional=True))

    def _private_capabilities(self, caps: Capabilities) -> Capabilities:
        """`caps` with the colluders this code covers (none without masks)."""
        return replace(caps, colluders=self.colluders) if self.private else caps

    def _private_repr(self) -> str:
        return f", colluders={self.colluders}, mask_scale={self.mask_scale!r}" if self.colluders else ""
