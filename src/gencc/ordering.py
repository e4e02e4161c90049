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
    if not np.all(np.isfinite(A)):
        raise ValueError("X contains non-finite values (NaN or inf)")
    if method not in METHODS:
        raise ValueError(f"unknown ordering method {method!r}; choose one of {', '.join(METHODS)}")
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
    K = D.shape[0]
    start = int(np.argmax(D.sum(axis=1)))
    d = D.tolist()  # plain floats: the loops below index one entry at a time
    path = [start]
    left = set(range(K)) - {start}
    while left:
        row = d[path[-1]]
        nxt = min(left, key=lambda j: (row[j], j))
        path.append(nxt)
        left.remove(nxt)
    p = path
    # 2-opt on an open path: reverse p[i:j+1] when that shortens it
    for _ in range(50):
        improved = False
        for i in range(K - 1):
            for j in range(i + 1, K):
                before = (d[p[i - 1]][p[i]] if i else 0.0) + (d[p[j]][p[j + 1]] if j + 1 < K else 0.0)
                after = (d[p[i - 1]][p[j]] if i else 0.0) + (d[p[i]][p[j + 1]] if j + 1 < K else 0.0)
                if after < before - 1e-12:
                    p[i : j + 1] = p[i : j + 1][::-1]
                    improved = True
        if not improved:
            break
    return np.array(p)
