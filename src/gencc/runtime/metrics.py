"""The metrics of docs/design.md section 2, by these exact names. Inputs: numpy arrays or torch tensors. And what a
private code leaks (`leakage_bits`, `leakage`): the mutual information between the inputs and the view of the
worst set of colluding workers (docs/guides/privacy.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Any

import numpy as np

from .._util.arrays import to_numpy
from .._util.validate import check_int, check_real


def _pair(Yhat: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(to_numpy(Yhat), dtype=float)
    b = np.asarray(to_numpy(Y), dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"estimates and truth must have the same shape, got {a.shape} and {b.shape}")
    if a.ndim == 0 or a.shape[0] == 0:
        raise ValueError("need at least one input to score")
    return a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)


def mse(Yhat: Any, Y: Any) -> float:
    """(1 / (K m)) sum_k ||yhat_k - f(x_k)||^2: mean over inputs and output coordinates."""
    a, b = _pair(Yhat, Y)
    return float(np.mean((a - b) ** 2))


def rmse(Yhat: Any, Y: Any) -> float:
    """sqrt(mse)."""
    return float(np.sqrt(mse(Yhat, Y)))


def rel_mse(Yhat: Any, Y: Any) -> float:
    """sum_k ||yhat_k - f(x_k)||^2 / sum_k ||f(x_k)||^2: scale-free, the headline accuracy figure."""
    a, b = _pair(Yhat, Y)
    den = float(np.sum(b**2))
    if den == 0.0:
        raise ValueError("rel_mse is undefined when every true output is zero; use mse")
    return float(np.sum((a - b) ** 2) / den)


def agreement(Yhat: Any, Y: Any) -> float:
    """Fraction of inputs whose argmax estimate equals the argmax of the true output (classifiers)."""
    a, b = _pair(Yhat, Y)
    return float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1)))


def rel_acc(Yhat: Any, Y: Any, labels: Any) -> float:
    """RelAcc: accuracy of argmax yhat on `labels` divided by the accuracy of argmax f(x) on the same labels.

    NaN when f itself gets none of these inputs right (the ratio is undefined).
    """
    a, b = _pair(Yhat, Y)
    lab = np.asarray(to_numpy(labels)).ravel()
    if lab.size != a.shape[0]:
        raise ValueError(f"need one label per input: {lab.size} labels for {a.shape[0]} inputs")
    acc_f = np.mean(np.argmax(b, axis=1) == lab)
    if acc_f == 0:
        return float("nan")
    return float(np.mean(np.argmax(a, axis=1) == lab) / acc_f)


def all_metrics(Yhat: Any, Y: Any, labels: Any = None, classifier: bool = True) -> dict[str, float]:
    """Every metric that applies, as a dict keyed by the metric names."""
    out = {"mse": mse(Yhat, Y), "rmse": rmse(Yhat, Y), "rel_mse": rel_mse(Yhat, Y)}
    if classifier:
        out["agreement"] = agreement(Yhat, Y)
        out["rel_acc"] = rel_acc(Yhat, Y, labels) if labels is not None else float("nan")
    return out


# ----- privacy: what colluding workers learn about the inputs (gencc.codes.private) ------------------------------
#: the worst set of colluders is found by trying every set up to this many sets, by a search above
LEAKAGE_MAX_SETS = 20000


@dataclass(frozen=True)
class Leakage:
    """What the worst set of colluding workers learns: `bits` of mutual information per input coordinate
    (inf: unbounded, their view determines part of the inputs), the `workers` of that set, and whether the
    worst set is `exact` (every set tried) or the best a search found (a lower bound on the worst case)."""

    bits: float
    workers: tuple[int, ...]
    exact: bool


def leakage(code: Any, *, colluders: int | None = None, cov: Any = None, mask_scale: float | None = None,
            workers: Sequence[int] | None = None, max_sets: int = LEAKAGE_MAX_SETS) -> Leakage:
    """The mutual information between the inputs and what `colluders` workers see together, worst set first.

    Model (the Gaussian channel the private codes build): one input coordinate across the K inputs is
    x ~ N(0, cov) (default: independent unit variances; a number: that variance), independent across
    coordinates; worker n sees z_n = E[n] x + E_mask[n] m with masks m ~ N(0, s^2 I), s = mask_scale times the
    inputs' root mean square, sqrt(mean(diag cov)) (as `encode` scales them). For a set S,
    I(x; z_S) = 1/2 log2 det(I + A cov A^T (s^2 B B^T)^-1), A = E[S], B = E_mask[S] (bits per coordinate; K
    inputs of d coordinates leak d times this). Unbounded (inf) where the masks leave some direction of the view
    unmasked that the inputs reach: always for a code without masks. `colluders`: the set size (default the
    code's `capabilities.colluders`, at least 1); `mask_scale`: override the code's; `workers`: that one set only.
    Every set is tried up to `max_sets` sets; above, a greedy search with single swaps (`exact` False)."""
    E = np.asarray(code.encoding_matrix, dtype=float)
    N, K = E.shape
    B = np.asarray(getattr(code, "mask_matrix", np.zeros((N, 0))), dtype=float)
    T = colluders if colluders is not None else max(int(getattr(code.capabilities, "colluders", 0)), 1)
    T = check_int("colluders", T, 1, N)
    Sigma = _input_cov(cov, K)
    scale = getattr(code, "mask_scale", 0.0) if mask_scale is None else check_real("mask_scale", mask_scale, 0.0)
    var = float(scale) ** 2 * float(np.mean(np.diag(Sigma)))
    info = _set_information(E, B, Sigma, var)
    if workers is not None:
        S = tuple(sorted(int(n) for n in workers))
        if len(set(S)) != len(S) or not all(0 <= n < N for n in S) or not S:
            raise ValueError(f"workers must be distinct indices in [0, N={N}), got {list(workers)}")
        return Leakage(float(info(np.array([S]))[0]), S, True)
    if comb(N, T) <= max_sets:
        sets = np.array(list(combinations(range(N), T)), dtype=np.int64).reshape(-1, T)
        vals = np.concatenate([info(sets[i:i + 4096]) for i in range(0, len(sets), 4096)])
        best = int(np.argmax(vals))
        return Leakage(float(vals[best]), tuple(int(n) for n in sets[best]), True)
    return _search(info, N, T)


def leakage_bits(code: Any, **options: Any) -> float:
    """Bits per input coordinate the worst set of colluding workers learns about the inputs (inf: unbounded);
    `leakage(code, **options)` gives the set too (options: colluders, cov, mask_scale, workers, max_sets)."""
    return leakage(code, **options).bits


def _input_cov(cov: Any, K: int) -> np.ndarray:
    if cov is None:
        return np.eye(K)
    C = np.asarray(to_numpy(cov), dtype=float)
    if C.ndim == 0:
        return check_real("cov", float(C), 0.0, lo_open=True) * np.eye(K)
    if C.shape != (K, K) or not np.allclose(C, C.T) or not np.isfinite(C).all():
        raise ValueError(f"cov must be a variance or a symmetric ({K}, {K}) covariance of one coordinate across "
                         f"the K inputs, got shape {C.shape}")
    if np.linalg.eigvalsh(C).min() < -1e-12 * max(1.0, np.abs(C).max()):
        raise ValueError("cov must be positive semi-definite")
    return C


def _set_information(E: np.ndarray, B: np.ndarray, Sigma: np.ndarray, var: float) -> Any:
    """I(x; z_S) in bits for a batch of sets (n_sets, |S|) of worker indices. Where the set sees as many masks as
    it has workers through a well-conditioned block B_S, by whitening with B_S^-1 (accurate however large the
    leakage); otherwise through the eigenvectors of the masks' covariance, inf when the inputs reach a direction
    of the view that no mask covers (to float64's resolution)."""
    def one(A: np.ndarray, M: np.ndarray) -> float:
        signal = A @ Sigma @ A.T
        if var > 0 and M.shape[0] == M.shape[1] and M.size:
            sv = np.linalg.svd(M, compute_uv=False)
            if sv[-1] > 1e-13 * sv[0]:
                L = np.linalg.solve(M, A)
                G = L @ Sigma @ L.T / var
                return float(0.5 * np.linalg.slogdet(np.eye(len(G)) + G)[1] / np.log(2))
        noise = var * (M @ M.T)
        w, V = np.linalg.eigh(noise)
        keep = w > 1e-13 * max(float(w.max(initial=0.0)), 0.0) if w.size and w.max() > 0 else np.zeros(len(w), bool)
        Vn = V[:, ~keep]
        if Vn.size and np.abs(Vn.T @ signal @ Vn).max() > 1e-12 * max(float(np.abs(signal).max()), 1e-300):
            return float("inf")  # a direction of the view without mask that the inputs reach
        Vk = V[:, keep] / np.sqrt(w[keep])  # whiten the masked directions
        return float(0.5 * np.linalg.slogdet(np.eye(int(keep.sum())) + Vk.T @ signal @ Vk)[1] / np.log(2))

    def info(sets: np.ndarray) -> np.ndarray:
        A, M = E[sets], B[sets]  # (n, |S|, K), (n, |S|, T)
        if var <= 0 or M.shape[1] != M.shape[2] or not M.size:
            return np.array([one(a, m) for a, m in zip(A, M, strict=True)])
        sv = np.linalg.svd(M, compute_uv=False)
        good = sv[:, -1] > 1e-13 * sv[:, 0]
        out = np.empty(len(sets))
        if good.any():  # the batch's well-conditioned sets in one go
            L = np.linalg.solve(M[good], A[good])
            G = L @ Sigma @ np.swapaxes(L, 1, 2) / var
            out[good] = 0.5 * np.linalg.slogdet(np.eye(G.shape[1]) + G)[1] / np.log(2)
        for i in np.flatnonzero(~good):
            out[i] = one(A[i], M[i])
        return out

    return info


def _search(info: Any, N: int, T: int, starts: int = 4) -> Leakage:
    """The leakiest set a search finds: greedy growth from every single worker, then single swaps from the
    `starts` best grown sets while one raises the leakage (a lower bound on the worst set's)."""
    sets = [[n] for n in range(N)]
    for _ in range(T - 1):
        grown = []
        for S in sets:
            cand = [n for n in range(N) if n not in S]
            vals = info(np.array([sorted([*S, n]) for n in cand]))
            grown.append([*S, cand[int(np.argmax(vals))]])
        sets = grown
    vals = info(np.array([sorted(S) for S in sets]))
    best, best_set = -np.inf, sets[0]
    for i in np.argsort(-vals, kind="stable")[:starts]:
        S, val = list(sets[i]), float(vals[i])
        improved = True
        while improved and np.isfinite(val):
            improved = False
            for j in range(T):
                cand = [n for n in range(N) if n not in S]
                trial = np.array([sorted([*S[:j], n, *S[j + 1:]]) for n in cand])
                tv = info(trial)
                k = int(np.argmax(tv))
                if tv[k] > val * (1 + 1e-12):
                    val, S, improved = float(tv[k]), trial[k].tolist(), True
        if val > best:
            best, best_set = val, S
    return Leakage(best, tuple(sorted(int(n) for n in best_set)), False)
