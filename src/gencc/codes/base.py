"""The Code interface: a fixed linear encoder E (N x K) and a decoder D_F (K x |F|) per straggler set F."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._util.arrays import LinearMap, apply_matrix, is_torch, take_rows, to_numpy
from .._util.lru import LRU
from .._util.validate import check_int
from . import robust
from .capabilities import PLAIN, Capabilities
from .selection_map import SelectionMap, decoder_map

#: decoding matrices kept per code (least recently used are dropped first)
DECODER_CACHE_SIZE = 256
_I64, _F64, _F32, _ND = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.float32), np.ndarray
#: decode's message for non-finite results
NONFINITE_Y = ("Y contains non-finite values (NaN or inf): treat those workers as stragglers and leave them out of "
               "`returned`")


class Code(ABC):
    """A linear coded-computing scheme for K inputs on N workers.

    Subclasses set `alpha` (K sorted data points), `beta` (N sorted worker points), implement
    `_encoding_matrix()` and `_decoding_matrix(returned_sorted, Y_sorted)`, and state `min_results`. A code
    that can locate wrong results lists its `robust_methods` and implements `_locate_wrong` (and may override
    `_decode_excluding` and `_robust_min_results`): the hooks `robust_decode` calls (gencc.codes.robust). A code
    declares what else it can do in `capabilities` (gencc.codes.capabilities); `gencc.testing.check_code` runs
    a code through this contract.
    A code may be shared between threads (`gencc.stream` does): its caches are locked LRUs, and nothing a
    decode chooses is kept on the instance.
    """

    name: str = "code"
    #: robust_decode's `method` values `_locate_wrong` accepts (the first is the default); none: no locator
    robust_methods: tuple[str, ...] = ()
    #: the last decode's indices given as a list (a copy), its D_F and float64 product, as `_last` for arrays
    _last_list: tuple[list | None, Any, Any] = (None, None, None)

    def __init__(self, K: int, N: int):
        K, N = check_int("K", K, 1), check_int("N", N, 1)
        if N < K:
            raise ValueError(f"need at least as many workers as inputs: N={N} < K={K}; raise N or split the "
                             "inputs into batches of at most N")
        self.K, self.N = K, N
        self._E: np.ndarray | None = None
        self._E_map: LinearMap | None = None
        #: D_F as a LinearMap per `returned` (keyed by its indices, caller's order), and subclasses' entries
        self._cache: LRU[Any, Any] = LRU(DECODER_CACHE_SIZE)
        #: the last (key, D_F, its float64 product, its float32 product or None) decode used, compared before the
        #: cache's lookup (a job decodes one pattern often)
        self._last: tuple[bytes | None, Any, Any, Any] = (None, None, None, None)
        self.alpha: np.ndarray
        self.beta: np.ndarray

    # ----- what subclasses provide -------------------------------------------------------------------
    @property
    @abstractmethod
    def min_results(self) -> int:
        """The fewest returned results this code can decode from."""

    @abstractmethod
    def _encoding_matrix(self) -> np.ndarray: ...

    @abstractmethod
    def _decoding_matrix(self, returned: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        """D for sorted, validated `returned`; `Y` (sorted the same way, flattened) only if data-dependent."""

    # ----- the public interface ----------------------------------------------------------------------
    @property
    def encoding_matrix(self) -> np.ndarray:
        """E of shape (N, K): coded input n is sum_k E[n, k] x_k."""
        if self._E is None:
            E = np.asarray(self._encoding_matrix(), dtype=float)
            E.setflags(write=False)
            self._E = E
        return self._E

    def encode(self, X: Any) -> Any:
        """Coded inputs E X: X of shape (K, *in_shape) gives (N, *in_shape), same array kind.

        A code whose coded workers run a packed parity model (`packed_groups`) gives a list of N arrays
        instead: such a worker's input is its group's inputs stacked, (k, *in_shape); its result still
        estimates sum_k E[n, k] f(x_k), so E stays the decoder's model. `gencc.take_rows` stacks rows.
        """
        shape = tuple(X.shape) if hasattr(X, "shape") else np.shape(X)
        if len(shape) == 0 or shape[0] != self.K:
            raise ValueError(f"encode expects X with first dimension K={self.K} (one row per input), "
                             f"got shape {shape}")
        enc = self._E_map
        if enc is None:
            enc = self._E_map = LinearMap(self.encoding_matrix)
        Z = enc.apply(X, "X", check_result=True)  # the product proves X finite (LinearMap.apply)
        packs = self.packed_groups()
        if not packs:
            return Z
        Xs = X.to(Z.dtype) if is_torch(X) else np.asarray(X, dtype=Z.dtype)  # as finite-checked, in Z's dtype
        return [take_rows(Xs, packs[n]) if n in packs else Z[n] for n in range(self.N)]

    def packed_groups(self) -> dict[int, np.ndarray]:
        """{worker: the inputs it receives stacked} for workers that run a packed parity model; none by default."""
        return {}

    def decoding_matrix(self, returned: Sequence[int], Y: Any = None) -> np.ndarray:
        """D_F of shape (K, len(returned)), columns in the order of `returned`.

        `Y` is only needed by decoders that adapt to the data (lam chosen by cross-validation). The matrix is
        the caller's copy (the code keeps its own for `decode`).
        """
        if not self.data_dependent:
            dec = self._decoder(returned)
            return dec.dense() if isinstance(dec, SelectionMap) else np.array(dec.M)
        order, srt, Ys = self._sorted(returned, Y)
        return _unsort(np.asarray(self._decoding_matrix(srt, Ys), dtype=float), order)

    def _sorted(self, returned: Sequence[int], Y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(the order sorting `returned`, the validated sorted indices, Y flattened in that order or None)."""
        idx, order, srt = self._validated(returned)
        if order is None:
            order = np.arange(idx.size)
        Ys = None
        if Y is not None:
            Yn = to_numpy(Y)
            Ys = Yn.reshape(Yn.shape[0], -1)[order].astype(float)
        return order, srt, Ys

    def _decoder(self, returned: Any) -> LinearMap | SelectionMap:
        """D_F of a data-independent decoder as a LinearMap (or a SelectionMap, for a D_F whose rows mostly select
        one result each: `selection_map`), columns in the order of `returned`, from the code's
        LRU cache: a hit on the caller's own indices (a list's tuple, an integer array's bytes) skips validating
        and sorting them again (the miss did, and an equal key means equal indices); a miss validates, builds D
        for the sorted set (shared by every order of it) and keeps the caller's order beside it. The lock covers
        only the cache's bookkeeping; two threads missing on one key may both compute D (the same matrix)."""
        key = _indices_key(returned)
        if key is not None:
            try:
                hit = self._cache.get(key)
            except TypeError:  # a sequence holding unhashable items: validation below decides
                key, hit = None, None
            if hit is not None:
                return hit
        idx, order, srt = self._validated(returned)
        canon = srt.tobytes()
        if key is None and order is not None:
            key = idx.tobytes()
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        dec = self._cache.get_or_build(canon, lambda: decoder_map(self._decoding_matrix(srt, None)))
        if order is not None:
            dec = dec.reordered(order) if isinstance(dec, SelectionMap) else LinearMap(_unsort(dec.M, order))
        if key is not None and key != canon:
            self._cache.put(key, dec)
        return dec

    def decode(self, Y: Any, returned: Sequence[int]) -> Any:
        """Estimates (K, *out_shape) of f(x_1..x_K) from results Y (len(returned), *out_shape).

        Y[i] is the result of worker returned[i]; the order of `returned` does not matter.
        """
        last = self._last  # the hottest path: the pattern of the last decode, float64 results (n, m)
        if (type(returned) is _ND and type(Y) is _ND and Y.dtype is _F64 and Y.ndim == 2 and returned.dtype is _I64
                and len(Y) == returned.size):
            key = returned.tobytes()
            if last[0] == key:
                return last[2](Y)  # an equal key proves the indices valid; the product proves Y finite
            if self._pattern_hot:  # a data-dependent decoder's own path for a pattern it decoded before
                out = self._hot_decode(Y, key)
                if out is not None:
                    return out
        if type(returned) is list and type(Y) is _ND and Y.dtype is _F64 and Y.ndim == 2:
            last = self._last_list  # the same for indices in a list equal to the last pattern's
            if len(Y) == len(returned) and last[0] == returned:
                return last[2](Y)
        if type(returned) is np.ndarray and returned.dtype is _I64 and not self.data_dependent:  # the hot path
            shape = Y.shape if hasattr(Y, "shape") else np.shape(Y)
            if len(shape) == 0 or shape[0] != returned.size:
                _wrong_count(shape, returned.size)
            key, last = returned.tobytes(), self._last
            if last[0] != key:
                dec = self._cache.get(key) or self._decoder(returned)
                # one tuple: a thread reads either the old one or the new one
                last = self._last = (key, dec, dec.product(_F64, "Y", NONFINITE_Y), None)
            if type(Y) is _ND:  # float64 of another rank, float32: the pattern's products, Y flattened to (n, m)
                dt = Y.dtype
                fn = last[2] if dt is _F64 else last[3] if dt is _F32 else False
                if fn is None:
                    fn = last[1].product(_F32, "Y", NONFINITE_Y)
                    self._last = (key, last[1], last[2], fn)
                if fn is not False:
                    out = fn(Y.reshape(shape[0], math.prod(shape[1:])) if len(shape) != 2 else Y)
                    return out.reshape((out.shape[0], *shape[1:])) if len(shape) != 2 else out
            return last[1].apply(Y, "Y", NONFINITE_Y, check_result=True)
        if isinstance(returned, (list, tuple)):
            ret, n = returned, len(returned)
        else:
            ret = returned if type(returned) is np.ndarray else np.asarray(to_numpy(returned))
            n = ret.size
        shape = Y.shape if hasattr(Y, "shape") else np.shape(Y)
        if len(shape) == 0 or shape[0] != n:
            _wrong_count(shape, n)
        if self.data_dependent:
            return self._decode_adaptive(Y, ret)
        dec = self._decoder(ret)
        out = dec.apply(Y, "Y", NONFINITE_Y, check_result=True)
        if type(returned) is list:  # validated and decoded: a copy of the indices as the list pattern's key
            self._last_list = (list(returned), dec, dec.product(_F64, "Y", NONFINITE_Y))
        return out

    #: whether `_hot_decode` may know the pattern (a data-dependent decoder with per-pattern entries of its own)
    _pattern_hot = False

    def _hot_decode(self, Y: np.ndarray, key: bytes) -> np.ndarray | None:
        """A decode of float64 results (n, m) from the entry of the pattern whose int64 indices' bytes are `key`,
        when there is one (its key proves the indices valid); None otherwise (the general path then)."""
        return None

    def _decode_adaptive(self, Y: Any, returned: Any) -> Any:
        """`decode` for a data-dependent decoder (Y has one result per returned worker): D_F for these results,
        then its product. A subclass may take a faster way to the same result."""
        return apply_matrix(self.decoding_matrix(returned, Y), Y, "Y", nonfinite=NONFINITE_Y)

    def robust_decode(self, Y: Any, returned: Sequence[int], adversaries: int = 1, **options: Any
                      ) -> tuple[Any, np.ndarray]:
        """(Yhat, flagged): locate up to `adversaries` wrong results, exclude them, decode the rest.

        `flagged` holds the sorted worker indices excluded; Yhat equals `decode` without them. Options:
        `method` (one of `robust_methods`) and `threshold` (gencc.codes.robust). Implemented for GCC, BACC
        (also `method="approxifer"`, the baseline) and LCC.
        """
        return robust.robust_decode(self, Y, returned, adversaries, **options)

    # ----- the hooks of robust_decode (gencc.codes.robust) ----------------------------------------------
    def _locate_wrong(self, returned: np.ndarray, Y: np.ndarray, adversaries: int, *, method: str = "loo",
                      threshold: float = robust.DEFAULT_THRESHOLD, weights: np.ndarray | None = None) -> np.ndarray:
        """The workers (a subset of `returned`) whose results to exclude, at most `adversaries` of them.

        `returned`: validated worker indices sorted ascending; `Y`: their results, float64 (n, m) and finite;
        `method` one of `robust_methods`, `threshold` a positive number (robust_decode checked both);
        `weights` (from a `robust.Calibration`, per returned worker) divide each worker's score."""
        raise ValueError(f"robust_decode is implemented for GCC, BACC and LCC, not {self.name}: it has no "
                         "locator of wrong results")

    def _clean_threshold(self, returned: np.ndarray, Y: np.ndarray, adversaries: int,
                         weights: np.ndarray | None = None) -> float:
        """The least `threshold` at which `_locate_wrong` flags nobody in these results (sorted, validated, as
        for `_locate_wrong`; `weights`: per returned worker, dividing its score): what
        `gencc.codes.robust.calibrate` collects from honest runs. A code that calibrates also gives
        `_honest_scores(returned, Y)`, each worker's unweighted score, which sets the weights."""
        raise ValueError(f"{self.name} has no threshold to calibrate: its robust decode "
                         + ("is exact error correction" if self.robust_methods else "has no locator"))

    def _decode_excluding(self, Y: Any, returned: np.ndarray, excluded: np.ndarray) -> Any:
        """`decode` of the results Y of validated `returned` (any order) without the `excluded` workers."""
        keep = ~np.isin(returned, excluded)
        Ykeep = Y[np.flatnonzero(keep)] if is_torch(Y) else np.asarray(Y)[keep]
        return self.decode(Ykeep, returned[keep])

    def _robust_min_results(self, adversaries: int) -> int:
        """The fewest results a robust decode with this many adversaries accepts: the decode's own minimum
        plus 2A, and at least 2A + 2 (an excluded set must leave a majority able to outvote it)."""
        if adversaries == 0:
            return self.min_results
        return max(self.min_results + 2 * adversaries, 2 * adversaries + 2)

    @property
    def data_dependent(self) -> bool:
        """True when D_F depends on the results themselves (then decoding is not a fixed linear map)."""
        return False

    def worker_function(self, f: Callable | None, n: int) -> Callable | None:
        """The callable worker `n` applies to its coded input: `f` for every worker unless a code says otherwise
        (ParM's parity workers run its parity model)."""
        return f

    @property
    def uniform_workers(self) -> bool:
        """True when every worker runs the caller's f; codes that override `worker_function` say False."""
        return True

    @property
    def capabilities(self) -> Capabilities:
        """What this code can do (`gencc.codes.Capabilities`): callers read this instead of probing the code. The
        base declares the plain case; a code that leaves inputs missing, has coding groups, estimates its own
        uncertainty or overrides `can_decode` declares it here (`gencc.testing.check_code` verifies)."""
        return PLAIN

    def decode_uncertainty(self, Y: Any, returned: Sequence[int]) -> np.ndarray:
        """Per input, the estimated standard deviation of each decoded output coordinate's error: only codes whose
        `capabilities.uncertainty` is True give one."""
        raise NotImplementedError(f"{self.name} gives no estimate of its decode's uncertainty "
                                  "(capabilities.uncertainty is False)")

    def missing(self, returned: Sequence[int]) -> np.ndarray:
        """Inputs that get no estimate from these returned workers: none unless `capabilities.partial`."""
        return np.zeros(0, dtype=np.int64)

    def can_decode(self, returned: Sequence[int]) -> bool:
        """Whether these returned workers are enough to decode (a code overriding this declares
        `capabilities.count_rule` False)."""
        return len(set(int(i) for i in returned)) >= self.min_results

    def check_returned(self, returned: Sequence[int]) -> np.ndarray:
        """Validate worker indices: integers in [0, N), no duplicates, at least `min_results` of them."""
        return self._validated(returned)[0]

    def _validated(self, returned: Sequence[int]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(the validated indices as int64 in the caller's order, the order sorting them or None when they are
        sorted already, the sorted indices): `check_returned` with one sort for both uniqueness and order."""
        arr = np.asarray(to_numpy(returned) if is_torch(returned) else returned)
        if arr.ndim != 1:
            arr = arr.ravel()
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            if not np.all(np.mod(arr, 1) == 0):
                raise ValueError(f"returned must hold integer worker indices, got {arr.tolist()[:8]}")
            arr = arr.astype(np.int64)
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.N):
            bad = arr[(arr < 0) | (arr >= self.N)]
            raise ValueError(f"worker indices must lie in [0, N={self.N}); got out-of-range {bad.tolist()[:8]}")
        order, srt = None, arr
        if arr.size > 1 and not (arr[1:] > arr[:-1]).all():
            order = np.argsort(arr, kind="stable")
            srt = arr[order]
            same = srt[1:] == srt[:-1]
            if same.any():
                raise ValueError(f"returned lists worker(s) {np.unique(srt[1:][same]).tolist()[:8]} more than once")
        if arr.size < self.min_results:
            raise ValueError(f"too few results to decode: {self.name} needs at least {self.min_results} of "
                             f"N={self.N} workers, got {arr.size}; wait for more workers or use more workers")
        return arr, order, srt

    def __getstate__(self) -> dict:
        """The code's state without its caches (locked LRUs do not pickle); the copy starts them empty."""
        state = {k: v for k, v in self.__dict__.items() if not isinstance(v, LRU)}
        state["_E_map"] = None  # rebuilt on first use (it may hold torch copies of E)
        state["_last"] = (None, None, None, None)
        state.pop("_last_list", None)
        state["_lru_sizes"] = {k: v.maxsize for k, v in self.__dict__.items() if isinstance(v, LRU)}
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        sizes = state.pop("_lru_sizes", {})
        self.__dict__.update(state)
        for k, size in sizes.items():
            setattr(self, k, LRU(size))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.K}, N={self.N})"

    def decode_sum(self, Y: Any, returned: Sequence[int]) -> Any:
        """The sum over k of the decoded outputs, 1^T D_F Y_F, computed directly as one vector-matrix product
        (the weights 1^T D_F, then one product with Y): Y (len(returned), *out_shape) gives (*out_shape), numpy
        in numpy out, torch in torch out. Coded training uses it: the sum of the K partitions' gradients from
        the gradients on the returned coded shards. Equals `decode(Y, returned).sum(0)` up to rounding."""
        ret = np.asarray(to_numpy(returned)).ravel() if not isinstance(returned, (list, tuple)) else returned
        shape = tuple(Y.shape) if hasattr(Y, "shape") else np.shape(Y)
        if len(shape) == 0 or shape[0] != len(ret):
            raise ValueError(f"decode_sum expects one result per returned worker: Y has first dimension "
                             f"{shape[0] if shape else 'none'} but {len(ret)} workers returned")
        D = self.decoding_matrix(ret, Y if self.data_dependent else None)
        w = D.sum(axis=0, keepdims=True)  # 1^T D_F, shape (1, |F|)
        out = apply_matrix(w, Y, "Y", nonfinite="Y contains non-finite values (NaN or inf): treat those "
                           "workers as stragglers and leave them out of `returned`")
        return out[0]


def _wrong_count(shape: tuple, n: int) -> None:
    raise ValueError(f"decode expects one result per returned worker: Y has first dimension "
                     f"{shape[0] if len(shape) else 'none'} but {n} workers returned")


def _indices_key(returned: Any) -> bytes | tuple | None:
    """The decoder cache's key of worker indices as the caller passed them, without validating them: an integer
    array's int64 bytes, a list's or tuple's items; None for anything else (validated first, then keyed)."""
    if type(returned) is np.ndarray:
        if returned.dtype == np.int64:
            return returned.tobytes()
        return returned.astype(np.int64).tobytes() if returned.dtype.kind in "iu" else None
    if isinstance(returned, (list, tuple)):
        return tuple(returned)
    return None


def _unsort(D: np.ndarray, order: np.ndarray) -> np.ndarray:
    """D's columns (for sorted workers) put back in the caller's order of `returned`."""
    out = np.empty_like(D)
    out[:, order] = D
    return out
