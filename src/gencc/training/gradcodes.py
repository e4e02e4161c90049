"""Gradient codes (Tandon, Lei, Dimakis, Karampatziakis, ICML 2017): which partitions each worker holds and the
linear combination it sends, and the master's exact decode `a = lstsq(B_F^T, 1)`.

B is N x K (here K = N partitions): worker n holds the partitions in the support of row n (s + 1 of them) and
sends sum_k B[n, k] g_k. From any N - s rows, 1 lies in the span of B_F's rows, so a^T B_F = 1^T and
sum_i a_i (B g)_i = sum_k g_k exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._util.validate import check_int

#: the gradient-code constructions `gc` offers
GC_KINDS = ("frc", "cyclic")


def frc_matrix(N: int, s: int) -> np.ndarray:
    """Fractional repetition: N / (s + 1) groups of s + 1 workers; the workers of group i all hold partitions
    i(s+1) .. i(s+1)+s and send their sum. Needs (s + 1) to divide N."""
    N, s = check_int("N", N, 1), check_int("s", s, 0)
    if s >= N or N % (s + 1):
        raise ValueError(f"fractional repetition needs s + 1 to divide N and s < N; got N={N}, s={s} "
                         "(use the cyclic code, or change N or s)")
    B = np.zeros((N, N))
    for n in range(N):
        g = n // (s + 1)
        B[n, g * (s + 1):(g + 1) * (s + 1)] = 1.0
    return B


def cyclic_matrix(N: int, s: int, seed: int = 0) -> np.ndarray:
    """Tandon et al.'s cyclic code (their Algorithm 2): worker n holds partitions n, n+1, .., n+s (mod N); its
    row lies in the null space of a random s x N matrix H with H 1 = 0, so any N - s rows span that null space,
    which holds 1."""
    N, s = check_int("N", N, 1), check_int("s", s, 0)
    if s >= N:
        raise ValueError(f"a cyclic gradient code needs s < N; got N={N}, s={s}")
    rng = np.random.default_rng([seed, 19])
    H = rng.normal(size=(s, N))
    if s:
        H[:, -1] = -H[:, :-1].sum(axis=1)
    B = np.zeros((N, N))
    for n in range(N):
        cols = [(n + t) % N for t in range(s + 1)]
        B[n, cols[0]] = 1.0
        if s:
            B[n, cols[1:]] = np.linalg.solve(H[:, cols[1:]], -H[:, cols[0]])
    return B


def gc_matrix(kind: str, N: int, s: int, seed: int = 0) -> np.ndarray:
    """B of gradient code `kind` (one of GC_KINDS)."""
    if kind == "frc":
        return frc_matrix(N, s)
    if kind == "cyclic":
        return cyclic_matrix(N, s, seed)
    raise ValueError(f"unknown gradient code {kind!r}; choose one of {', '.join(GC_KINDS)}")


def gc_weights(B: np.ndarray, returned: Sequence[int]) -> np.ndarray:
    """a = lstsq(B_F^T, 1): the master's weights on the returned workers' messages (exact when 1 is in the row
    span of B_F, the least-squares best otherwise)."""
    F = np.asarray(returned, dtype=np.int64)
    if F.size == 0:
        raise ValueError("gradient-code decode needs at least one returned worker")
    a, *_ = np.linalg.lstsq(B[F].T, np.ones(B.shape[1]), rcond=None)
    return a


def frc_group_weights(B: np.ndarray, returned: Sequence[int]) -> np.ndarray:
    """ErasureHead-style approximate decode of an FRC code: one returned worker per group that has one (the
    first listed), each weighted by (groups / groups present): an unbiased rescale of the sum over the groups
    that arrived. Weights are given in the order of `returned`."""
    F = [int(w) for w in returned]
    keys = [tuple(np.flatnonzero(B[w]).tolist()) for w in F]
    groups = {tuple(np.flatnonzero(row).tolist()) for row in B}
    seen: set[tuple] = set()
    w = np.zeros(len(F))
    for i, k in enumerate(keys):
        if k not in seen:
            seen.add(k)
            w[i] = 1.0
    return w * (len(groups) / max(len(seen), 1))
