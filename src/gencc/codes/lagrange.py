"""LCC: Lagrange coded computing over the reals, exact for polynomial f of a known degree."""

from __future__ import annotations

import numpy as np
from numpy.polynomial import chebyshev as C

from .._validate import check_int
from ..points import chebyshev1
from .base import Code


class LCC(Code):
    """Encoder: the degree-(K-1) polynomial through (alpha_k, x_k) evaluated at beta. For f a polynomial of
    degree `degree`, f o u_enc has degree (K-1) degree, so any (K-1) degree + 1 results determine it; the
    decoder fits that polynomial (least squares in the Chebyshev basis when more results arrive) and
    evaluates it at alpha. Nodes are Chebyshev points; `condition_number(returned)` reports how well posed
    the decode is over the reals.
    """

    name = "lcc"

    def __init__(self, K: int, N: int, degree: int = 1):
        super().__init__(K, N)
        self.degree = check_int("degree", degree, 1, hint="the degree of polynomial f")
        self.threshold = (K - 1) * self.degree + 1
        if N < self.threshold:
            raise ValueError(f"LCC with K={K} and degree={degree} needs N >= (K-1)*degree+1 = {self.threshold} "
                             f"workers, got N={N}")
        self.alpha = chebyshev1(K)
        self.beta = chebyshev1(N)

    @property
    def min_results(self) -> int:
        return self.threshold

    def _encoding_matrix(self) -> np.ndarray:
        V = C.chebvander(self.alpha, self.K - 1)
        return C.chebvander(self.beta, self.K - 1) @ np.linalg.inv(V)

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        deg = self.threshold - 1
        V = C.chebvander(self.beta[returned], deg)
        return C.chebvander(self.alpha, deg) @ np.linalg.pinv(V)

    def condition_number(self, returned) -> float:
        """2-norm condition number of the decoding Vandermonde system for these returned workers."""
        idx = np.sort(self.check_returned(returned))
        return float(np.linalg.cond(C.chebvander(self.beta[idx], self.threshold - 1)))
