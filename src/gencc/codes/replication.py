"""Uncoded replication at equal resources: each input goes to about N/K workers; the first replica wins."""

from __future__ import annotations

import numpy as np

from ..rkhs.points import equispaced
from .base import Code
from .capabilities import Capabilities


class Replication(Code):
    """Worker n computes f(x_{n mod K}) (so every input gets floor or ceil of N/K replicas). An input whose
    replicas all straggle has no estimate: its row of the decoder is zero (scored as the zero vector) and
    `missing(returned)` lists it."""

    name = "replication"

    def __init__(self, K: int, N: int):
        super().__init__(K, N)
        self.assignment = np.arange(N) % K
        self.alpha = equispaced(K)
        self.beta = equispaced(N)

    @property
    def min_results(self) -> int:
        return 0

    @property
    def capabilities(self) -> Capabilities:
        """Partial, exact recovery: an input's first replica, else `missing`."""
        return Capabilities(partial=True)

    def _encoding_matrix(self) -> np.ndarray:
        E = np.zeros((self.N, self.K))
        E[np.arange(self.N), self.assignment] = 1.0
        return E

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        D = np.zeros((self.K, returned.size))
        seen = np.zeros(self.K, dtype=bool)
        for col, w in enumerate(returned):
            k = self.assignment[w]
            if not seen[k]:
                D[k, col] = 1.0
                seen[k] = True
        return D

    def missing(self, returned) -> np.ndarray:
        """Inputs with no returned replica (their estimates are zero)."""
        got = np.zeros(self.K, dtype=bool)
        got[self.assignment[np.asarray(returned, dtype=int)]] = True
        return (~got).nonzero()[0]
