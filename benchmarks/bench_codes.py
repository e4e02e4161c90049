"""Codes: encode, decode, building D_F and the robust decode, each against its floor (docs/design.md section 3).

- encode vs E @ X (the encoder is a fixed linear map), K = 100, N = 1,000, from 64 columns up;
- warm decode (D_F cached for the straggler pattern, as a job reuses it; the same returned array each call) vs
  D_F @ Y, K = 100, |F| = 150 and 1,000 results, 10 to 20,000 columns: GCC's default (systematic workers: most
  rows of D_F select one result, so the decode is a gather and can beat the product), with every systematic
  worker back or one of them lost, and GCC with beta="chebyshev2" (no worker on a data point: a dense D_F, the
  plain product's path);
- cold D_F (a new straggler pattern on a new code object, construction included) vs the solve it needs: one banded
  solve of the same size for the default kernel (beyond 512 points it is the cubic spline's O(n) banded path; at
  N = 1,000 and at `--large-N` workers), one dense solve of the same size for the dense Matern 3/2 path; at
  `--large-N` workers with K = 100 also its peak memory (tracemalloc) against the result's size;
- the encoding matrix at `--large-N` workers vs evaluating the kernel matrix it is built from;
- robust decode of honest results, new pattern, vs the plain decode of the same results, new pattern;
- the chain ordering a job runs on its K inputs (`order_inputs`) vs the K x K distances it starts from (cdist),
  at 64 columns and at 3,072 (an image: the ordering's distances then come from one BLAS product).

Timings are medians of alternated pairs (figure, floor) on one BLAS thread (threadpoolctl; the machine may be
shared) unless a row says "default threads"; the large builds and the robust decode are CPU time on one thread
(on a shared machine wall-clock time mostly measures the other jobs).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from measure import Figure, interleaved
from threadpoolctl import threadpool_limits

import gencc
from gencc.rkhs.smoothing import MATERN_BANDED_THRESHOLD

SUITE = "codes"
#: the columns of the warm-decode and encode grids (the last one is --columns)
DECODE_COLUMNS = (10, 100, 1_000)
ENCODE_COLUMNS = (64, 1_000)
#: the inputs of the ordering figures
ORDER_K = (8, 100, 400)
#: image-sized inputs (3,072 columns, a 32 x 32 x 3 picture): the distances from a Gram product
ORDER_WIDE = ((100, 3072), (400, 3072))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--columns", type=int, default=20_000, metavar="M",
                    help="the largest output columns of the warm decode and input columns of the encode "
                         "(default 20000)")
    ap.add_argument("--large-N", type=int, default=100_000, metavar="N",
                    help="workers of the large cold D_F and encoding-matrix figures (default 100000; 0 skips them)")


def _returned(N: int, S: int, rng: np.random.Generator) -> np.ndarray:
    return np.setdiff1d(np.arange(N), rng.choice(N, S, replace=False))


def pairs(fn: Callable[[], object], floor: Callable[[], object], repeat: int,
          clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Median seconds per call of `fn` and of `floor` over `repeat` alternated pairs (after one warm-up call of
    each); a sample loops enough calls to take about a millisecond."""
    fn(), floor()
    t = clock()
    floor()
    loops = max(1, min(1000, int(1e-3 / max(clock() - t, 1e-7))))
    a, b = [], []
    for _ in range(repeat):
        for out, f in ((a, fn), (b, floor)):
            t = clock()
            for _ in range(loops):
                f()
            out.append((clock() - t) / loops)
    return float(np.median(a)), float(np.median(b))


def _pairs(repeat: int, columns: int) -> int:
    """Pairs for a row: more where they are cheap (the small ones move most with the machine's load; 51 pairs of
    about a millisecond each at the default --repeat 5)."""
    return repeat if columns > 1_000 else 10 * repeat + 1


def _clock(threads: int | None) -> Callable[[], float]:
    """CPU time of this thread for one BLAS thread (all the work runs here), wall-clock time otherwise."""
    return time.thread_time if threads == 1 else time.perf_counter


def encode(repeat: int, columns: int, threads: int | None = 1) -> Figure:
    K, N = 100, 1_000
    code = gencc.GCC(K, N)
    E = code.encoding_matrix
    X = np.random.default_rng(0).normal(size=(K, columns))
    with threadpool_limits(threads):
        t, f = pairs(lambda: code.encode(X), lambda: E @ X, _pairs(repeat, columns), _clock(threads))
    how = "default threads" if threads is None else "1 thread"
    return Figure(SUITE, f"encode, K={K}, N={N}, {columns} columns, {how}", 1e3 * t, 1e3 * f, "E @ X")


def warm_decode(repeat: int, results: int, columns: int, kind: str = "default", threads: int | None = 1) -> Figure:
    """Decode with D_F cached (the same returned array each call, in a shuffled order) vs D_F @ Y; 10 stragglers.

    kind "default": GCC's defaults, no systematic worker (one on a data point) among the stragglers; "lost": one
    of them is systematic; "dense": beta="chebyshev2" (no systematic workers, so a dense D_F)."""
    K, S = 100, 10
    N = results + S
    code = gencc.GCC(K, N, beta="chebyshev2") if kind == "dense" else gencc.GCC(K, N)
    rng = np.random.default_rng(1)
    systematic = np.asarray(code.systematic if code.systematic is not None else [], dtype=np.int64)
    lost = 1 if kind == "lost" else 0
    others = np.setdiff1d(np.arange(N), systematic)
    stragglers = np.concatenate([rng.choice(systematic, lost, replace=False), rng.choice(others, S - lost,
                                                                                          replace=False)])
    returned = np.setdiff1d(np.arange(N), stragglers)
    rng.shuffle(returned)
    Y = np.random.default_rng(2).normal(size=(returned.size, columns))
    D = code.decoding_matrix(returned)
    code.decode(Y, returned)  # cached: a job reuses D_F for its straggler pattern
    with threadpool_limits(threads):
        t, f = pairs(lambda: code.decode(Y, returned), lambda: D @ Y, _pairs(repeat, columns), _clock(threads))
    what = {"default": "GCC default, systematic workers all back", "lost": "GCC default, a systematic worker lost",
            "dense": "dense D_F (beta=chebyshev2)"}[kind]
    how = "default threads" if threads is None else "1 thread"
    return Figure(SUITE, f"warm decode, {what}, K={K}, {returned.size} results, {columns} columns, {how}",
                  1e3 * t, 1e3 * f, "D_F @ Y")


def _banded_floor(n: int, K: int, rng: np.random.Generator):
    """One banded solve of size n (5 diagonals, the cubic spline's bandwidth) with K right-hand sides."""
    from scipy.linalg import solve_banded

    bands = rng.normal(size=(5, n))
    bands[2] = 10.0 + np.abs(bands[2])  # diagonally dominant
    B = rng.normal(size=(n, K))
    return lambda: solve_banded((2, 2), bands, B)


def _dense_floor(n: int, K: int, rng: np.random.Generator):
    """One dense symmetric positive definite solve of size n with K right-hand sides."""
    A = rng.normal(size=(n, n))
    A = A @ A.T + n * np.eye(n)
    B = rng.normal(size=(n, K))
    return lambda: np.linalg.solve(A, B)


def cold(repeat: int, K: int, N: int, kernel: str | None = None, S: int | None = None) -> Figure:
    """D_F for a new straggler pattern on a new code object (construction included) vs the solve it needs
    (CPU time on one BLAS thread)."""
    S = max(10, N // 100) if S is None else S
    rng = np.random.default_rng(3)
    returned = _returned(N, S, rng)
    n = returned.size
    opts = {"kernel": kernel} if kernel else {}
    dense = kernel is not None and not (kernel == "matern32" and n >= MATERN_BANDED_THRESHOLD)
    floor = _dense_floor(n, K, rng) if dense else _banded_floor(n, K, rng)
    what = f"dense solve n={n}" if dense else f"banded solve n={n}, 5 diagonals"

    def build() -> None:
        gencc.GCC(K, N, **opts).decoding_matrix(returned)

    with threadpool_limits(1):
        t, f = pairs(build, floor, repeat if N <= 10_000 else max(3, repeat // 2), clock=time.thread_time)
    path = (f"kernel {kernel}, " + ("dense" if dense else "state-space band path")) if kernel \
        else "default kernel, banded path"
    return Figure(SUITE, f"cold D_F, K={K}, N={N}, S={S}, {path} (new code object, CPU)", 1e3 * t, 1e3 * f,
                  f"{what}, {K} right-hand sides")


def cold_memory(K: int, N: int, S: int) -> Figure:
    """Peak memory (tracemalloc) of building D_F on a new code object vs the size of the D_F it returns."""
    returned = _returned(N, S, np.random.default_rng(3))
    code = gencc.GCC(K, N)
    tracemalloc.start()
    try:
        D = code.decoding_matrix(returned)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return Figure(SUITE, f"cold D_F peak memory, K={K}, N={N}, S={S} (tracemalloc)", peak / 2**20,
                  D.nbytes / 2**20, "the returned D_F", unit="MiB")


def encoding_matrix(repeat: int, K: int, N: int) -> Figure:
    """The encoding matrix on a new code object vs evaluating the kernel matrix k(beta, alpha) it is built from
    (CPU time on one BLAS thread)."""
    code = gencc.GCC(K, N)
    kern, alpha, beta = code.kernel_for(K), code.alpha, code.beta
    with threadpool_limits(1):
        t, f = pairs(lambda: gencc.GCC(K, N).encoding_matrix, lambda: kern(beta, alpha), max(3, repeat // 2),
                     clock=time.thread_time)
    return Figure(SUITE, f"encoding matrix, K={K}, N={N} (new code object, CPU)", 1e3 * t, 1e3 * f,
                  f"kernel matrix k(beta, alpha), {N} x {K}")


def robust(repeat: int) -> Figure:
    K, N, S, A = 10, 80, 2, 2
    rng = np.random.default_rng(5)
    returned = _returned(N, S, rng)
    W = rng.normal(size=(3, 10))
    X = np.sort(rng.uniform(-1, 1, size=(K, 3)), axis=0)
    Y = np.tanh(gencc.GCC(K, N).encode(X) @ W)[returned]  # honest results of a smooth f

    with threadpool_limits(1):
        t, f = interleaved(lambda: gencc.GCC(K, N).robust_decode(Y, returned, adversaries=A),
                           lambda: gencc.GCC(K, N).decode(Y, returned), repeat, clock=time.thread_time)
    return Figure(SUITE, f"robust decode, honest results, K={K}, N={N}, A={A}, new pattern (CPU)", 1e3 * t,
                  1e3 * f, "plain decode, new pattern")


def ordering(repeat: int, K: int, d: int = 64) -> Figure:
    """The chain ordering a job runs on its K inputs (points along a noisy walk, shuffled) vs the K x K
    distances it starts from."""
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(K)
    X = np.cumsum(rng.normal(size=(K, d)), axis=0)[rng.permutation(K)]
    with threadpool_limits(1):
        t, f = pairs(lambda: gencc.order_inputs(X), lambda: cdist(X, X), repeat if K > 100 else 10 * repeat + 1,
                     time.thread_time)
    return Figure(SUITE, f"chain ordering (order_inputs), K={K}, {d} columns (CPU)", 1e3 * t, 1e3 * f,
                  "the K x K distances (cdist)")


def run(args: argparse.Namespace) -> list[Figure]:
    r, top = args.repeat, args.columns
    figs = [encode(r, d) for d in (*ENCODE_COLUMNS, top)]
    figs.append(encode(r, top, threads=None))
    for results, kinds in ((150, ("default", "dense")), (1_000, ("default", "lost", "dense"))):
        for kind in kinds:  # (150 results: the dense Matern path, whose D_F has no exact zeros, lost or not)
            figs += [warm_decode(r, results, d, kind) for d in (*DECODE_COLUMNS, top)]
    figs += [warm_decode(r, 1_000, top, kind, threads=None) for kind in ("default", "dense")]
    figs += [cold(r, 10, 1_000), cold(r, 100, 1_000), cold(r, 10, 1_000, "matern32")]
    if args.large_N:
        N = args.large_N
        figs += [cold(r, 10, N), cold(r, 100, N, S=10), cold(r, 100, N, S=1_000),
                 cold_memory(100, N, 10), cold_memory(100, N, 1_000), encoding_matrix(r, 100, N)]
    figs.append(robust(r))
    figs += [ordering(r, K) for K in ORDER_K]
    figs += [ordering(r, K, d) for K, d in ORDER_WIDE]
    return figs
