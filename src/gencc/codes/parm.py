"""ParM (parity models, Kosaian et al., SOSP 2019): k data queries plus one parity query per group.

Workers 0..K-1 compute f(x_k) on the inputs themselves; worker K + g receives the parity query
P_g = sum of the inputs of group g (inputs g*k .. g*k+k-1, the last group possibly smaller) and runs a parity
model F_P trained so that F_P(P_g) ~ sum_{i in g} f(x_i). A data worker that straggles is recovered as
F_P(P_g) - sum of the other outputs of its group, provided the parity worker and every other member of the
group returned; otherwise its input has no estimate (a zero row, listed by `missing`, as in Replication).
With a packed parity model (`load_parity(name, k, packed=True)`) the parity worker receives its group's k
inputs stacked instead of their sum (`encode` returns a list), ParM's concatenation encoder without the
downsampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .._util.validate import check_int
from ..rkhs.points import equispaced
from .base import Code
from .capabilities import Capabilities, as_groups


class ParM(Code):
    """ParM on N = K + ceil(K / k) workers; `parity` is the parity model F_P (a callable applied like f, i.e.
    batched when f is). parity None: the parity workers run f itself, which is exact only for linear f.

    The math layer never trains anything: learn F_P elsewhere (`gencc.workloads.load_parity`).
    """

    name = "parm"

    def __init__(self, K: int, k: int = 2, parity: Callable | None = None):
        K = check_int("K", K, 1)
        k = check_int("k (inputs per parity group)", k, 1, K, what=f"an integer in [1, K={K}]")
        if parity is not None and not callable(parity):
            raise ValueError(f"parity must be a callable parity model or None, got {type(parity).__name__}")
        groups = math.ceil(K / k)
        super().__init__(K, K + groups)
        self.k = k
        self.groups = groups
        self.parity = parity
        self.packed = bool(getattr(parity, "packed", False))
        if self.packed and (int(parity.k) != k or K % k):
            raise ValueError(f"a packed parity model for k={parity.k} needs groups of exactly that many inputs: "
                             f"use k={parity.k} with K a multiple of it (got k={k}, K={K})")
        self.group_of = np.arange(K) // k  # the group of each input
        self.alpha = equispaced(K)
        self.beta = equispaced(self.N)

    @property
    def min_results(self) -> int:
        return 0

    @property
    def uniform_workers(self) -> bool:
        return False

    @property
    def capabilities(self) -> Capabilities:
        """Partial, exact recovery: an input's own result or its group's parity recovery, else `missing`; one
        coding group per parity worker."""
        return Capabilities(partial=True, groups=as_groups((self.K + g, self.group(g)) for g in range(self.groups)))

    def worker_function(self, f: Callable | None, n: int) -> Callable | None:
        """f for data workers (n < K), the parity model for parity workers (f itself when parity is None)."""
        n = check_int("worker index", n, 0, self.N - 1, what=f"an integer in [0, N={self.N})")
        if n < self.K or self.parity is None:
            return f
        return self.parity

    def packed_groups(self) -> dict[int, np.ndarray]:
        """With a packed parity model, each parity worker receives its group's inputs stacked."""
        return {self.K + g: self.group(g) for g in range(self.groups)} if self.packed else {}

    def group(self, g: int) -> np.ndarray:
        """The inputs of parity group g."""
        return np.arange(g * self.k, min((g + 1) * self.k, self.K))

    def _encoding_matrix(self) -> np.ndarray:
        E = np.zeros((self.N, self.K))
        E[np.arange(self.K), np.arange(self.K)] = 1.0
        E[self.K + self.group_of, np.arange(self.K)] = 1.0
        return E

    def _recoverable(self, returned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inputs whose own worker returned, inputs recovered through their group's parity)."""
        got = np.zeros(self.N, dtype=bool)
        got[returned] = True
        direct = got[: self.K]
        lost_per_group = np.bincount(self.group_of[~direct], minlength=self.groups)
        via_parity = ~direct & got[self.K + self.group_of] & (lost_per_group[self.group_of] == 1)
        return direct, via_parity

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        D = np.zeros((self.K, returned.size))
        col = np.full(self.N, -1)
        col[returned] = np.arange(returned.size)
        direct, via_parity = self._recoverable(returned)
        for i in np.flatnonzero(direct):
            D[i, col[i]] = 1.0
        for i in np.flatnonzero(via_parity):
            g = self.group_of[i]
            D[i, col[self.K + g]] = 1.0
            for j in self.group(g):
                if j != i:
                    D[i, col[j]] = -1.0
        return D

    def missing(self, returned: Sequence[int]) -> np.ndarray:
        """Inputs with no estimate: their worker straggled, and so did their parity worker or another member
        of their group (their estimates are zero)."""
        direct, via_parity = self._recoverable(self.check_returned(returned))
        return np.flatnonzero(~direct & ~via_parity)

    def __repr__(self) -> str:
        return f"ParM(K={self.K}, k={self.k}, N={self.N})"
