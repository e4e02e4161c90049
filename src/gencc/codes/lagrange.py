"""LCC: Lagrange coded computing over the reals, exact for polynomial f of a known degree, and its exact error
correction (Berlekamp-Welch with a shared error locator), LCC's side of robust decoding (gencc.codes.robust).

f o u_enc is a polynomial of degree D = (K-1) deg. With A wrong results among n >= D + 1 + 2A, there is an
error locator E (degree A, zero at the wrong workers) and a polynomial P of degree D + A with
P(beta_i) = y_i E(beta_i) at every returned worker: the linear Berlekamp-Welch system. All output
coordinates share E, so E is the null vector of the stacked system after eliminating P (projecting onto the
complement of P's span); the n - A workers where |E| is largest determine the degree-D fit, and the flagged
workers are those whose result disagrees with it. Uniqueness: two degree-D polynomials that each agree with
n - A results agree on n - 2A >= D + 1 points, so they are equal.
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np
from numpy.polynomial import chebyshev as C
from scipy import linalg

from .._util.validate import check_int
from ..rkhs.points import chebyshev1
from . import robust
from .base import Code
from .capabilities import PLAIN, Capabilities
from .private import DEFAULT_MASK_SCALE, PrivateMixin, worker_points

#: a result is wrong when it misses the recovered polynomial by more than this (relative to the results' size)
RELATIVE_TOL = 1e-7
#: brute force (the fallback when the locator is numerically unsure) only below this many subsets
BRUTE_FORCE_MAX = 20000


class LCC(PrivateMixin, Code):
    """Encoder: the degree-(K-1) polynomial through (alpha_k, x_k) evaluated at beta. For f a polynomial of
    degree `degree`, f o u_enc has degree (K-1) degree, so any (K-1) degree + 1 results determine it; the
    decoder fits that polynomial (least squares in the Chebyshev basis when more results arrive) and
    evaluates it at alpha. Nodes are Chebyshev points; `condition_number(returned)` reports how well posed
    the decode is over the reals.

    colluders=T (with mask_scale > 0) makes it private (`gencc.codes.private`): the polynomial runs through the
    K inputs and T Gaussian masks, f o u_enc has degree (K+T-1) degree, and any (K+T-1) degree + 1 results
    decode f at the data points exactly (over the reals: up to the Vandermonde system's conditioning).
    """

    name = "lcc"
    robust_methods = ("loo",)

    def __init__(self, K: int, N: int, degree: int = 1, *, colluders: int = 0,
                 mask_scale: float = DEFAULT_MASK_SCALE, seed: int | None = None):
        super().__init__(K, N)
        self.degree = check_int("degree", degree, 1, hint="the degree of polynomial f")
        self._init_private(colluders, mask_scale, seed)
        T = self.colluders
        self.threshold = (K + T - 1) * self.degree + 1
        if N < self.threshold:
            need = "(K+colluders-1)*degree+1" if T else "(K-1)*degree+1"
            raise ValueError(f"LCC with K={K}{f', colluders={T}' if T else ''} and degree={degree} needs "
                             f"N >= {need} = {self.threshold} workers, got N={N}")
        if T:  # data and mask points interleaved; workers off all of them
            self.alpha = self.private_alpha
            self.beta = worker_points(np.concatenate([self.alpha, self.mask_points]), N,
                                      ("chebyshev1", "chebyshev2", "equispaced"))
            self._check_private()
        else:
            self.alpha = chebyshev1(K)
            self.beta = chebyshev1(N)

    @property
    def min_results(self) -> int:
        return self.threshold

    @property
    def capabilities(self) -> Capabilities:
        """Private against `colluders` workers when masked (`gencc.codes.private`)."""
        return self._private_capabilities(PLAIN)

    def _interpolation_matrix(self, nodes: np.ndarray) -> np.ndarray:
        """The Lagrange interpolant through `nodes` evaluated at the workers' points, (N, len(nodes))."""
        d = nodes.size - 1
        return C.chebvander(self.beta, d) @ np.linalg.inv(C.chebvander(nodes, d))

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        deg = self.threshold - 1
        V = C.chebvander(self.beta[returned], deg)
        return C.chebvander(self.alpha, deg) @ np.linalg.pinv(V)

    def __repr__(self) -> str:
        if not self.colluders:
            return super().__repr__()
        return f"LCC(K={self.K}, N={self.N}, degree={self.degree}{self._private_repr()})"

    def condition_number(self, returned) -> float:
        """2-norm condition number of the decoding Vandermonde system for these returned workers."""
        idx = np.sort(self.check_returned(returned))
        return float(np.linalg.cond(C.chebvander(self.beta[idx], self.threshold - 1)))

    def _locate_wrong(self, returned: np.ndarray, Y: np.ndarray, adversaries: int, *, method: str = "loo",
                      threshold: float = robust.DEFAULT_THRESHOLD, weights: np.ndarray | None = None) -> np.ndarray:
        """Exact error correction (`berlekamp_welch`); `threshold` and `weights` play no part."""
        return returned[berlekamp_welch(self, returned, Y, adversaries)]

    def _robust_min_results(self, adversaries: int) -> int:
        """(K-1) degree + 1 + 2A: two polynomials agreeing with n - A results each then agree on D + 1 points."""
        return self.threshold + 2 * adversaries


def berlekamp_welch(code: LCC, srt: np.ndarray, Ys: np.ndarray, A: int) -> np.ndarray:
    """Positions (into the sorted `srt`) of the wrong results among Ys (n, m); at most A of them."""
    D = code.threshold - 1
    n = srt.size
    need = D + 1 + 2 * A
    if n < need:
        raise ValueError(f"LCC corrects {A} wrong result(s) from (K-1)*degree + 1 + 2*adversaries = {need} "
                         f"results (K={code.K}, degree={code.degree}); got {n}: wait for more workers or lower "
                         "adversaries")
    if A == 0:
        return np.zeros(0, dtype=np.int64)
    t = code.beta[srt]
    scale = np.max(np.abs(Ys), axis=0)
    scale[scale == 0] = 1.0
    Yn = Ys / scale
    VP = C.chebvander(t, D + A)
    VE = C.chebvander(t, A)
    U = linalg.qr(VP, mode="full")[0][:, D + A + 1:]  # complement of P's span
    B = np.concatenate([U.T @ (Yn[:, j:j + 1] * VE) for j in range(Yn.shape[1])])
    e = linalg.svd(B, full_matrices=False)[2][-1]
    good = np.sort(np.argsort(-np.abs(VE @ e), kind="stable")[: n - A])
    bad = _disagreeing(t, Yn, good, D)
    if bad is not None and bad.size <= A:
        return bad
    return _brute_force(t, Yn, A, D)


def _disagreeing(t: np.ndarray, Yn: np.ndarray, good: np.ndarray, D: int) -> np.ndarray | None:
    """Workers whose results miss the degree-D fit through `good`; None if `good` itself is inconsistent."""
    V = C.chebvander(t, D)
    coef = linalg.lstsq(V[good], Yn[good])[0]
    miss = np.sqrt(np.mean((V @ coef - Yn) ** 2, axis=1))
    tol = RELATIVE_TOL * max(1.0, float(np.linalg.cond(V[good])))
    if np.any(miss[good] > tol):
        return None
    return np.flatnonzero(miss > tol)


def _brute_force(t: np.ndarray, Yn: np.ndarray, A: int, D: int) -> np.ndarray:
    n = t.size
    if comb(n, A) > BRUTE_FORCE_MAX:
        raise ValueError(f"LCC error correction could not locate the wrong results (more than adversaries={A} "
                         "of them, or numerically ill-posed)")
    for S in combinations(range(n), A):
        good = np.setdiff1d(np.arange(n), S)
        bad = _disagreeing(t, Yn, good, D)
        if bad is not None and bad.size <= A:
            return bad
    raise ValueError(f"more than adversaries={A} results are wrong: no degree-{D} polynomial agrees with "
                     f"{n - A} of the {n} results")
