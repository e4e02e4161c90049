"""order_inputs: place similar inputs at neighbouring alphas, so f o u_enc is smooth and decodes well."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._util.arrays import to_numpy

METHODS = ("chain", "spectral", "pca", "identity")


def order_inputs(X: Any, method: Literal["chain", "spectral", "pca", "identity"] = "chain") -> np.ndarray:
    """Permutation `perm` (numpy int array): input perm[j] is placed at alpha_j.

    - chain (default): a nearest-neighbour path started at the input farthest from the others (largest summed
      distance), improved by first-improvement 2-opt moves on the open path; cost O(K^2 d) for the distances
      (one BLAS product from 64 inputs of 256 columns on: exact for integer-valued inputs, equal to rounding
      otherwise) plus O(K^2) per 2-opt pass (plain Python below 64 inputs, numpy from there on: the same path).
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
    if method == "pca":
        C = A - A.mean(axis=0)
        _, _, vt = np.linalg.svd(C, full_matrices=False)
        perm = np.argsort(C @ vt[0], kind="stable")
    elif method == "spectral":
        D = _distance().cdist(A, A, "sqeuclidean")
        sigma2 = np.median(D[np.triu_indices(K, 1)]) or 1.0
        W = np.exp(-D / sigma2)
        L = np.diag(W.sum(axis=1)) - W
        _, vecs = np.linalg.eigh(L)
        perm = np.argsort(vecs[:, 1], kind="stable")
    else:
        D = _gram_distances(A) if K >= WIDE_K and A.shape[1] >= GRAM_D else None
        if D is None:
            # pdist's pairs once each, the same numbers as cdist's (half the work; below WIDE_K, squareform costs more)
            dist = _distance()
            D = dist.cdist(A, A) if K < WIDE_K else dist.squareform(dist.pdist(A))
        perm = _chain(D)
    if perm[0] > perm[-1]:
        perm = perm[::-1]
    return np.asarray(perm, dtype=np.int64)


_DISTANCE: Any = None


def _distance() -> Any:
    """scipy.spatial.distance, imported on first use (at import, scipy.spatial costs `import gencc` ~0.2 s)."""
    global _DISTANCE
    if _DISTANCE is None:
        from scipy.spatial import distance

        _DISTANCE = distance
    return _DISTANCE


#: from this many columns on (and WIDE_K inputs), the chain's distances come from the Gram matrix (below, pdist and
#: cdist cost less)
GRAM_D = 256


def _gram_distances(A: np.ndarray) -> np.ndarray | None:
    """Euclidean distances between A's rows from one BLAS product: |a - b|^2 = |a|^2 + |b|^2 - 2 a.b, on the rows
    shifted by their mean rounded to integers (a common offset then cancels before the product). pdist's loop
    does O(K^2 d) scalar work; this is a matrix product, 3-7x less time from a few hundred columns. Integer-valued
    inputs (raw pixels) stay integers, every sum is exact below 2^53 and the distances are cdist's, bit for bit;
    on other inputs they agree to rounding, so only near-ties closer than that may be broken otherwise. None
    when a squared norm overflows (the caller takes pdist's)."""
    C = A - np.round(A.mean(axis=0))
    with np.errstate(over="ignore", invalid="ignore"):
        D = C @ C.T
        n = D.diagonal().copy()
        D *= -2.0
        D += n[:, None]
        D += n[None, :]
    if not np.isfinite(D).all():
        return None
    np.maximum(D, 0.0, out=D)  # rounding can leave a tiny negative for near-duplicates
    np.sqrt(D, out=D)
    D = np.minimum(D, D.T)  # exactly symmetric: a 2-opt move reverses edges, reading D[a, b] as D[b, a]
    np.fill_diagonal(D, 0.0)
    return D


#: from this many inputs on, `_chain` runs on numpy arrays (below, plain floats cost less per step)
WIDE_K = 64
#: a 2-opt move counts when it shortens the path by more than this
TOL = 1e-12


def _chain(D: np.ndarray) -> np.ndarray:
    """Nearest-neighbour path from the point farthest from the others (ties: the lowest index), then
    first-improvement 2-opt passes on the open path: scanning i, then j > i, reverse p[i..j] when that shortens
    the path by more than TOL, and go on scanning from (i, j + 1). On plain floats (a job orders K inputs every
    call: at small K, numpy's per-call cost exceeds the arithmetic); from WIDE_K inputs on, `_chain_wide` gives
    the same path with numpy."""
    K = D.shape[0]
    if K >= WIDE_K and np.isfinite(D).all():
        return _chain_wide(D)
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
                if after < before - TOL:
                    p[i : j + 1] = p[i : j + 1][::-1]
                    improved = True
                    pi = p[i]
                    if i:
                        dpa = da[pi]
        if not improved:
            break
    return np.array(p)


def _chain_wide(D: np.ndarray) -> np.ndarray:
    """`_chain`'s path, the same moves in the same order, with numpy: the nearest neighbour by a masked argmin
    per step; the 2-opt scan reads blocks of rows i at once (one comparison of every pair (i, j), j > i, of the
    block on the current path), the block growing while no move is found (up to about a million pairs), and only
    the row of the first move is scanned step by step. The edges' lengths are kept in a vector e
    (e[k] = D[p[k], p[k+1]]) updated per move, so the sums compared are the same floating-point numbers as
    `_chain`'s. Needs finite D (masking by inf)."""
    K = D.shape[0]
    start = int(D.sum(axis=1).argmax())
    p = np.empty(K, dtype=np.int64)
    p[0] = cur = start
    masked = D.copy()
    masked[:, start] = np.inf
    for k in range(1, K):
        cur = int(masked[cur].argmin())  # the first minimum: the lowest index among the nearest
        masked[:, cur] = np.inf
        p[k] = cur
    last = K - 1
    e = D[p[:-1], p[1:]]

    def row_move(i: int, j: int) -> int:
        """The first j' >= j whose reversal p[i..j'] shortens the path (-1: none)."""
        if j > last:
            return -1
        pj, pn, di = p[j:last], p[j + 1:], D[p[i]]
        if i:
            a = D[p[i - 1]]
            imp = a.take(pj) + di.take(pn) < e[i - 1] + e[j:] - TOL
        else:
            imp = di.take(pn) < e[j:] - TOL
        k = int(imp.argmax()) if imp.size else 0
        if imp.size and imp[k]:
            return j + k
        return last if i and a[p[last]] < e[i - 1] - TOL else -1

    def first_row(i0: int, i1: int) -> int:
        """The first row r in [i0, i1), i0 >= 1, with a shortening reversal p[r..j] (-1: none)."""
        R, J = np.arange(i0, i1), np.arange(i0 + 1, last)
        pa, pr, pJ = p[R - 1], p[R], p[J]
        imp = D[pa[:, None], pJ] + D[pr[:, None], p[J + 1]] < e[R - 1][:, None] + e[J] - TOL
        imp &= J > R[:, None]
        hit = imp.any(axis=1) | (D[pa, p[last]] < e[R - 1] - TOL)
        k = int(hit.argmax())
        return i0 + k if hit[k] else -1

    def scan_row(i: int) -> bool:
        """Row i of a pass: every move it makes, in order; whether it made one."""
        j, moved = i + 1, False
        while (hit := row_move(i, j)) >= 0:
            p[i : hit + 1] = p[i : hit + 1][::-1].copy()
            e[i:hit] = e[i:hit][::-1].copy()
            if i:
                e[i - 1] = D[p[i - 1], p[i]]
            if hit < last:
                e[hit] = D[p[hit], p[hit + 1]]
            moved, j = True, hit + 1
        return moved

    block = max(4, 4096 // K)  # rows per first look: about 4,096 pairs
    most = max(block, (1 << 20) // K)  # rows per look at most: about a million pairs (8 MB per temporary)
    for _ in range(50):
        improved = scan_row(0)
        i, rows = 1, block
        while i < last:
            r = first_row(i, min(i + rows, last))
            if r < 0:  # no move in these rows: the path is unchanged, look at twice as many next
                i, rows = i + rows, min(2 * rows, most)
                continue
            improved |= scan_row(r)
            i, rows = r + 1, block
        if not improved:
            break
    return p
