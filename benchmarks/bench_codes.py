"""Codes: encode, decode, building D_F and the robust decode, each against its floor (docs/design.md section 3).

- encode vs E @ X (the encoder is a fixed linear map);
- warm decode (D_F cached for the straggler pattern, as a job reuses it) vs D_F @ Y;
- cold D_F (a new straggler pattern on a new code object, construction included) vs the solve it needs: one banded
  solve of the same size for the default kernel (beyond 512 points it is the cubic spline's O(n) banded path; at
  N = 1,000 and at `--large-N` workers), one dense solve of the same size for the dense Matern 3/2 path;
- robust decode of honest results, new pattern, vs the plain decode of the same results, new pattern (CPU time on
  one thread: on a shared machine wall-clock time mostly measures the other jobs).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from measure import Figure, interleaved

import gencc

SUITE = "codes"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--columns", type=int, default=20_000, metavar="M",
                    help="output columns of the warm decode and input columns of the encode (default 20000)")
    ap.add_argument("--large-N", type=int, default=100_000, metavar="N",
                    help="workers of the large cold D_F figure (default 100000; 0 skips it)")


def _returned(N: int, S: int, rng: np.random.Generator) -> np.ndarray:
    return np.setdiff1d(np.arange(N), rng.choice(N, S, replace=False))


def encode(repeat: int, columns: int) -> Figure:
    K, N = 100, 1_000
    code = gencc.GCC(K, N)
    E = code.encoding_matrix
    X = np.random.default_rng(0).normal(size=(K, columns))
    t, f = interleaved(lambda: code.encode(X), lambda: E @ X, repeat)
    return Figure(SUITE, f"encode, K={K}, N={N}, {columns} columns", 1e3 * t, 1e3 * f, "E @ X")


def warm_decode(repeat: int, columns: int) -> Figure:
    K, N, S = 100, 1_010, 10
    code = gencc.GCC(K, N)
    returned = _returned(N, S, np.random.default_rng(1))
    Y = np.random.default_rng(2).normal(size=(returned.size, columns))
    D = code.decoding_matrix(returned)  # cached: a job reuses D_F for its straggler pattern
    t, f = interleaved(lambda: code.decode(Y, returned), lambda: D @ Y, repeat)
    return Figure(SUITE, f"warm decode, K={K}, {returned.size} results, {columns} columns", 1e3 * t, 1e3 * f, "D_F @ Y")


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


def cold(repeat: int, K: int, N: int, kernel: str | None = None) -> Figure:
    """D_F for a new straggler pattern on a new code object (construction included) vs the solve it needs."""
    S = max(10, N // 100)
    rng = np.random.default_rng(3)
    returned = _returned(N, S, rng)
    n = returned.size
    opts = {"kernel": kernel} if kernel else {}
    floor = _dense_floor(n, K, rng) if kernel else _banded_floor(n, K, rng)
    what = f"dense solve n={n}" if kernel else f"banded solve n={n}, 5 diagonals"

    def build() -> None:
        gencc.GCC(K, N, **opts).decoding_matrix(returned)

    t, f = interleaved(build, floor, repeat if N <= 10_000 else max(1, repeat // 2))
    path = f"kernel {kernel}, dense" if kernel else "default kernel, banded path"
    return Figure(SUITE, f"cold D_F, K={K}, N={N}, S={S}, {path} (new code object)", 1e3 * t, 1e3 * f,
                  f"{what}, {K} right-hand sides")


def robust(repeat: int) -> Figure:
    from threadpoolctl import threadpool_limits

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


def run(args: argparse.Namespace) -> list[Figure]:
    figs = [encode(args.repeat, args.columns), warm_decode(args.repeat, args.columns),
            cold(args.repeat, 10, 1_000), cold(args.repeat, 100, 1_000), cold(args.repeat, 10, 1_000, "matern32")]
    if args.large_N:
        figs.append(cold(args.repeat, 10, args.large_N))
    figs.append(robust(args.repeat))
    return figs
