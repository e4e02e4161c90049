"""BACC's own robust search (gencc.codes.robust): leave-one-out residuals of Berrut's interpolant in closed
form, and the misfit of a left-out set to the interpolant through the rest."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .berrut import berrut_weights

Residuals = Callable[[list[tuple[int, ...]]], np.ndarray]


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
