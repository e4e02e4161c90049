"""Speed of building and applying codes (docs/design.md section 3 cost claims). Prints figures; asserts nothing.

    python benchmarks/bench_codes.py [--repeat 5]

Timings are the best of --repeat runs (the machine is shared and noisy); ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

import gencc


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def build_and_decode(code_factory, returned: np.ndarray, Y: np.ndarray) -> None:
    code = code_factory()
    code.decode(Y, returned)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    print("== D_F for N = 100,000 workers, 1,000 stragglers, decode 10 output columns (target < 5 s) ==")
    N, S, K = 100_000, 1_000, 10
    returned = np.setdiff1d(np.arange(N), rng.choice(N, S, replace=False))
    Y = rng.normal(size=(returned.size, 10))
    for label, factory in (("gcc (default: auto -> cubic banded)", lambda: gencc.GCC(K, N)),
                           ("bacc", lambda: gencc.BACC(K, N))):
        t = best(lambda f=factory: build_and_decode(f, returned, Y), max(1, args.repeat // 2))
        tracemalloc.start()
        build_and_decode(factory, returned, Y)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"  {label:40s} {t:8.3f} s   peak {peak / 2**20:7.1f} MiB")

    print("== E and D_F for N = 1,000 workers, 10 stragglers (target < 50 ms) ==")
    N = 1_000
    returned = np.setdiff1d(np.arange(N), rng.choice(N, 10, replace=False))
    for K in (10, 100):
        for label, factory in (("gcc default", lambda K=K: gencc.GCC(K, N)),
                               ("gcc matern32 dense", lambda K=K: gencc.GCC(K, N, kernel="matern32")),
                               ("gcc cubic", lambda K=K: gencc.GCC(K, N, kernel="cubic")),
                               ("bacc", lambda K=K: gencc.BACC(K, N))):
            def build(factory=factory):
                code = factory()
                _ = code.encoding_matrix
                code.decoding_matrix(returned)
            print(f"  K={K:3d} {label:22s} {1e3 * best(build, args.repeat):8.2f} ms")

    print("== decode K = 100, |F| = 1,000, 100,000 output columns vs numpy matmul (target ratio <= 1.5) ==")
    K, N = 100, 1_010
    code = gencc.GCC(K, N)
    returned = np.setdiff1d(np.arange(N), rng.choice(N, 10, replace=False))
    Y = rng.normal(size=(returned.size, 100_000))
    code.decode(Y[:, :1], returned)  # warm the D_F cache: a job reuses D_F for its straggler pattern
    D = code.decoding_matrix(returned)
    reps = max(3, args.repeat)
    t_dec, t_mm = [], []
    for _ in range(reps):  # interleaved, so both see the same machine load
        t = time.perf_counter()
        code.decode(Y, returned)
        t_dec.append(time.perf_counter() - t)
        t = time.perf_counter()
        _ = D @ Y
        t_mm.append(time.perf_counter() - t)
    print(f"  gencc decode {min(t_dec) * 1e3:8.1f} ms   numpy D @ Y {min(t_mm) * 1e3:8.1f} ms   "
          f"ratio {min(t_dec) / min(t_mm):.2f}")


if __name__ == "__main__":
    main()
