"""Training schemes at equal N: where the data are placed (fixed at start) and how the master aggregates what
returns. Every scheme estimates the SUM of the K partitions' gradients over the step's rows.

- sync: K = N shards, one per worker; wait for all (failed workers are left out, the sum rescaled).
- ignore: K = N shards; the fastest N - S, their sum rescaled by N / |F| (backup workers / fastest-k).
- gc: Tandon et al.'s exact gradient code (cyclic or fractional repetition, s = S): each worker holds s + 1
  shards and sends sum_k B[n, k] g_k; the fastest N - s, decoded with a = lstsq(B_F^T, 1).
- agc: approximate gradient code, ErasureHead-style: FRC groups of r workers (r = `replication`, 2 by default:
  pair-wise replication) holding the same r shards and sending their sum; stop early at the fastest N - S,
  one message per group that arrived, rescaled by groups / groups present (biased only when a group is missing).
- gcc / bacc: coded data placement: K partitions aligned row by row, worker n holds the coded shard
  sum_k E[n, k] partition_k (inputs and one-hot targets alike); the fastest N - S; the master forms
  1^T D_F G_F with `code.decode_sum`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..codes.base import Code
from ..codes.schemes import scheme_spec, schemes
from .gradcodes import frc_group_weights, frc_matrix, gc_matrix, gc_weights
from .options import PLACEMENTS, TrainOptions, check_choice

#: the schemes `train` offers, from the one scheme table (`gencc.codes.schemes`): the coded placements (gcc, bacc)
#: and the baselines (sync, ignore, gc, agc)
TRAINING_SCHEMES = schemes("training")


@dataclass
class Block:
    """Rows a worker holds, weighted by `coef` in the loss it differentiates: inputs X (m, *in_shape) and soft
    targets T (m, C) (one-hot for uncoded data, coded combinations of one-hot rows for coded shards)."""

    X: np.ndarray
    T: np.ndarray
    coef: float = 1.0


@dataclass
class Plan:
    """A scheme's placement and rule: `blocks[n]` what worker n holds; `parts` the K partitions (X, T) the
    gradient estimates the sum over; `wait_for` the results the step waits for; `rows` partition rows per
    block (the same m for every partition)."""

    scheme: str
    N: int
    K: int
    m: int
    blocks: list[list[Block]]
    parts: list[tuple[np.ndarray, np.ndarray]]
    wait_for: int
    tolerate: int
    B: np.ndarray | None = None
    code: Code | None = None
    info: dict = field(default_factory=dict)

    def min_results(self) -> int:
        """The fewest results the rule can aggregate."""
        return self.code.min_results if self.code is not None else 1

    def aggregate(self, returned: list[int], G: np.ndarray) -> np.ndarray:
        """The estimate of sum_k g_k from the messages G (len(returned), P) of the workers `returned`."""
        if self.scheme in ("sync", "ignore"):
            return G.sum(axis=0) * (self.N / len(returned))
        if self.scheme == "gc":
            return gc_weights(self.B, returned) @ G
        if self.scheme == "agc":
            return frc_group_weights(self.B, returned) @ G
        return self.code.decode_sum(G, returned)


def one_hot(y: np.ndarray, classes: int, dtype: np.dtype) -> np.ndarray:
    T = np.zeros((len(y), classes), dtype=dtype)
    T[np.arange(len(y)), y] = 1.0
    return T


def partitions(X: np.ndarray, y: np.ndarray, K: int, how: str = "stratified") -> list[np.ndarray]:
    """K row-index arrays of equal length m = n // K (the remainder is left out), aligned row by row: the data
    are sorted by label, then by their first principal component, so row j of every partition holds similar
    samples (a smooth f across partitions, what coded placement needs). "stratified": partition k takes every
    K-th sorted row (each partition a stratified sample); "by-label": contiguous blocks of the sorted data
    (non-iid shards, as when each worker's data come from one source)."""
    check_choice("placement", how, PLACEMENTS, "placement")
    n = len(X)
    m = n // K
    if m < 1:
        raise ValueError(f"{n} training samples cannot fill K={K} partitions; use fewer partitions or more data")
    flat = X.reshape(n, -1).astype(np.float64)
    centred = flat - flat.mean(axis=0)
    v = np.random.default_rng(0).normal(size=flat.shape[1])
    for _ in range(30):  # power iteration: the first principal direction (cheaper than an SVD)
        v = centred.T @ (centred @ v)
        v /= np.linalg.norm(v) or 1.0
    order = np.lexsort((centred @ v, y))
    if how == "stratified":
        return [order[k::K][:m] for k in range(K)]
    return [order[k * m:(k + 1) * m] for k in range(K)]


def make_plan(scheme: str, X: np.ndarray, y: np.ndarray, classes: int, N: int, S: int, *, K: int | None = None,
              gc_kind: str = "cyclic", replication: int = 2, placement: str = "stratified", seed: int = 0,
              code_options: dict | None = None) -> Plan:
    """The placement and aggregation rule of `scheme` for N workers planning for S stragglers per step; its
    options are checked as `TrainOptions` checks them (N is workers, S tolerate, K partitions): a bad one raises
    a `gencc.errors.ConfigError` naming the parameter of `train`."""
    opts = TrainOptions(scheme=scheme, workers=N, tolerate=S, partitions=K, gc_kind=gc_kind, replication=replication,
                        placement=placement, seed=seed, code_options=code_options)
    N, S, K, spec = opts.workers, opts.tolerance, opts.K, scheme_spec(scheme, "training")
    dtype = X.dtype
    idx = partitions(X, y, K, placement)
    parts = [(X[i], one_hot(y[i], classes, dtype)) for i in idx]
    m = len(idx[0])
    wait = N if scheme == "sync" else N - S
    info: dict = {}
    B = code = None
    if scheme in ("sync", "ignore"):
        blocks = [[Block(*parts[n])] for n in range(N)]
    elif scheme == "gc":
        B = gc_matrix(gc_kind, N, S, seed)
        blocks = [[Block(*parts[k], float(B[n, k])) for k in np.flatnonzero(B[n])] for n in range(N)]
        info["gc_kind"] = gc_kind
    elif scheme == "agc":
        r = opts.replication
        B = frc_matrix(N, r - 1)
        blocks = [[Block(*parts[k]) for k in np.flatnonzero(B[n])] for n in range(N)]
        info["replication"] = r
    else:
        from ..codes.registry import make_code

        code = make_code(spec.code, K, N, **(opts.code_options or {}))
        Xs = np.stack([p[0] for p in parts])  # (K, m, *in_shape)
        Ts = np.stack([p[1] for p in parts])  # (K, m, C)
        if getattr(code, "private", False):  # its masks on top, drawn once (the data are placed once)
            Xc, Tc = (code.encode(A.astype(np.float64)).astype(dtype) for A in (Xs, Ts))
        else:  # coded shards: sum_k E[n, k] partition_k, inputs and one-hot targets alike
            E = code.encoding_matrix
            Xc = np.tensordot(E, Xs, axes=(1, 0)).astype(dtype)
            Tc = np.tensordot(E, Ts, axes=(1, 0)).astype(dtype)
        blocks = [[Block(Xc[n], Tc[n])] for n in range(N)]
        wait = max(wait, code.min_results)
    return Plan(scheme, N, K, m, blocks, parts, wait, S, B, code, info)
