"""GCC: the general coded computing scheme with RKHS (smoothing-spline) encoder and decoder."""

from __future__ import annotations

import numpy as np

from ..kernels import Kernel, get_kernel
from ..points import design
from ..smoothing import LamSpec, select_lam, smoother_weights
from .base import Code


class GCC(Code):
    """Encoder: u_enc fitted to (alpha_k, x_k), coded inputs u_enc(beta_n). Decoder: u_dec fitted to the
    returned (beta_n, y_n), estimates u_dec(alpha_k). Both are penalised least squares in the RKHS of
    `kernel` (default: the cubic smoothing spline of LeTCC).

    lam_enc, lam_dec: penalty weights (0 interpolates); lam_dec may be "gcv" or "loo" to choose it per
    straggler pattern from the returned results (pooled over output columns).
    """

    name = "gcc"

    def __init__(
        self,
        K: int,
        N: int,
        *,
        kernel: str | Kernel = "cubic",
        lam_enc: float = 0.0,
        lam_dec: LamSpec = 1e-6,
        alpha: str | np.ndarray = "chebyshev1",
        beta: str | np.ndarray = "chebyshev2",
    ):
        super().__init__(K, N)
        self.kernel = get_kernel(kernel)
        self.lam_enc = float(lam_enc)
        if self.lam_enc < 0 or not np.isfinite(self.lam_enc):
            raise ValueError(f"lam_enc must be a finite non-negative number, got {lam_enc!r}")
        if isinstance(lam_dec, str):
            if lam_dec not in ("gcv", "loo"):
                raise ValueError(f"lam_dec must be a non-negative number, 'gcv' or 'loo', got {lam_dec!r}")
        elif not (np.isfinite(lam_dec) and lam_dec >= 0):
            raise ValueError(f"lam_dec must be a finite non-negative number, 'gcv' or 'loo', got {lam_dec!r}")
        self.lam_dec = lam_dec
        self.alpha = _points(alpha, K, "alpha")
        self.beta = _points(beta, N, "beta")
        self.alpha_design = alpha if isinstance(alpha, str) else "custom"
        self.beta_design = beta if isinstance(beta, str) else "custom"
        if K < self.kernel.q:
            raise ValueError(f"kernel {self.kernel.name} has a null space of dimension {self.kernel.q}; "
                             f"need K >= {self.kernel.q}, got K={K}")

    @property
    def min_results(self) -> int:
        return max(self.kernel.q, 1)

    @property
    def data_dependent(self) -> bool:
        return isinstance(self.lam_dec, str)

    def _encoding_matrix(self) -> np.ndarray:
        return smoother_weights(self.alpha, self.beta, self.kernel, self.lam_enc)

    def _cache_key(self, returned: np.ndarray, Y: np.ndarray | None) -> tuple | None:
        return None if self.data_dependent else tuple(returned.tolist())

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        t = self.beta[returned]
        lam = self.lam_dec
        if isinstance(lam, str):
            if Y is None:
                raise ValueError(f"lam_dec={lam!r} chooses lam from the results: pass Y to decoding_matrix")
            lam = select_lam(t, Y, self.kernel, lam)
        self.last_lam_dec = float(lam)
        return smoother_weights(t, self.alpha, self.kernel, lam)

    def __repr__(self) -> str:
        return (f"GCC(K={self.K}, N={self.N}, kernel={self.kernel!r}, lam_enc={self.lam_enc}, "
                f"lam_dec={self.lam_dec!r}, alpha={self.alpha_design}, beta={self.beta_design})")


def _points(spec: str | np.ndarray, n: int, label: str) -> np.ndarray:
    """A sorted point set in [-1, 1] from a design name or explicit points."""
    if isinstance(spec, str):
        return design(spec, n)
    pts = np.sort(np.asarray(spec, dtype=float).ravel())
    if pts.size != n:
        raise ValueError(f"{label} must hold {n} points, got {pts.size}")
    if not np.all(np.isfinite(pts)) or pts.min() < -1 or pts.max() > 1:
        raise ValueError(f"{label} points must be finite and lie in [-1, 1]")
    if np.unique(pts).size != n:
        raise ValueError(f"{label} points must be distinct")
    return pts
