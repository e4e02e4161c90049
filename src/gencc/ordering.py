"""order_inputs: place similar inputs at neighbouring alphas, so f o u_enc is smooth and decodes well."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ._arrays import to_numpy

METHODS = ("chain", "spectral", "pca", "identity")


def order_inputs(X: Any, method: Literal["chain", "spectral", "pca", "identity"] = "chain") -> np.ndarray:
    """Permutation `perm` (numpy int array): input perm[j] is placed at alpha_j.

    - chain (default): a nearest-neighbour path started at the input farthest from the mean, improved by
      2-opt moves on the open path; cost O(K^2 d) for the distances plus O(K^2) per 2-opt pass.
    - spectral: sort by the Fiedler vector of a Gaussian-affinity graph; O(K^2 d + K^3).
    - pca: sort by the first principal component; O(K d min(K, d)).
    - identity: keep the given order.
    The result starts at the smaller of its two end indices, so it is deterministic.
    """
    A = np.asarray(to_numpy(X), dtype=float)
    if A.ndim == 0:
        raise ValueError("order_inputs expects X of shape (K, *in_shape)")
    K = A.shape[0]
    A = A.reshape(K, -1)
    if not np.isfinite(A).all():
        raise ValueError("X contains non-finite values (NaN or inf)")
    if method not in METHODS:
        raise ValueError(f"unknown ordering method {method!r}; choose one of {', '.join(METHODS)}")
    return order_checked(A, method)


def order_checked(A: np.ndarray, method: str = "chain") -> np.ndarray:
    """`order_inputs` of inputs already checked: A a finite float (K, d) array, method one of METHODS (a job
    checked them once already)."""
    K = A.shape[0]
    if K <= 2 or method == "identity":
        return np.arange(K)
    from scipy.spatial.distance import cdist  # here, not at import: scipy.spatial costs `import gencc` ~0.2 s

    if method == "pca":
        C = A - A.mean(axis=0)
        _, _, vt = np.linalg.svd(C, full_matrices=False)
        perm = np.argsort(C @ vt[0], kind="stable")
    elif method == "spectral":
        D = cdist(A, A, "sqeuclidean")
        sigma2 = np.median(D[np.triu_indices(K, 1)]) or 1.0
        W = np.exp(-D / sigma2)
        L = np.diag(W.sum(axis=1)) - W
        _, vecs = np.linalg.eigh(L)
        perm = np.argsort(vecs[:, 1], kind="stable")
    else:
        perm = _chain(cdist(A, A))
    if perm[0] > perm[-1]:
        perm = perm[::-1]
    return np.asarray(perm, dtype=np.int64)


def _chain(D: np.ndarray) -> np.ndarray:
    """Nearest-neighbour path from the point farthest from the others, then first-improvement 2-opt passes on
    the open path, on plain floats (a job orders K inputs every call: at small K, numpy's per-call cost
    exceeds the arithmetic)."""
    K = D.shape[0]
    start = int(np.argmax(D.sum(axis=1)))
    d = D.tolist()
    path = [start]
    left = [j for j in range(K) if j != start]  # ascending: the first minimum found is the lowest index
    cur = start
    while left:
        row = d[cur]
        best, bk = row[left[0]], 0
        for k in range(1, len(left)):
            v = row[left[k]]
            if v < best:
                best, bk = v, k
        cur = left.pop(bk)
        path.append(cur)
    p, last = path, K - 1
    # 2-opt on an open path: reverse p[i:j+1] when that shortens it (an end edge counts 0)
    for _ in range(50):
        improved = False
        for i in range(K - 1):
            pi = p[i]
            if i:
                da = d[p[i - 1]]
                dpa = da[pi]
            for j in range(i + 1, K):
                pj = p[j]
                if j < last:
                    pn = p[j + 1]
                    if i:
                        before, after = dpa + d[pj][pn], da[pj] + d[pi][pn]
                    else:
                        before, after = d[pj][pn], d[pi][pn]
                elif i:
                    before, after = dpa, da[pj]
                else:
                    continue
                if after < before - 1e-12:
                    p[i : j + 1] = p[i : j + 1][::-1]
                    improved = True
                    pi = p[i]
                    if i:
                        dpa = da[pi]
        if not improved:
            break
    return np.array(p)
