"""GCC: the general coded computing scheme with RKHS (smoothing-spline) encoder and decoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._util.arrays import LinearMap, apply_matrix, is_torch, to_numpy
from .._util.lru import LRU
from .._util.validate import check_nonneg, check_real
from ..rkhs.kernels import KERNELS, CubicSpline, Kernel, Matern32, get_kernel
from ..rkhs.points import DESIGNS, NESTED, design, nested
from ..rkhs.smoother_loo import (
    adjacent_pair_residuals,
    downdate_residuals,
    downdate_weights,
    energy_drop,
    loo_and_weights,
    pair_residuals,
)
from ..rkhs.smoothing import LamSpec, select_lam, smoother_weights
from . import gcc_low_redundancy as low_redundancy
from . import robust, robust_search
from .base import NONFINITE_Y, Code, _indices_key, _unsort
from .capabilities import UNCERTAIN, Capabilities
from .gaps import (
    AUTO_COMPARE_POINTS,
    AUTO_EDGE_RATIO,
    AUTO_MIN_K,
    MIN_POINTS,
    auto_min_points,
    bridge_gaps,
    carriers,
    shrink_erased_ends,
)
from .private import DEFAULT_MASK_SCALE, PrivateMixin, worker_points
from .systematic import UNCERTAINTY_CACHE_SIZE, _error_sd, decoder_error_var, reml_apply, reml_form

#: with kernel="auto", fits through more points than this use the O(n) cubic spline (both kernels decode equally
#: well above it: tests/codes/test_gcc.py). Not lowered to remove the cold decode's cliff: measured at 256, the
#: worst-case errors of rate-worst's digits CNN at N = 320..640 rose by 12-35% (the Matern fit decodes them
#: better); the Matern fit's exact state-space band path (`gencc.rkhs.matern_ssm`, from
#: `smoothing.MATERN_BANDED_THRESHOLD` points) removed the cliff instead
AUTO_DENSE_MAX = 512
#: kernel="auto": the Matern 3/2 length scale (on [-1, 1]) wherever the rule below does not lengthen it
AUTO_LENGTH_SCALE = 0.3
#: kernel="auto" at few inputs on dense workers (N >= AUTO_SPARSE_RATIO K): length scale AUTO_SPACING / K when
#: that is longer, about one spacing of the Chebyshev data points at the centre (pi / K), so u_enc does not sag
#: towards its trend between data points further apart than the length scale (docs/design.md section 3)
AUTO_SPACING = 2.4
AUTO_SPARSE_RATIO = 4
#: kernel="auto" with colluders: the length scale of a private GCC. Measured on the digits and mnist1d CNNs at
#: K = 8, N = 24, T = 1 and 2 (the `privacy` preset): against BACC with masks at equal leakage, 0.15 and 0.2 gave
#: GCC a RelAcc at or above BACC's along most of the curve where 0.3 (the plain default) fell below it at T = 1; a
#: more local fit lets each mask weigh on the workers near it
AUTO_PRIVATE_LENGTH_SCALE = 0.15
#: decoder="auto" uses the low-redundancy decoder ("select") for K < N <= 1.5 K up to this many workers
AUTO_SELECT_MAX = 64
DECODERS = ("auto", "interpolate", "select")
#: how the decoder reads a data point in a large gap of missing workers (`gencc.codes.gaps`)
GAPS = ("auto", "fit", "bridge")
#: LOO factorizations (G, and the decoding weights) kept per code for robust decoding, one per returned set
LOO_CACHE_SIZE = 64
#: the closed-form LOO of robust decoding needs the inverse of the bordered system: limited to this many results
MAX_POINTS = 3000


class GCC(PrivateMixin, Code):
    """Encoder: u_enc fitted to (alpha_k, x_k), coded inputs u_enc(beta_n). Decoder: u_dec fitted to the
    returned (beta_n, y_n), estimates u_dec(alpha_k). Both are penalised least squares in the RKHS of
    `kernel` (default "auto": the Matern 3/2 kernel with a linear trend, and the cubic smoothing spline of LeTCC
    for fits through more than AUTO_DENSE_MAX points; see Defaults below).

    lam_enc, lam_dec: penalty weights (0 interpolates); lam_dec may be "gcv" or "loo" to choose it per
    straggler pattern from the returned results (pooled over output columns).

    length_scale: the auto kernel's length scale on [-1, 1] ("auto": `auto_length_scale`, below; a private GCC
    AUTO_PRIVATE_LENGTH_SCALE, 0.15).

    Defaults (chosen by measurement, see the README): kernel "auto" is the Matern 3/2 kernel with length
    scale 0.3 (2.4 / K when that is longer and N >= 4 K: `auto_length_scale`) and an unpenalised linear trend
    (its RKHS is W^{2,2}, the space of LeTCC, with a tension-like norm) for fits through at most AUTO_DENSE_MAX
    points (its O(n) state-space path from smoothing.MATERN_BANDED_THRESHOLD points on), and the cubic smoothing
    spline on its O(n) banded path above that.

    colluders=T (with mask_scale > 0) makes it private (`gencc.codes.private`): u_enc is fitted through the K
    inputs and T Gaussian masks at interleaved Chebyshev points of the first kind, fresh masks every call; the
    workers sit on the plain (not nested) beta design, off every one of those points, and the decoder reads
    u_dec at the data points only.
    alpha at Chebyshev points of the first kind, beta at Chebyshev points of the second kind with the
    nearest worker moved onto each alpha, lam = 0 (results are noiseless).

    decoder: "interpolate" (the fit above) or "select" (low redundancy: per decode, the best of three fixed
    readings of the results by leave-one-out on the returned systematic results, `gencc.codes.gcc_low_redundancy`;
    needs lam_dec = 0 and a worker on every alpha, i.e. a nested beta and lam_enc = 0). "auto" (default) is
    "select" when K < N <= 1.5 K (and N <= AUTO_SELECT_MAX) with those settings, else "interpolate".

    gaps: how the decoder reads a data point in a large gap of returned workers (`gencc.codes.gaps`). "bridge"
    reads the data points of a gap that holds at least `gaps.MIN_POINTS` (2) of them, between two returned
    workers or beyond the outermost one, by a bounded linear reading (the mean of Berrut's rational interpolant and
    the straight line across the gap, around the results' least-squares trend in the kernel's null space, so
    affine data stay exact) instead of the fit, which extrapolates its trend there and blew up the worst case at
    high straggler fractions. "auto" (default), for K >= 16, bridges a gap between two returned workers from 3 data
    points and one beyond the outermost from 2 when N <= 4 K (from 3 otherwise), and (decoder "interpolate") in
    a gap of 2 below those takes, row by row, the fit's or the bridged row, whichever has the smaller L1 norm (its
    Lebesgue function); below K = 16 nothing: the fit stays where it measured better (small gaps, dense workers,
    few inputs). From K = 16 at N <= 4 K ("auto") and with "bridge", a data point erased at an end (no returned
    result carries it) is read half-way to the mean of the other data points' readings (`gaps.shrink_erased_ends`).
    "fit" keeps the fit's rows everywhere.
    """

    name = "gcc"
    robust_methods = ("loo",)

    def __init__(
        self,
        K: int,
        N: int,
        *,
        kernel: str | Kernel = "auto",
        length_scale: float | str = "auto",
        lam_enc: float = 0.0,
        lam_dec: LamSpec = 0.0,
        alpha: str | np.ndarray = "chebyshev1",
        beta: str | np.ndarray = "chebyshev2-nested",
        decoder: str = "auto",
        gaps: str = "auto",
        colluders: int = 0,
        mask_scale: float = DEFAULT_MASK_SCALE,
        seed: int | None = None,
    ):
        super().__init__(K, N)
        self._init_private(colluders, mask_scale, seed)
        if isinstance(kernel, str) and kernel != "auto" and kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; choose auto (the default), {', '.join(KERNELS)} or pass "
                             "a gencc.kernels.Kernel")
        for label, spec, names in (("alpha", alpha, DESIGNS), ("beta", beta, (*NESTED, *DESIGNS))):
            if isinstance(spec, str) and spec not in names:
                default = "chebyshev1" if label == "alpha" else "chebyshev2-nested"
                raise ValueError(f"unknown point design {spec!r} for {label}; choose one of {', '.join(names)} "
                                 f"(default {default}) or pass points")
        self.auto_kernel = isinstance(kernel, str) and kernel == "auto"
        if not (isinstance(length_scale, str) and length_scale == "auto"):
            length_scale = check_real("length_scale", length_scale, 0.0, lo_open=True,
                                      what="a positive number or 'auto'")
            if not self.auto_kernel:
                raise ValueError(f"length_scale={length_scale!r} sets the auto kernel's length scale: with kernel "
                                 f"{kernel!r} pass a gencc.kernels.Kernel built with its own (e.g. Matern32(0.6))")
        if isinstance(length_scale, str):
            ell = AUTO_PRIVATE_LENGTH_SCALE if self.colluders else auto_length_scale(K, N)
        else:
            ell = float(length_scale)
        self.kernel = Matern32(ell, null_degree=1) if self.auto_kernel else get_kernel(kernel)
        self.lam_enc = check_nonneg("lam_enc", lam_enc)
        if not (isinstance(lam_dec, str) and lam_dec in ("gcv", "loo")):
            lam_dec = check_real("lam_dec", lam_dec, 0.0, what="a finite non-negative number, 'gcv' or 'loo'")
        self.lam_dec = lam_dec
        if not isinstance(gaps, str) or gaps not in GAPS:
            raise ValueError(f"unknown gaps {gaps!r}; choose auto (the default: a bounded reading of large gaps), "
                             "bridge (of every gap holding 2 or more data points) or fit (the fit's rows everywhere)")
        self.gaps = gaps
        #: (interior, edge) data points from which a gap is bridged; None: never (gaps="fit")
        self.gap_min_points = {"fit": None, "bridge": (MIN_POINTS, MIN_POINTS), "auto": auto_min_points(K, N)}[gaps]
        if self.colluders:  # data and mask points interleaved, no worker on either (gencc.codes.private)
            if not (isinstance(alpha, str) and alpha == "chebyshev1"):
                raise ValueError("a private GCC places its data and mask points itself: leave alpha at its default")
            self.alpha = self.private_alpha
            if isinstance(beta, str):
                base = beta.removesuffix("-nested")  # a private code nests no worker on a data point
                self.beta = worker_points(np.concatenate([self.alpha, self.mask_points]), N,
                                          (base, *[d for d in DESIGNS if d != base]))
            else:
                self.beta = _points(beta, N, "beta")
        elif isinstance(beta, str) and beta in NESTED:
            self.alpha = _points(alpha, K, "alpha")
            self.beta = nested(design(beta.removesuffix("-nested"), N), self.alpha)
        else:
            self.alpha = _points(alpha, K, "alpha")
            self.beta = _points(beta, N, "beta")
        self.alpha_design = alpha if isinstance(alpha, str) else "custom"
        self.beta_design = beta if isinstance(beta, str) else "custom"
        if self.colluders and isinstance(beta, str):  # the design worker_points chose
            self.beta_design = next((d for d in DESIGNS if np.array_equal(self.beta, design(d, N))), "custom")
        if K < self.kernel.q:
            raise ValueError(f"kernel {self.kernel.name} has a null space of dimension {self.kernel.q}; "
                             f"need K >= {self.kernel.q}, got K={K}")
        self.decoder = self._resolve_decoder(decoder)
        self._pattern_hot = self.decoder == "select"  # `_hot_decode` knows the patterns it decoded before
        #: a gap holding this many data points, below gap_min_points, is bridged row by row where the bridged
        #: row's L1 norm is the smaller (gaps="auto" from K = AUTO_MIN_K with the interpolating decoder: at low
        #: redundancy the select decoder's LOO pick already reads such gaps, and the rule there lowered the random
        #: case's RelAcc at K = 16, N = 24; None: never)
        self.gap_compare_points = (AUTO_COMPARE_POINTS if gaps == "auto" and self.gap_min_points
                                   and self.decoder == "interpolate" else None)
        #: the data points erased at an end are read half-way to the others' mean (`gaps.shrink_erased_ends`):
        #: gaps="bridge", and "auto" where it bridges (K >= AUTO_MIN_K) at N <= AUTO_EDGE_RATIO K (denser returned
        #: workers, and f o u_enc through fewer inputs, extrapolate well)
        self.shrink_ends = gaps == "bridge" or (gaps == "auto" and K >= AUTO_MIN_K and N <= AUTO_EDGE_RATIO * K)
        self._robust_cache: LRU[tuple, tuple[np.ndarray, np.ndarray | None]] = LRU(LOO_CACHE_SIZE)
        self._uncertainty_cache: LRU[tuple, Any] = LRU(UNCERTAINTY_CACHE_SIZE)  # the gate's, per pattern and lam
        self._check_private()

    def _resolve_decoder(self, decoder: str) -> str:
        if not isinstance(decoder, str) or decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder!r}; choose auto (the default), interpolate or select")
        self.systematic = low_redundancy.systematic_workers(self.alpha, self.beta) if self.lam_enc == 0 else None
        interpolating = not isinstance(self.lam_dec, str) and self.lam_dec == 0
        if decoder == "auto":
            low = self.K < self.N <= low_redundancy.LOW_REDUNDANCY * self.K and self.N <= AUTO_SELECT_MAX
            return "select" if low and interpolating and self.systematic is not None else "interpolate"
        if decoder == "select":
            if not interpolating:
                raise ValueError(f"decoder='select' chooses among interpolating decoders: lam_dec must be 0, got "
                                 f"{self.lam_dec!r}")
            if self.systematic is None:
                raise ValueError("decoder='select' needs a systematic worker on every alpha: a nested beta "
                                 "('chebyshev2-nested' or 'equispaced-nested', or points containing alpha) and "
                                 "lam_enc = 0")
            if self.N > AUTO_DENSE_MAX:
                raise ValueError(f"decoder='select' is for low redundancy and small N (dense fits); N={self.N} > "
                                 f"{AUTO_DENSE_MAX}: use decoder='interpolate'")
        return decoder

    @property
    def min_results(self) -> int:
        return max(self.kernel.q, 1)

    @property
    def capabilities(self) -> Capabilities:
        """An uncertainty estimate (`decode_uncertainty`, the GP reading of the fit); private against `colluders`
        workers when masked (`gencc.codes.private`)."""
        return self._private_capabilities(UNCERTAIN)

    @property
    def data_dependent(self) -> bool:
        return isinstance(self.lam_dec, str) or self.decoder == "select"

    @property
    def coverage(self) -> np.ndarray:
        """Per data point (in the order of the inputs), how many workers sit strictly between its two neighbouring
        data points (beyond the outermost one on an end): the workers whose coded inputs carry it.

        u_enc is local, so when all of them straggle the data point is erased: its output can be read only from
        its neighbours' outputs, whatever the decoder. `coverage.min()` adjacent stragglers can erase one. The
        default design gives every data point three (its own, one in each neighbouring gap, the ends beyond the
        outermost) from N = 2 K + 1 on; at N = 2 K its centre gap is empty, so two data points keep only two and
        two adjacent stragglers erase one (docs/design.md section 3)."""
        return carriers(self.beta, self.alpha)

    def kernel_for(self, n: int) -> Kernel:
        """The kernel used for a fit through n points."""
        if self.auto_kernel and n > AUTO_DENSE_MAX:
            return CubicSpline()
        return self.kernel

    def _interpolation_matrix(self, nodes: np.ndarray) -> np.ndarray:
        """The encoder's fit through `nodes` (the data points; with masks, those and the mask points) evaluated
        at the workers' points, (N, len(nodes))."""
        return smoother_weights(nodes, self.beta, self.kernel_for(nodes.size), self.lam_enc)

    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        return self._fit_decoder(returned, Y)[0]

    def _fit_decoder(self, returned: np.ndarray, Y: np.ndarray | None) -> tuple[np.ndarray, float]:
        """(D for sorted `returned`, the lam it was fitted with)."""
        t = self.beta[returned]
        if self.decoder == "select":
            if Y is None:
                raise ValueError("GCC's low-redundancy decoder (decoder='select', the default for K < N <= 1.5 K) "
                                 "picks its reading from the results: pass Y to decoding_matrix, or build the code "
                                 "with decoder='interpolate' for a fixed D_F")
            Ds, Ls = self._selection(returned)
            return Ds[low_redundancy.choose(Ds, Ls, Y)], 0.0
        lam = self.lam_dec
        if isinstance(lam, str):
            if Y is None:
                raise ValueError(f"lam_dec={lam!r} chooses lam from the results: pass Y to decoding_matrix")
            lam = select_lam(t, Y, self.kernel_for(t.size), lam)
        return self._bridged(smoother_weights(t, self.alpha, self.kernel_for(t.size), lam), returned), float(lam)

    def _bridged(self, D: np.ndarray, returned: np.ndarray) -> np.ndarray:
        """D for sorted `returned` with its rows in large gaps read by `gaps.bridge_gaps` (gaps="auto" from
        K = 16, "bridge") and the rows of data points erased at an end moved half-way to the mean of the others
        (`gaps.shrink_erased_ends`; `shrink_ends`). gaps="fit": D as it is."""
        if self.gap_min_points is None and not self.shrink_ends:
            return D
        t = self.beta[returned]
        null_space = self.kernel_for(t.size).null_space
        if self.gap_min_points is not None:
            D = bridge_gaps(D, t, self.alpha, self.gap_min_points, null_space=null_space,
                            compare_points=self.gap_compare_points)
        return shrink_erased_ends(D, t, self.alpha, null_space=null_space) if self.shrink_ends else D

    def _decode_adaptive(self, Y: Any, returned: Any) -> Any:
        if self.decoder == "select" and type(Y) is np.ndarray and Y.dtype.kind == "f" and Y.ndim >= 1:
            key = _indices_key(returned)
            if key is not None:
                return self._select_decode(Y, returned, key)
        return super()._decode_adaptive(Y, returned)

    def _select_decode(self, Y: np.ndarray, returned: Any, key: bytes | tuple) -> np.ndarray:
        """The select decoder on numpy results, from a per-pattern entry in the caller's order of `returned`: the
        candidates' LOO maps stacked (one product scores them all) and each candidate's D_F as a LinearMap (its
        product proves Y finite). Equal to choosing on sorted results: the sums are the same up to rounding, and
        near-ties go to the first candidate (`gcc_low_redundancy.pick`) whatever the order."""
        try:
            entry = self._cache.get(("select-order", key))
        except TypeError:  # unhashable items in a list: the general path validates them
            return super()._decode_adaptive(Y, returned)
        if entry is None:
            _, order, srt = self._validated(returned)
            Ds, Ls = self._selection(srt)
            if order is not None:
                Ds, Ls = [_unsort(D, order) for D in Ds], [_unsort(L, order) for L in Ls]
            starts = np.cumsum([0] + [L.shape[0] for L in Ls[:-1]]) if Ls else None
            maps = [LinearMap(D) for D in Ds]
            entry = (np.vstack(Ls) if Ls else None, starts, maps, [m.product(_F64, "Y", NONFINITE_Y) for m in maps])
            self._cache.put(("select-order", key), entry)
        return entry[2][_select_index(entry, Y)].apply(Y, "Y", NONFINITE_Y, check_result=True)

    def _hot_decode(self, Y: np.ndarray, key: bytes) -> np.ndarray | None:
        """The select decoder's path for a pattern decoded before (`Code._hot_decode`): its entry's pick and the
        picked candidate's float64 product, nothing else."""
        entry = self._cache.get(("select-order", key)) if self.decoder == "select" else None
        return None if entry is None else entry[3][_select_index(entry, Y)](Y)

    def _selection(self, returned: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The select decoder's candidates and LOO maps for sorted `returned`, kept in the code's decoder cache
        (least recently used dropped first; a pickled copy starts empty, as for D_F)."""
        def build() -> tuple[list[np.ndarray], list[np.ndarray]]:
            Ds, Ls = low_redundancy.selection_matrices(self.beta[returned], self.alpha, self.kernel,
                                                       self.encoding_matrix, returned, self.systematic)
            return [self._bridged(D, returned) for D in Ds], Ls
        return self._cache.get_or_build(("select", *returned.tolist()), build)

    def decoding_matrix_and_lam(self, returned: Sequence[int], Y: Any = None) -> tuple[np.ndarray, float]:
        """D_F as `decoding_matrix` gives it, and the lam_dec it was fitted with: lam_dec itself, or the lam
        that GCV / LOO chose for these results (`Y` then required). Safe to call from several threads."""
        if not self.data_dependent:
            return self.decoding_matrix(returned), float(self.lam_dec)
        order, srt, Ys = self._sorted(returned, Y)
        D, lam = self._fit_decoder(srt, Ys)
        return _unsort(np.asarray(D, dtype=float), order), lam

    # ----- robust decoding (gencc.codes.robust): LOO residuals of the smoother and their downdates -----
    def _locate_wrong(self, returned: np.ndarray, Y: np.ndarray, adversaries: int, *, method: str = "loo",
                      threshold: float = robust.DEFAULT_THRESHOLD, weights: np.ndarray | None = None) -> np.ndarray:
        """LOO residuals of any RKHS smoother (any lam) are (G y)_i / G_ii with G the leading block of the
        inverse bordered system; leaving a set S out is a rank-|S| downdate of G (a Schur complement), so every
        candidate subset of the search costs O(n |S| m), evaluated in batches (gencc.rkhs.smoother_loo)."""
        t, G, P = self._loo_state(returned, Y, adversaries)
        scale = robust_search.robust_spread(Y) * (1.0 if weights is None else weights)
        pos, _ = robust_search.search(downdate_residuals(G, P), t.size, adversaries, scale, threshold,
                               energy_drop(G, P), True, pairs=pair_residuals(G, P),
                               adjacent=adjacent_pair_residuals(G, P))
        return returned[pos]

    def _clean_threshold(self, returned: np.ndarray, Y: np.ndarray, adversaries: int,
                         weights: np.ndarray | None = None) -> float:
        """The least threshold at which `_locate_wrong` flags nobody in these results (robust.calibrate)."""
        _, G, P = self._loo_state(returned, Y, adversaries)
        scale = robust_search.robust_spread(Y) * (1.0 if weights is None else weights)
        return robust_search.clean_threshold(downdate_residuals(G, P), adversaries, scale,
                                             adjacent_pair_residuals(G, P))

    def _honest_scores(self, returned: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Each worker's LOO score (rms residual over the results' robust spread), unweighted (robust.calibrate)."""
        _, G, P = self._loo_state(returned, Y, 0)
        return np.sqrt(np.mean((P / np.diag(G)[:, None]) ** 2, axis=1)) / robust_search.robust_spread(Y)

    def _loo_state(self, returned: np.ndarray, Y: np.ndarray, adversaries: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the returned workers' points, G, G Y) of the LOO search, for sorted validated `returned`."""
        robust.require_results(self, returned.size, adversaries)
        t = self.beta[returned]
        G, _ = self._loo_factors(returned, self._robust_lam(t, Y))
        return t, G, G @ Y

    def _decode_excluding(self, Y: Any, returned: np.ndarray, excluded: np.ndarray) -> Any:
        """With lam = 0 the decoding weights come from the search's factorization, and the decode without S
        from a rank-|S| downdate of them; otherwise (or when S changes the kernel) `decode` of the rest."""
        srt = np.sort(returned)
        t = self.beta[srt]
        if t.size > MAX_POINTS or self.kernel_for(t.size - excluded.size) != self.kernel_for(t.size):
            return super()._decode_excluding(Y, returned, excluded)
        G, Wt = self._loo_factors(srt, float(self.lam_dec) if not isinstance(self.lam_dec, str) else None)
        if Wt is None:
            return super()._decode_excluding(Y, returned, excluded)
        keep = ~np.isin(returned, excluded)
        W = downdate_weights(G, Wt, np.flatnonzero(np.isin(srt, excluded)))  # rows: the kept, sorted
        ret_keep = returned[keep]
        D = self._bridged(W.T, srt[~np.isin(srt, excluded)])
        D = D[:, np.argsort(np.argsort(ret_keep, kind="stable"), kind="stable")]
        Ykeep = Y[np.flatnonzero(keep)] if is_torch(Y) else np.asarray(Y)[keep]
        return apply_matrix(D, Ykeep, "Y")

    def _robust_lam(self, t: np.ndarray, Y: np.ndarray) -> float:
        if t.size > MAX_POINTS:
            raise ValueError(f"robust decode for GCC is limited to {MAX_POINTS} results (got {t.size})")
        lam = self.lam_dec
        return float(select_lam(t, Y, self.kernel_for(t.size), lam) if isinstance(lam, str) else lam)

    def _loo_factors(self, srt: np.ndarray, lam: float | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(G, the decoding weights as (n, K) or None) for sorted `srt`, kept per code like D_F (the same
        straggler pattern recurs). The weights come only when GCC's own decoder is the dense interpolant
        (lam = 0) through the same bordered system (lam > 0 scales with the number of points; the cubic
        spline decodes on its banded path). lam None (chosen per decode): (None, None)."""
        if lam is None:
            return None, None
        t = self.beta[srt]
        kernel = self.kernel_for(t.size)
        shares = (lam == 0 and type(self)._decoding_matrix is GCC._decoding_matrix and not self.data_dependent
                  and not kernel.is_cubic_spline)
        return self._robust_cache.get_or_build((lam, *srt.tolist()), lambda: loo_and_weights(
            t, kernel, lam, self.alpha if shares else None))

    # ----- the decoder's own uncertainty (serving's gate, gencc.serving._policy.gate) ----------------------
    def posterior_var(self, returned: Sequence[int], Y: Any = None) -> np.ndarray:
        """Per input k, the variance of the decode's error at alpha_k under the GP reading of the RKHS fit (the
        kernel as covariance, its null space as a flat-prior trend, n lam as the results' noise), in units of the
        kernel's signal variance: for the interpolating decoder the kriging variance (0 where a worker sits on
        alpha_k); for other decoders the same model's error variance of their weights. `Y` only for decoders
        that adapt to the results."""
        idx = self.check_returned(returned)
        return self._posterior_var(idx, *self.decoding_matrix_and_lam(idx, Y))

    def _gp_cov(self, idx: np.ndarray, lam: float) -> tuple[np.ndarray, Kernel, np.ndarray]:
        """(t, kernel, C) of the GP reading for returned `idx`: their points, the kernel the fit uses, and the
        results' covariance k(t, t) + n lam I."""
        t = self.beta[idx]
        kern = self.kernel_for(t.size)
        return t, kern, kern(t, t) + t.size * lam * np.eye(t.size)

    def _posterior_var(self, idx: np.ndarray, D: np.ndarray, lam: float) -> np.ndarray:
        """posterior_var for validated `idx` decoded by D (fitted with lam), cached per (pattern, lam, D)."""
        key = ("posterior-var", lam, *idx.tolist())
        hit = self._uncertainty_cache.get(key)
        if hit is not None and np.array_equal(hit[0], D):  # a data-dependent decoder may pick another D
            return hit[1].copy()
        t, kern, C = self._gp_cov(idx, lam)
        var = decoder_error_var(D, kern(self.alpha, t), C, np.diag(kern(self.alpha, self.alpha)))
        self._uncertainty_cache.put(key, (np.array(D), var))
        return var.copy()

    def signal_var(self, Y: Any, returned: Sequence[int]) -> float:
        """The kernel's signal variance (per output coordinate) estimated from the results: the REML estimate
        under the same GP reading (0 when the results leave no degree of freedom beyond the trend)."""
        idx = self.check_returned(returned)
        Yn = np.asarray(to_numpy(Y), dtype=float).reshape(idx.size, -1)
        return self._signal_var(idx, Yn, self.decoding_matrix_and_lam(idx, Yn)[1])

    def _signal_var(self, idx: np.ndarray, Yn: np.ndarray, lam: float) -> float:
        """signal_var for validated `idx`, float64 results Yn and the decode's lam; its form cached per pattern."""
        def build() -> tuple[np.ndarray, int] | None:
            t, kern, C = self._gp_cov(idx, lam)
            return reml_form(C, kern.null_space(t))
        return reml_apply(self._uncertainty_cache.get_or_build(("reml-form", lam, *idx.tolist()), build), Yn)

    def decode_uncertainty(self, Y: Any, returned: Sequence[int]) -> np.ndarray:
        """Per input, the estimated standard deviation of each decoded output coordinate's error:
        sqrt(posterior_var * signal_var) (0 where a returned worker sits on the input's point; inf elsewhere when
        the results leave the signal variance unknown). The decoder is fitted once for both."""
        idx = self.check_returned(returned)
        Yn = np.asarray(to_numpy(Y), dtype=float).reshape(idx.size, -1)
        D, lam = self.decoding_matrix_and_lam(idx, Yn)
        return _error_sd(self._posterior_var(idx, D, lam), self._signal_var(idx, Yn, lam))

    def __repr__(self) -> str:
        kern = "'auto'" if self.auto_kernel else repr(self.kernel)
        if self.auto_kernel and self.kernel.length_scale != AUTO_LENGTH_SCALE:  # a sweep row's code names its encoder
            kern += f", length_scale={self.kernel.length_scale!r}"
        return (f"GCC(K={self.K}, N={self.N}, kernel={kern}, lam_enc={self.lam_enc}, "
                f"lam_dec={self.lam_dec!r}, alpha={self.alpha_design}, beta={self.beta_design}"
                + (f", gaps={self.gaps!r}" if self.gaps != "auto" else "")
                + self._private_repr()
                + (", decoder='select')" if self.decoder == "select" else ")"))


def auto_length_scale(K: int, N: int) -> float:
    """The auto kernel's length scale for K inputs on N workers: AUTO_LENGTH_SCALE, or AUTO_SPACING / K where that
    is longer and N >= AUTO_SPARSE_RATIO K (K <= 7). At N = 2 K the longer scale raised the worst case (docs/design.md
    section 3), so it stays for dense workers only."""
    if N >= AUTO_SPARSE_RATIO * K:
        return max(AUTO_LENGTH_SCALE, AUTO_SPACING / K)
    return AUTO_LENGTH_SCALE


def _points(spec: str | np.ndarray, n: int, label: str) -> np.ndarray:
    """A sorted point set in [-1, 1] from a design name or explicit points."""
    if isinstance(spec, str):
        return design(spec, n)
    pts = np.sort(np.asarray(spec, dtype=float).ravel())
    if pts.size != n:
        raise ValueError(f"{label} must hold {n} points, got {pts.size}")
    if not np.all(np.isfinite(pts)) or pts.min() < -1 or pts.max() > 1:
        raise ValueError(f"{label} points must be finite and lie in [-1, 1]")
    if np.unique(pts).size != n:
        raise ValueError(f"{label} points must be distinct")
    return pts


_F64 = np.dtype(np.float64)


def _select_index(entry: tuple, Y: np.ndarray) -> int:
    """The select decoder's pick for results Y (numpy, float) from a pattern's entry (stacked LOO maps, their
    segments' starts, the candidates): the candidate with the least summed squared LOO error (0 without LOO)."""
    L, starts = entry[0], entry[1]
    if L is None:
        return 0
    flat = Y.reshape(Y.shape[0], -1)
    R = L @ flat
    return low_redundancy.pick(np.add.reduceat(np.einsum("ij,ij->i", R, R), starts), low_redundancy.energy(flat))
