"""The Code interface: a fixed linear encoder E (N x K) and a decoder D_F (K x |F|) per straggler set F."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._arrays import apply_matrix, is_torch, take_rows, to_numpy
from .._validate import check_int

#: decoding matrices kept per code (least recently used are dropped first)
DECODER_CACHE_SIZE = 256


class Code(ABC):
    """A linear coded-computing scheme for K inputs on N workers.

    Subclasses set `alpha` (K sorted data points), `beta` (N sorted worker points), implement
    `_encoding_matrix()` and `_decoding_matrix(returned_sorted, Y_sorted)`, and state `min_results`.
    A code may be shared between threads (`gencc.stream` does): its decoder cache is locked, and nothing a
    decode chooses is kept on the instance.
    """

    name: str = "code"

    def __init__(self, K: int, N: int):
        K, N = check_int("K", K, 1), check_int("N", N, 1)
        if N < K:
            raise ValueError(f"need at least as many workers as inputs: N={N} < K={K}; raise N or split the "
                             "inputs into batches of at most N")
        self.K, self.N = K, N
        self._E: np.ndarray | None = None
        self._cache: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
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

    def _cache_key(self, returned: np.ndarray, Y: np.ndarray | None) -> tuple | None:
        """Key of D_F in the cache; None means do not cache (a data-dependent decoder)."""
        return tuple(returned.tolist())

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
        Z = apply_matrix(self.encoding_matrix, X, "X")
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

        `Y` is only needed by decoders that adapt to the data (lam chosen by cross-validation).
        """
        order, srt, Ys = self._sorted(returned, Y)
        return _unsort(self._cached_decoder(srt, Ys), order)

    def _sorted(self, returned: Sequence[int], Y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(the order sorting `returned`, the validated sorted indices, Y flattened in that order or None)."""
        idx = self.check_returned(returned)
        order = np.argsort(idx, kind="stable")
        Ys = None
        if Y is not None:
            Yn = to_numpy(Y)
            Ys = Yn.reshape(Yn.shape[0], -1)[order].astype(float)
        return order, idx[order], Ys

    def _cached_decoder(self, srt: np.ndarray, Ys: np.ndarray | None) -> np.ndarray:
        """D for sorted `srt`, from the LRU cache when the code allows it. The lock covers only the cache's
        bookkeeping; two threads missing on one key may both compute D (the same matrix)."""
        key = self._cache_key(srt, Ys)
        if key is None:
            return np.asarray(self._decoding_matrix(srt, Ys), dtype=float)
        with self._cache_lock:
            D = self._cache.get(key)
            if D is not None:
                self._cache.move_to_end(key)
                return D
        D = np.asarray(self._decoding_matrix(srt, Ys), dtype=float)
        with self._cache_lock:
            self._cache[key] = D
            while len(self._cache) > DECODER_CACHE_SIZE:
                self._cache.popitem(last=False)
        return D

    def decode(self, Y: Any, returned: Sequence[int]) -> Any:
        """Estimates (K, *out_shape) of f(x_1..x_K) from results Y (len(returned), *out_shape).

        Y[i] is the result of worker returned[i]; the order of `returned` does not matter.
        """
        ret = np.asarray(to_numpy(returned)).ravel() if not isinstance(returned, (list, tuple)) else returned
        shape = tuple(Y.shape) if hasattr(Y, "shape") else np.shape(Y)
        if len(shape) == 0 or shape[0] != len(ret):
            raise ValueError(f"decode expects one result per returned worker: Y has first dimension "
                             f"{shape[0] if shape else 'none'} but {len(ret)} workers returned")
        D = self.decoding_matrix(ret, Y if self.data_dependent else None)
        return apply_matrix(D, Y, "Y", nonfinite="Y contains non-finite values (NaN or inf): treat those "
                            "workers as stragglers and leave them out of `returned`")

    def robust_decode(self, Y: Any, returned: Sequence[int], adversaries: int = 1, **options: Any
                      ) -> tuple[Any, np.ndarray]:
        """(Yhat, flagged): locate up to `adversaries` wrong results, exclude them, decode the rest.

        `flagged` holds the sorted worker indices excluded; Yhat equals `decode` without them. Implemented
        for GCC, BACC (also `method="approxifer"`, the baseline) and LCC: see gencc.codes.robust.
        """
        from .robust import robust_decode

        return robust_decode(self, Y, returned, adversaries, **options)

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

    def missing(self, returned: Sequence[int]) -> np.ndarray:
        """Inputs that get no estimate from these returned workers (only replication has any)."""
        return np.zeros(0, dtype=np.int64)

    def can_decode(self, returned: Sequence[int]) -> bool:
        """Whether these returned workers are enough to decode."""
        return len(set(int(i) for i in returned)) >= self.min_results

    def check_returned(self, returned: Sequence[int]) -> np.ndarray:
        """Validate worker indices: integers in [0, N), no duplicates, at least `min_results` of them."""
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
        if np.unique(arr).size != arr.size:
            vals, counts = np.unique(arr, return_counts=True)
            raise ValueError(f"returned lists worker(s) {vals[counts > 1].tolist()[:8]} more than once")
        if arr.size < self.min_results:
            raise ValueError(f"too few results to decode: {self.name} needs at least {self.min_results} of "
                             f"N={self.N} workers, got {arr.size}; wait for more workers or use more workers")
        return arr

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_cache_lock"]  # a lock does not pickle; the copy gets its own
        state["_cache"] = OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._cache_lock = threading.Lock()

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


def _unsort(D: np.ndarray, order: np.ndarray) -> np.ndarray:
    """D's columns (for sorted workers) put back in the caller's order of `returned`."""
    out = np.empty_like(D)
    out[:, order] = D
    return out
