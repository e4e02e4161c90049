"""GCC: the general coded computing scheme with RKHS (smoothing-spline) encoder and decoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._validate import check_nonneg, check_real
from ..kernels import KERNELS, CubicSpline, Kernel, Matern32, get_kernel
from ..points import DESIGNS, NESTED, design, nested
from ..smoothing import LamSpec, select_lam, smoother_weights
from .base import Code, _unsort

#: with kernel="auto", fits through more points than this use the O(n) cubic spline
AUTO_DENSE_MAX = 512


class GCC(Code):
    """Encoder: u_enc fitted to (alpha_k, x_k), coded inputs u_enc(beta_n). Decoder: u_dec fitted to the
    returned (beta_n, y_n), estimates u_dec(alpha_k). Both are penalised least squares in the RKHS of
    `kernel` (default: the cubic smoothing spline of LeTCC).

    lam_enc, lam_dec: penalty weights (0 interpolates); lam_dec may be "gcv" or "loo" to choose it per
    straggler pattern from the returned results (pooled over output columns).

    Defaults (chosen by measurement, see the README): kernel "auto" is the Matern 3/2 kernel with length
    scale 0.3 and an unpenalised linear trend (its RKHS is W^{2,2}, the space of LeTCC, with a tension-like
    norm) for fits through at most AUTO_DENSE_MAX points, and the cubic smoothing spline on its O(n) banded
    path above that (the dense Matern solve is O(n^3) and ill-conditioned for thousands of clustered points).
    alpha at Chebyshev points of the first kind, beta at Chebyshev points of the second kind with the
    nearest worker moved onto each alpha, lam = 0 (results are noiseless).
    """

    name = "gcc"

    def __init__(
        self,
        K: int,
        N: int,
        *,
        kernel: str | Kernel = "auto",
        lam_enc: float = 0.0,
        lam_dec: LamSpec = 0.0,
        alpha: str | np.ndarray = "chebyshev1",
        beta: str | np.ndarray = "chebyshev2-nested",
    ):
        super().__init__(K, N)
        if isinstance(kernel, str) and kernel != "auto" and kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; choose auto (the default), {', '.join(KERNELS)} or pass "
                             "a gencc.kernels.Kernel")
        for label, spec, names in (("alpha", alpha, DESIGNS), ("beta", beta, (*NESTED, *DESIGNS))):
            if isinstance(spec, str) and spec not in names:
                default = "chebyshev1" if label == "alpha" else "chebyshev2-nested"
                raise ValueError(f"unknown point design {spec!r} for {label}; choose one of {', '.join(names)} "
                                 f"(default {default}) or pass points")
        self.auto_kernel = isinstance(kernel, str) and kernel == "auto"
        self.kernel = Matern32(0.3, null_degree=1) if self.auto_kernel else get_kernel(kernel)
        self.lam_enc = check_nonneg("lam_enc", lam_enc)
        if not (isinstance(lam_dec, str) and lam_dec in ("gcv", "loo")):
            lam_dec = check_real("lam_dec", lam_dec, 0.0, what="a finite non-negative number, 'gcv' or 'loo'")
        self.lam_dec = lam_dec
        self.alpha = _points(alpha, K, "alpha")
        if isinstance(beta, str) and beta in NESTED:
            self.beta = nested(design(beta.removesuffix("-nested"), N), self.alpha)
        else:
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

    def kernel_for(self, n: int) -> Kernel:
        """The kernel used for a fit through n points."""
        if self.auto_kernel and n > AUTO_DENSE_MAX:
            return CubicSpline()
        return self.kernel

    def _encoding_matrix(self) -> np.ndarray:
        return smoother_weights(self.alpha, self.beta, self.kernel_for(self.K), self.lam_enc)

    def _cache_key(self, returned: np.ndarray, Y: np.ndarray | None) -> tuple | None:
        return None if self.data_dependent else tuple(returned.tolist())

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        return self._fit_decoder(returned, Y)[0]

    def _fit_decoder(self, returned: np.ndarray, Y: np.ndarray | None) -> tuple[np.ndarray, float]:
        """(D for sorted `returned`, the lam it was fitted with)."""
        t = self.beta[returned]
        lam = self.lam_dec
        if isinstance(lam, str):
            if Y is None:
                raise ValueError(f"lam_dec={lam!r} chooses lam from the results: pass Y to decoding_matrix")
            lam = select_lam(t, Y, self.kernel_for(t.size), lam)
        return smoother_weights(t, self.alpha, self.kernel_for(t.size), lam), float(lam)

    def decoding_matrix_and_lam(self, returned: Sequence[int], Y: Any = None) -> tuple[np.ndarray, float]:
        """D_F as `decoding_matrix` gives it, and the lam_dec it was fitted with: lam_dec itself, or the lam
        that GCV / LOO chose for these results (`Y` then required). Safe to call from several threads."""
        if not self.data_dependent:
            return self.decoding_matrix(returned), float(self.lam_dec)
        order, srt, Ys = self._sorted(returned, Y)
        D, lam = self._fit_decoder(srt, Ys)
        return _unsort(np.asarray(D, dtype=float), order), lam

    def __repr__(self) -> str:
        kern = "'auto'" if self.auto_kernel else repr(self.kernel)
        return (f"GCC(K={self.K}, N={self.N}, kernel={kern}, lam_enc={self.lam_enc}, "
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
