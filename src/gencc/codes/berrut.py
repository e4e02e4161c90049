"""BACC: Berrut approximated coded computing (Jahani-Nezhad and Maddah-Ali), the main baseline: Berrut's rational
interpolant (`berrut_weights`), the code, and its side of robust decoding (the interpolant left one out in closed
form, for gencc.codes.robust's search; or ApproxIFER's locator, gencc.codes.approxifer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..rkhs.points import chebyshev1, chebyshev2
from . import robust, robust_search
from .approxifer import approxifer_locate
from .base import Code
from .capabilities import PLAIN, Capabilities
from .private import DEFAULT_MASK_SCALE, PrivateMixin, worker_points

#: |z - a_j| below this counts as z sitting on node a_j
NODE_TOL = 1e-12


def berrut_weights(nodes: np.ndarray, z: np.ndarray, tol: float = NODE_TOL) -> np.ndarray:
    """Rows w(z) of Berrut's rational interpolant through sorted `nodes`, shape (len(z), len(nodes)).

    u(z) = sum_j w_j(z) v_j / sum_j w_j(z), w_j(z) = (-1)^j / (z - a_j), signs alternating along the sorted
    nodes. A z on a node gets the unit row of that node, so nodes that coincide with evaluation points are
    safe. Every row sums to 1.
    """
    a = np.asarray(nodes, dtype=float).ravel()
    z = np.asarray(z, dtype=float).ravel()
    if a.size and np.any(np.diff(a) <= 0):
        raise ValueError("Berrut nodes must be sorted ascending and distinct")
    diff = z[:, None] - a[None, :]
    hit = np.abs(diff) < tol
    on_node = hit.any(axis=1)
    sign = np.where(np.arange(a.size) % 2 == 0, 1.0, -1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = sign[None, :] / np.where(hit, 1.0, diff)
    W = w / w.sum(axis=1, keepdims=True)
    if on_node.any():
        rows = np.flatnonzero(on_node)
        W[rows] = 0.0
        W[rows, np.argmax(hit[rows], axis=1)] = 1.0
    return W


class BACC(PrivateMixin, Code):
    """Berrut encoder through (alpha_j, x_j), alpha = chebyshev1(K); Berrut decoder through the returned
    (beta_n, y_n), re-indexed over the sorted returned set, beta = chebyshev2(N).

    colluders=T (with mask_scale > 0) is PBACC, private Berrut coded computing (`gencc.codes.private`): the
    encoder's rational interpolant runs through the K inputs and T Gaussian masks at Chebyshev points of the
    first kind (K + T of them, masks spread among the data), the decoder reads f only at the data points, and
    the workers sit off every interpolation point."""

    name = "bacc"
    robust_methods = ("loo", "approxifer")

    def __init__(self, K: int, N: int, *, alpha: np.ndarray | None = None, beta: np.ndarray | None = None,
                 colluders: int = 0, mask_scale: float = DEFAULT_MASK_SCALE, seed: int | None = None):
        super().__init__(K, N)
        self._init_private(colluders, mask_scale, seed)
        if self.colluders and alpha is not None:
            raise ValueError("a private BACC places its data and mask points itself: leave alpha out")
        if self.colluders:
            self.alpha = self.private_alpha
        else:
            self.alpha = chebyshev1(K) if alpha is None else np.sort(np.asarray(alpha, dtype=float))
        if beta is not None:
            self.beta = np.sort(np.asarray(beta, dtype=float))
        elif self.colluders:
            self.beta = worker_points(np.concatenate([self.alpha, self.mask_points]), N,
                                      ("chebyshev2", "chebyshev1", "equispaced"))
        else:
            self.beta = chebyshev2(N)
        if self.alpha.size != K or self.beta.size != N:
            raise ValueError(f"BACC needs K={K} alpha points and N={N} beta points")
        self._check_private()

    @property
    def min_results(self) -> int:
        return 1

    @property
    def capabilities(self) -> Capabilities:
        """Private against `colluders` workers when masked (`gencc.codes.private`)."""
        return self._private_capabilities(PLAIN)

    def _interpolation_matrix(self, nodes: np.ndarray) -> np.ndarray:
        """Berrut's interpolant through `nodes` evaluated at the workers' points, (N, len(nodes))."""
        return berrut_weights(nodes, self.beta)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + self._private_repr() + ")"

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        return berrut_weights(self.beta[returned], self.alpha)

    def _locate_wrong(self, returned: np.ndarray, Y: np.ndarray, adversaries: int, *, method: str = "loo",
                      threshold: float = robust.DEFAULT_THRESHOLD, weights: np.ndarray | None = None) -> np.ndarray:
        """The search over Berrut's LOO residuals (signs re-alternate past the gap), or with method="approxifer"
        ApproxIFER's locator (always A workers)."""
        robust.require_results(self, returned.size, adversaries)
        t = self.beta[returned]
        if method == "approxifer":
            return returned[approxifer_locate(t, Y, adversaries)]
        scale = robust_search.robust_spread(Y) * (1.0 if weights is None else weights)
        pos, _ = robust_search.search(berrut_loo_residuals(t, Y), t.size, adversaries, scale, threshold,
                               berrut_drop(t, Y), True)
        return returned[pos]


    def _clean_threshold(self, returned: np.ndarray, Y: np.ndarray, adversaries: int,
                         weights: np.ndarray | None = None) -> float:
        """The least threshold at which the LOO search flags nobody in these results (robust.calibrate)."""
        robust.require_results(self, returned.size, adversaries)
        scale = robust_search.robust_spread(Y) * (1.0 if weights is None else weights)
        return robust_search.clean_threshold(berrut_loo_residuals(self.beta[returned], Y), adversaries, scale)

    def _honest_scores(self, returned: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Each worker's LOO score, unweighted (robust.calibrate)."""
        R = berrut_loo_residuals(self.beta[returned], Y)([()])[0]
        return np.sqrt(np.mean(R**2, axis=1)) / robust_search.robust_spread(Y)


Residuals = Callable[[Sequence[tuple[int, ...]] | np.ndarray], np.ndarray]


def berrut_loo_residuals(t: np.ndarray, Y: np.ndarray) -> Residuals:
    """LOO residuals of Berrut's interpolant through sorted t: worker j predicted from the others, with
    the alternating signs re-indexed over the nodes that remain."""
    n = t.size

    def one(keep: np.ndarray) -> np.ndarray:
        tk, Yk = t[keep], Y[keep]
        k = tk.size
        rank = np.arange(k)
        # sign of node i when node j is left out: (-1)^(i - [i > j])
        sgn = np.where(((rank[None, :] - (rank[None, :] > rank[:, None])) % 2) == 0, 1.0, -1.0)
        with np.errstate(divide="ignore"):
            W = sgn / (tk[:, None] - tk[None, :])
        np.fill_diagonal(W, 0.0)
        W /= W.sum(axis=1, keepdims=True)
        out = np.zeros((n, Y.shape[1]))
        out[keep] = Yk - W @ Yk
        return out

    def residuals(subsets: list[tuple[int, ...]]) -> np.ndarray:
        outs = []
        for S in subsets:
            keep = np.ones(n, dtype=bool)
            keep[list(S)] = False
            outs.append(one(keep))
        return np.stack(outs)

    return residuals


def berrut_drop(t: np.ndarray, Y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """For subsets S (B, s): the squared misfit of S's results to the Berrut interpolant through the rest
    (how much leaving S out explains; BACC's analogue of GCC's energy drop)."""
    def drop(S: np.ndarray) -> np.ndarray:
        out = np.empty(len(S))
        for b, sub in enumerate(S):
            keep = np.ones(t.size, dtype=bool)
            keep[sub] = False
            out[b] = np.sum((Y[sub] - berrut_weights(t[keep], t[sub]) @ Y[keep]) ** 2)
        return out

    return drop
