"""A coded job on Ray: a local Ray cluster of long-lived actors, each building f once and hosting worker slots.

Run it from anywhere: `python examples/ray_job.py` (needs the ray extra). Without `address=` gencc starts a
private Ray bound to 127.0.0.1 with its own temporary folder and stops it on close; pass `--address` to join a
cluster you run instead. (The test suite runs this script inside a loopback-only network namespace, so Ray never
binds a routable address; `gencc run --backend ray` does the same by itself.)
"""

from __future__ import annotations

import argparse

import numpy as np

import gencc
from gencc.runtime import RayExecutor

K, N, ACTORS = 8, 16, 4  # inputs per job, workers, Ray actors (each hosts N / ACTORS worker slots)


class Smooth:
    """A picklable factory of f: each actor calls it once and keeps the function it returns."""

    def __call__(self):
        W = np.linspace(-1, 1, 12).reshape(4, 3)

        def f(X: np.ndarray) -> np.ndarray:
            return np.tanh(np.asarray(X) @ W)

        f.batched = True
        return f


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="an existing Ray cluster's address (default: start one)")
    args = parser.parse_args()

    f = Smooth()()
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(K, 4)) for _ in range(6)]
    latency = np.zeros(N)
    latency[[3, 11]] = np.inf  # two workers never deliver: only cancellation ends their tasks
    with RayExecutor(factory=Smooth(), num_actors=ACTORS, address=args.address) as ex:
        res = gencc.run(None, batches[0], gencc.GCC(K=K, N=N), ex, wait_for=N - 2, latency=latency)
        print(f"one job: workers used {res.returned.tolist()}, stragglers {res.stragglers}")
        print(f"rel_mse {gencc.metrics.rel_mse(res.outputs, f(batches[0])):.2e}")
        assert sorted(res.stragglers) == [3, 11]
        for i, r in enumerate(gencc.stream(None, batches, gencc.GCC(K=K, N=N), ex, max_in_flight=3,
                                           wait_for=N - 4)):
            print(f"job {i}: {len(r.returned)} results, "
                  f"rel_mse {gencc.metrics.rel_mse(r.outputs, f(batches[i])):.2e}")


if __name__ == "__main__":
    main()
