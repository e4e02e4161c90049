"""BACC: Berrut approximated coded computing (Jahani-Nezhad and Maddah-Ali), the main baseline."""

from __future__ import annotations

import numpy as np

from ..points import chebyshev1, chebyshev2
from .base import Code

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


class BACC(Code):
    """Berrut encoder through (alpha_j, x_j), alpha = chebyshev1(K); Berrut decoder through the returned
    (beta_n, y_n), re-indexed over the sorted returned set, beta = chebyshev2(N)."""

    name = "bacc"

    def __init__(self, K: int, N: int, *, alpha: np.ndarray | None = None, beta: np.ndarray | None = None):
        super().__init__(K, N)
        self.alpha = chebyshev1(K) if alpha is None else np.sort(np.asarray(alpha, dtype=float))
        self.beta = chebyshev2(N) if beta is None else np.sort(np.asarray(beta, dtype=float))
        if self.alpha.size != K or self.beta.size != N:
            raise ValueError(f"BACC needs K={K} alpha points and N={N} beta points")

    @property
    def min_results(self) -> int:
        return 1

    def _encoding_matrix(self) -> np.ndarray:
        return berrut_weights(self.alpha, self.beta)

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        return berrut_weights(self.beta[returned], self.alpha)
