"""GCC's decoder at low redundancy (K < N <= 1.5 K): per decode, the reading of the returned results that
predicts the returned systematic results best by leave-one-out, among three fixed linear decoders.

With few coded workers a lost input is recovered from one or two neighbouring results, and which reading of
them is right depends on f: the digits CNN is near-linear on GCC's coded inputs (a coded result is close to
sum_k E[n, k] f(x_k)), mnist1d's CNN is not (its outputs vary fast along the chain of inputs). No fixed
decoder is best on both (README, "Low redundancy"), but the returned systematic results tell them apart: each
is f(x_k) exactly, so hiding one and decoding it from the others measures a decoder's error on these very
inputs. The candidates, each a fixed linear map D_F of the returned results:

- "interpolate": GCC's fit through (beta_n, y_n) with the code's kernel (the classic decoder);
- "short": the same fit with a Matern 3/2 prior of length scale 0.15 and a constant mean (f varying fast);
- "linear": systematic results kept exact; the missing inputs c_U by least squares on the returned coded
  results read as y_n ~ sum_k E[n, k] c_k, with a ridge mu ||c_U - c_U^interp||^2 pulling toward the
  interpolating decode (plain least squares is badly conditioned when the coded rows barely see c_U).

The decode picks the candidate with the smallest sum over returned systematic workers of the squared
leave-one-out error (pooled over output columns; scores equal up to rounding tie, and the tie goes to the first
in the order above, so the pick does not depend on the order the results arrived in) and returns its estimate;
with every systematic result returned all three are exact and the choice is moot. Per straggler set the
candidates' D_F and their LOO residual maps are fixed matrices, cached like any code's decoders; only the pick
depends on the results.
"""

from __future__ import annotations

import math

import numpy as np

from ..rkhs.kernels import Kernel, Matern32
from ..rkhs.smoother_loo import loo_matrix
from ..rkhs.smoothing import smoother_weights

#: the regime where GCC(K, N) uses this decoder by default: K < N <= LOW_REDUNDANCY * K
LOW_REDUNDANCY = 1.5
#: ridge weight of the "linear" candidate (relative to the coded rows' weights, which are O(1))
RIDGE = 0.1
#: the "short" candidate's prior
SHORT_KERNEL = Matern32(0.15, null_degree=0)
CANDIDATES = ("interpolate", "short", "linear")
#: candidates whose LOO scores differ by less than TIE * sqrt(least score * the results' energy) tie (`pick`)
TIE = 1e-9


def systematic_workers(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray | None:
    """Worker index of each alpha_k when every alpha is also a worker point (nested design), else None."""
    pos = np.searchsorted(beta, alpha)
    pos = np.clip(pos, 0, beta.size - 1)
    ok = np.abs(beta[pos] - alpha) <= 1e-12 * max(1.0, float(np.abs(alpha).max(initial=0.0)))
    return pos.astype(np.int64) if bool(ok.all()) else None


def linear_reading(E: np.ndarray, returned: np.ndarray, systematic: np.ndarray, G: np.ndarray,
                   mu: float = RIDGE) -> np.ndarray:
    """D (K x n) of the "linear" candidate for sorted `returned` (module docstring).

    E: the encoder (N x K) whose row systematic[k] is e_k; G: the interpolating decoder for `returned`
    (K x n), the ridge's target. Solves (A^T A + mu I) c_U = A^T (y_C - B c_known) + mu G_U y, with A, B the
    returned coded rows' columns of the missing and the known inputs.
    """
    K, n = E.shape[1], returned.size
    pos = {int(w): i for i, w in enumerate(returned)}
    known = np.array([k for k in range(K) if int(systematic[k]) in pos], dtype=np.int64)
    unknown = np.setdiff1d(np.arange(K), known)
    D = np.zeros((K, n))
    D[known, [pos[int(systematic[k])] for k in known]] = 1.0
    if unknown.size == 0:
        return D
    sys_set = set(systematic.tolist())
    coded = np.array([i for i, w in enumerate(returned) if int(w) not in sys_set], dtype=np.int64)
    if coded.size == 0:
        D[unknown] = G[unknown]
        return D
    H = E[returned[coded]]
    A, B = H[:, unknown], H[:, known]
    R = -B @ D[known]  # y_C - B c_known as a map of the returned results
    R[np.arange(coded.size), coded] += 1.0
    D[unknown] = np.linalg.solve(A.T @ A + mu * np.eye(unknown.size), A.T @ R + mu * G[unknown])
    return D


def candidate_decoders(t: np.ndarray, alpha: np.ndarray, kernel: Kernel, E: np.ndarray, returned: np.ndarray,
                       systematic: np.ndarray) -> list[np.ndarray]:
    """The three candidates' D (K x n) for sorted `returned` at worker points t = beta[returned]."""
    G = smoother_weights(t, alpha, kernel, 0.0)
    return [G, smoother_weights(t, alpha, SHORT_KERNEL, 0.0), linear_reading(E, returned, systematic, G)]


def selection_matrices(t: np.ndarray, alpha: np.ndarray, kernel: Kernel, E: np.ndarray, returned: np.ndarray,
                       systematic: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(candidates' D_F, their LOO residual maps L (h x n)) for sorted `returned`: row j of L y is the error
    of decoding the j-th returned systematic result from the others. The smoothers' L is closed form
    ((G y)_i / G_ii with G the inverse bordered system, `gencc.rkhs.smoother_loo.loo_matrix`); the linear
    reading's is by refitting without each held-out worker."""
    Ds = candidate_decoders(t, alpha, kernel, E, returned, systematic)
    k_of = {int(w): k for k, w in enumerate(systematic)}
    held = np.array([i for i, w in enumerate(returned) if int(w) in k_of], dtype=np.int64)
    n = returned.size
    if held.size < 2 or n - 1 < max(kernel.q, SHORT_KERNEL.q, 1) + 1:
        return Ds, []
    Ls = []
    for kern in (kernel, SHORT_KERNEL):
        Gi = loo_matrix(t, kern, 0.0)
        Ls.append(Gi[held] / np.diag(Gi)[held, None])
    L = np.zeros((held.size, n))
    for j, i in enumerate(held):
        rest = np.delete(np.arange(n), i)
        sub = returned[rest]
        G = smoother_weights(t[rest], alpha, kernel, 0.0)
        D = linear_reading(E, sub, systematic, G)
        L[j, i] = 1.0
        L[j, rest] -= D[k_of[int(returned[i])]]
    Ls.append(L)
    return Ds, Ls


def choose(Ds: list[np.ndarray], Ls: list[np.ndarray], Y: np.ndarray) -> int:
    """Index of the candidate with the smallest summed squared LOO error on results Y (n x m), near-ties to the
    first (`pick`); 0 without LOO."""
    if not Ls:
        return 0
    return pick(np.array([float(np.sum((L @ Y) ** 2)) for L in Ls]), energy(Y))


def energy(Y: np.ndarray) -> float:
    """The results' sum of squares (n x m, any float dtype, summed in float64): `pick`'s scale."""
    if Y.dtype == np.float64:  # one dot product (einsum's set-up costs more than the sum at a job's sizes)
        v = Y.ravel()
        return float(v @ v)
    return float(np.einsum("ij,ij->", Y, Y, dtype=np.float64))


def pick(scores: np.ndarray, energy: float) -> int:
    """The first candidate (in CANDIDATES' order) whose LOO score lies within TIE * sqrt(least * energy) of the
    least score: rounding moves a score by about 1e-14 of that (the order the results arrived in changes the
    rounding), so near-ties go to the same candidate in every order; 0 when the scores are not finite (the
    decode's product then refuses the results)."""
    s = scores.tolist()  # a few candidates: plain floats cost less than numpy's per-call overhead
    least = min(s)
    if not math.isfinite(least) or not math.isfinite(energy) or any(map(math.isnan, s)):
        return 0
    bound = least + TIE * math.sqrt(least * energy)
    return list(map(bound.__ge__, s)).index(True)  # the first within the bound (the least one is)
