"""SystematicGCC: a code for low redundancy (N/K <= 2) with a systematic encoder and a kriging decoder.

Workers sit on the data points alpha (systematic: worker of input k computes f(x_k) itself) or are coded:
the N - K coded workers get the means of consecutive groups of inputs (inputs ordered by `order_inputs`, so
a group holds similar inputs). The decoder reads every returned result through one linear-Gaussian model,

    y_n = sum_k E[n, k] c_k + r_n,   c = (f(x_1), .., f(x_K)) ~ GP(kernel) at alpha (+ unknown constant),

with r_n = 0 for systematic workers and r_n ~ N(0, rho) (independent) for coded ones: the residual of f
against its own linearisation on the group mean, as a fraction of the GP's signal variance. The estimate is
the posterior mean of c (universal kriging), a fixed linear map D_F of the returned results per straggler
set F, so it is cached and used like any other code's. It is exact wherever the input's own worker answered;
a single loss per group is read mostly from the group's coded result (ParM's recovery, untrained); several
losses, or a lost coded worker, fall back on the GP prior (GCC's smoothness along the ordered inputs).

With `parity` (a parity model F_P trained so that F_P(x_1 + .. + x_s) ~ f(x_1) + .. + f(x_s), e.g.
`gencc.workloads.load_parity(name, k)`) coded workers run z -> F_P(s z) / s, which is exactly ParM's parity
query on the group, so at one straggler the decode matches ParM and at two or more it keeps what ParM loses.
A *packed* parity model (`load_parity(name, k, packed=True)`, attribute `packed`) gets the group's inputs
themselves, stacked: coded workers then receive their k inputs (`encode` returns a list) and run
Z -> F_P(Z) / k; the decoder's model is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import linalg

from .._util.arrays import take_rows, to_numpy
from .._util.lru import LRU
from ..model import apply_batch
from ..rkhs.kernels import Kernel, Matern32, get_kernel
from .base import Code
from .capabilities import Capabilities, as_groups

#: straggler patterns whose uncertainty pieces (posterior variances, REML forms) a code keeps
UNCERTAINTY_CACHE_SIZE = 128

#: default residual-to-signal variance ratio of the coded results (see `calibrate_rho` to measure it)
DEFAULT_RHO = 1e-2
#: length scales `SystematicGCC.calibrated` chooses from (by restricted maximum likelihood)
LENGTH_SCALES = (0.05, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 1.0)


class SystematicGCC(Code):
    """Systematic code with group-mean coded workers and a kriging decoder (module docstring).

    K systematic workers at alpha (equispaced in [-1, 1]), N - K coded workers; coded worker g gets the mean
    of the inputs in group g (K inputs split into N - K consecutive groups of nearly equal size) and sits
    between the middle two of them on [-1, 1], so `beta` is sorted in worker order. rho > 0: variance of a
    coded result's residual relative to the prior's signal variance (`calibrate_rho`); kernel: the GP prior
    of f along the ordered inputs (default "auto": GCC's Matern 3/2 with length scale 0.3, with an unknown
    constant mean (ordinary kriging) instead of GCC's linear trend: nothing makes a classifier's outputs
    trend linearly along the chain of inputs, and the constant measured better).
    """

    name = "sgcc"

    def __init__(self, K: int, N: int, *, rho: float = DEFAULT_RHO, kernel: str | Kernel = "auto",
                 parity: Callable | None = None):
        super().__init__(K, N)
        self._uncertainty_cache: LRU[tuple, Any] = LRU(UNCERTAINTY_CACHE_SIZE)  # the gate's, per pattern
        if N > 2 * K:
            raise ValueError(f"SystematicGCC is for low redundancy, N <= 2K (got N={N}, K={K}); above that use "
                             "GCC, whose coded curve uses the extra workers better")
        try:
            rho = float(rho)
        except (TypeError, ValueError):
            raise ValueError(f"rho must be a positive number, got {rho!r}") from None
        if not (np.isfinite(rho) and rho > 0):
            raise ValueError(f"rho must be a finite positive number (the coded results' residual variance "
                             f"relative to the prior's), got {rho!r}")
        if parity is not None and not callable(parity):
            raise ValueError(f"parity must be a callable parity model or None, got {type(parity).__name__}")
        self.rho = rho
        self.kernel = Matern32(0.3, null_degree=0) if isinstance(kernel, str) and kernel == "auto" \
            else get_kernel(kernel)
        if K < self.kernel.q:
            raise ValueError(f"kernel {self.kernel.name} has a null space of dimension {self.kernel.q}; "
                             f"need K >= {self.kernel.q}, got K={K}")
        self.parity = parity
        self.groups = [g for g in np.array_split(np.arange(K), N - K)] if N > K else []
        self.packed = bool(getattr(parity, "packed", False))
        if self.packed:
            sizes = sorted({len(g) for g in self.groups})
            if sizes != [int(parity.k)]:
                raise ValueError(f"a packed parity model for k={parity.k} needs every coded group to hold exactly "
                                 f"{parity.k} inputs; K={K}, N={N} gives groups of {sizes}: choose N - K dividing "
                                 f"K with K / (N - K) = {parity.k}, or a parity model for that k")
        self.alpha = np.linspace(-1.0, 1.0, K) if K > 1 else np.zeros(1)
        # coded worker g sits a third of a gap beyond its group on the side away from the nearer end of
        # [-1, 1]: no two neighbouring workers then hold an end input and the only other source of it
        h = 2.0 / max(K - 1, 1)
        cpos = np.array([self._coded_point(g, h) for g in self.groups])
        pts = np.concatenate([self.alpha, cpos])
        order = np.argsort(pts, kind="stable")
        self.beta = pts[order]
        where = np.empty(N, dtype=np.int64)
        where[order] = np.arange(N)
        self.systematic = where[:K]  # worker of input k
        self.coded = where[K:]  # worker of group g
        self.group_size = np.zeros(N, dtype=np.int64)
        self.group_size[self.coded] = [len(g) for g in self.groups]
        # one wrapper per group size, built once: workers that share a callable are applied together
        self._parity_fns = {} if parity is None else {
            s: _GroupParity(parity, s, self.packed) for s in sorted({len(g) for g in self.groups})}

    @classmethod
    def calibrated(cls, K: int, N: int, f: Callable, X_sets: Sequence[Any], *, parity: Callable | None = None,
                   length_scales: Sequence[float] = LENGTH_SCALES) -> SystematicGCC:
        """A code whose prior is fitted to f on `X_sets` (sets of K inputs in coding order; training inputs,
        never the ones you will score on): the Matern 3/2 length scale (constant mean) that maximises the
        restricted likelihood of the f values, then rho by `calibrate_rho`. `calibration` holds both."""
        Xs = [np.asarray(to_numpy(X)) for X in X_sets]
        if not Xs:
            raise ValueError("calibration needs at least one input set")
        c = apply_batch(f, np.concatenate(Xs)).reshape(len(Xs), K, -1)
        alpha = cls(K, N).alpha
        best = max(length_scales, key=lambda ell: reml(Matern32(float(ell), null_degree=0), alpha, c))
        kernel = Matern32(float(best), null_degree=0)
        rho = calibrate_rho(cls(K, N, kernel=kernel, parity=parity), f, Xs)
        code = cls(K, N, rho=rho, kernel=kernel, parity=parity)
        code.calibration = {"length_scale": float(best), "rho": rho}
        return code

    def _coded_point(self, g: np.ndarray, h: float) -> float:
        after, before = self.alpha[g[-1]] + h / 3, self.alpha[g[0]] - h / 3
        first, second = (after, before) if self.alpha[g].mean() < 0 else (before, after)
        for t in (first, second):
            if -1.0 <= t <= 1.0:
                return float(t)
        return float(self.alpha[g[(len(g) - 1) // 2]] + h / 3)  # one group holding every input

    @property
    def min_results(self) -> int:
        return max(self.kernel.q, 1)

    @property
    def uniform_workers(self) -> bool:
        return self.parity is None

    @property
    def capabilities(self) -> Capabilities:
        """An uncertainty estimate, one coding group per coded worker, and with a parity model the coded
        workers' scales: z -> F_P(s z) / s (packed: Z -> F_P(Z) / s) for a group of s inputs."""
        scales = None if self.parity is None else tuple(
            (1.0, 1.0) if s == 0 else (1.0 if self.packed else float(s), float(s)) for s in self.group_size.tolist())
        return Capabilities(uncertainty=True, groups=as_groups(zip(self.coded, self.groups, strict=True)),
                            scales=scales)

    def worker_function(self, f: Callable | None, n: int) -> Callable | None:
        """f for systematic workers; with `parity`, coded worker n (group of s inputs) runs z -> F_P(s z) / s."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n < self.N:
            raise ValueError(f"worker index must be an integer in [0, N={self.N}), got {n!r}")
        s = int(self.group_size[n])
        if self.parity is None or s == 0:
            return f
        return self._parity_fns[s]

    def packed_groups(self) -> dict[int, np.ndarray]:
        """With a packed parity model, each coded worker receives its group's inputs stacked."""
        if not self.packed:
            return {}
        return {int(n): g for n, g in zip(self.coded, self.groups, strict=True)}

    def _encoding_matrix(self) -> np.ndarray:
        E = np.zeros((self.N, self.K))
        E[self.systematic, np.arange(self.K)] = 1.0
        for n, g in zip(self.coded, self.groups, strict=True):
            E[n, g] = 1.0 / len(g)
        return E

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        E = self.encoding_matrix[returned]
        coded = self.group_size[returned] > 0
        known = E[~coded].argmax(axis=1)  # inputs whose own worker answered
        unknown = np.ones(self.K, dtype=bool)
        unknown[known] = False
        # the posterior is the same without coded results whose group lost nothing (they only carry their own
        # residual); leaving them out keeps the system well conditioned for small rho
        use = ~coded | (E[:, unknown].sum(axis=1) > 0)
        D = np.zeros((self.K, returned.size))
        if unknown.any():
            D[:, use] = kriging_decoder(E[use], self.kernel(self.alpha, self.alpha),
                                        self.kernel.null_space(self.alpha), self.rho * coded[use])
        D[known] = 0.0
        D[known, np.flatnonzero(~coded)] = 1.0  # exact: the posterior interpolates exact results
        return D

    # ----- the decoder's own uncertainty (serving's gate, gencc.serving._policy.gate) ----------------------
    def _reading(self, returned: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(H, Kc, T, noise) of the linear-Gaussian model for `returned` (validated, in the caller's order)."""
        idx = self.check_returned(returned)
        H = self.encoding_matrix[idx]
        return (H, self.kernel(self.alpha, self.alpha), self.kernel.null_space(self.alpha),
                self.rho * (self.group_size[idx] > 0))

    def posterior_var(self, returned: Sequence[int]) -> np.ndarray:
        """Per input k, the variance of the decode's error c_k - chat_k under the decoder's own model (module
        docstring), in units of the prior's signal variance: 0 where k's own worker answered, the kriging
        variance otherwise. Depends on the straggler set only (cached per set, in the caller's order)."""
        idx = self.check_returned(returned)

        def build() -> np.ndarray:
            H, Kc, _, noise = self._reading(idx)
            return decoder_error_var(self.decoding_matrix(idx), Kc @ H.T, H @ Kc @ H.T + np.diag(noise),
                                     np.diag(Kc))
        return self._uncertainty_cache.get_or_build(("posterior-var", *idx.tolist()), build).copy()

    def signal_var(self, Y: Any, returned: Sequence[int]) -> float:
        """The prior's signal variance (per output coordinate) estimated from the results themselves: the REML
        estimate y^T P y / ((rank - q) m) of the model y = H c + r (0 when the results leave no degree of
        freedom beyond the trend); its quadratic form is cached per straggler set."""
        idx = self.check_returned(returned)
        Yn = np.asarray(to_numpy(Y), dtype=float).reshape(idx.size, -1)

        def build() -> tuple[np.ndarray, int] | None:
            H, Kc, T, noise = self._reading(idx)
            return reml_form(H @ Kc @ H.T + np.diag(noise), H @ T)
        return reml_apply(self._uncertainty_cache.get_or_build(("reml-form", *idx.tolist()), build), Yn)

    def decode_uncertainty(self, Y: Any, returned: Sequence[int]) -> np.ndarray:
        """Per input, the estimated standard deviation of each decoded output coordinate's error:
        sqrt(posterior_var * signal_var) (0 where the input's own worker answered; inf where it did not and the
        results leave the signal variance unknown)."""
        return _error_sd(self.posterior_var(returned), self.signal_var(Y, returned))

    def __repr__(self) -> str:
        par = "" if self.parity is None else ", parity=..."
        return f"SystematicGCC(K={self.K}, N={self.N}, rho={self.rho:g}, kernel={self.kernel!r}{par})"


class _GroupParity:
    """A coded worker of a group of s inputs, read as their mean: z -> F_P(s z) / s for a parity model trained on
    sums (z the group mean), or with `packed` Z -> F_P(Z) / s (Z the s members stacked)."""

    def __init__(self, parity: Callable, s: int, packed: bool):
        self.parity, self.s, self.packed = parity, s, packed
        self.batched = bool(getattr(parity, "batched", False))

    def __call__(self, Z: Any) -> Any:
        return self.parity(Z if self.packed else Z * self.s) / self.s


def kriging_decoder(H: np.ndarray, Kc: np.ndarray, T: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """D (K x n) with c_hat = D y: the posterior mean of c from y = H c + r (universal kriging).

    c has prior covariance Kc (K x K) plus an unpenalised trend T d (T: K x q, flat prior on d); r is
    independent N(0, diag(noise)) (zeros: exact results). Solves the bordered system
    [[H Kc H^T + diag(noise), H T], [(H T)^T, 0]] [a; b] = [I; 0] and returns Kc H^T a + T b.
    """
    n, q = H.shape[0], T.shape[1]
    C = H @ Kc @ H.T + np.diag(noise)
    C = (C + C.T) / 2
    C[np.diag_indices(n)] += 1e-12 * max(float(np.trace(C)) / max(n, 1), 1.0)
    HT = H @ T
    M = np.zeros((n + q, n + q))
    M[:n, :n], M[:n, n:], M[n:, :n] = C, HT, HT.T
    rhs = np.zeros((n + q, n))
    rhs[:n] = np.eye(n)
    try:
        sol = linalg.solve(M, rhs, assume_a="sym")
    except linalg.LinAlgError:
        sol = linalg.lstsq(M, rhs)[0]
    return Kc @ H.T @ sol[:n] + T @ sol[n:]


def decoder_error_var(D: np.ndarray, cross: np.ndarray, C: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """diag Var(c - D y) for c with prior variances `prior` (K,), observations y with covariance C (n x n) and
    cross-covariance Cov(c, y) = `cross` (K x n): prior - 2 diag(D cross^T) + diag(D C D^T). For a decoder that
    reproduces the model's trend (D H T = T, the kriging decoder) the trend cancels and this is its error
    variance under the flat trend prior; clipped at 0 (rounding)."""
    v = prior - 2 * np.einsum("kn,kn->k", D, cross) + np.einsum("kn,nm,km->k", D, C, D)
    return np.maximum(v, 0.0)


def _error_sd(var: np.ndarray, scale: float, tol: float = 1e-12) -> np.ndarray:
    """sqrt(var * scale), with inf where var > 0 but the scale is unknown (0)."""
    v = np.where(var > tol, var, 0.0)
    return np.sqrt(v * scale) if scale > 0 else np.where(v > 0, np.inf, 0.0)


def reml_scale(C: np.ndarray, B: np.ndarray, Y: np.ndarray) -> float:
    """The REML estimate of a scale s^2 with Y's columns ~ N(B b, s^2 C) (b flat): tr(Y^T P Y) / ((r - q) m),
    P = C^+ - C^+ B (B^T C^+ B)^+ B^T C^+ (pseudo-inverses: repeated or exact results may make C singular),
    r = rank C, q = rank B; 0 when r <= q."""
    return reml_apply(reml_form(C, B), Y)


def reml_form(C: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(P, r - q) of `reml_scale` for C and B, which depend on the straggler pattern only (None when r <= q):
    cached per pattern, the estimate for new results is one quadratic form (`reml_apply`)."""
    Ci = linalg.pinvh((C + C.T) / 2)
    r = int(np.linalg.matrix_rank(C, hermitian=True))
    q = int(np.linalg.matrix_rank(B)) if B.size else 0
    if r <= q:
        return None
    CB = Ci @ B
    return (Ci - CB @ linalg.pinvh(B.T @ CB) @ CB.T if q else Ci), r - q


def reml_apply(form: tuple[np.ndarray, int] | None, Y: np.ndarray) -> float:
    """`reml_scale` from its pattern's `reml_form`: tr(Y^T P Y) / ((r - q) m), 0 when form is None."""
    if form is None:
        return 0.0
    P, dof = form
    return float(max(np.einsum("nm,nk,mk->", P, Y, Y), 0.0) / (dof * Y.shape[1]))


def calibrate_rho(code: SystematicGCC, f: Callable, X_sets: Sequence[Any], batched: bool | None = None) -> float:
    """The residual-to-signal variance ratio rho of `code`'s coded results, measured on input sets.

    For each set X (K inputs, in coding order; use training inputs, not the ones you will score on): c = f(X)
    and the coded workers' results y; the residuals r = y_coded - E_coded c, and the GP signal variance
    sigma^2 = c^T P c / ((K - q) m), P the prior precision with the trend projected out (the REML estimate).
    Returns mean(r^2) / mean(sigma^2) over the sets: the moment estimate of the model's rho.
    """
    if code.N == code.K:
        return DEFAULT_RHO
    Xs = [np.asarray(to_numpy(X)) for X in X_sets]
    if not Xs:
        raise ValueError("calibrate_rho needs at least one input set")
    B, M = len(Xs), code.coded.size
    # one call of each worker function over all sets: a torch model is far faster on one large batch
    c = apply_batch(f, np.concatenate(Xs), batched).reshape(B, code.K, -1)
    Z = np.stack([take_rows(code.encode(X), code.coded) for X in Xs])
    y = np.empty((B, M, c.shape[2]))
    fns = [code.worker_function(f, int(n)) for n in code.coded]
    for fn in {id(g): g for g in fns}.values():
        js = [j for j, g in enumerate(fns) if g is fn]
        y[:, js] = apply_batch(fn, Z[:, js].reshape(B * len(js), *Z.shape[2:]), batched).reshape(B, len(js), -1)
    Kc = code.kernel(code.alpha, code.alpha)
    T = code.kernel.null_space(code.alpha)
    if T.shape[1]:
        Q = linalg.qr(T)[0][:, T.shape[1]:]
        P = Q @ linalg.inv(Q.T @ Kc @ Q) @ Q.T
    else:
        P = linalg.inv(Kc)
    E = code.encoding_matrix[code.coded]
    res = [np.mean((y[b] - E @ c[b]) ** 2) for b in range(B)]
    sig = [np.trace(c[b].T @ P @ c[b]) / ((code.K - T.shape[1]) * c.shape[2]) for b in range(B)]
    return float(np.mean(res) / np.mean(sig))


def reml(kernel: Kernel, alpha: np.ndarray, C: np.ndarray) -> float:
    """Restricted log-likelihood (up to a constant) of value sets C (B, K, m) at points alpha under a GP with
    `kernel`, its null space as an unknown mean and the signal variance profiled out; columns independent."""
    C = np.asarray(C, dtype=float)
    B, K, m = C.shape
    T = kernel.null_space(alpha)
    q = T.shape[1]
    Q = linalg.qr(T)[0][:, q:] if q else np.eye(K)
    G = Q.T @ kernel(alpha, alpha) @ Q
    Z = np.einsum("kj,bkm->bjm", Q, C)
    quad = float(np.einsum("bjm,jl,blm->", Z, linalg.inv(G), Z))
    n = (K - q) * m * B
    return -0.5 * n * np.log(quad / n) - 0.5 * m * B * float(np.linalg.slogdet(G)[1])
