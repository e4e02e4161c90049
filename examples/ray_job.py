"""Your own model in a coded job on Ray: a local Ray cluster of long-lived actors, each building the model once
(from `gencc.as_model(...).factory`, picklable) and hosting worker slots.

Run it from anywhere: `python examples/ray_job.py` (needs the ray and torch extras). Without `address=` gencc starts a
private Ray bound to 127.0.0.1 with its own temporary folder and stops it on close; pass `--address` to join a
cluster you run instead. (The test suite runs this script inside a loopback-only network namespace, so Ray never
binds a routable address; `gencc run --backend ray` does the same by itself.)
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import gencc
from gencc.runtime import RayExecutor

K, N, ACTORS = 8, 16, 4  # inputs per job, workers, Ray actors (each hosts N / ACTORS worker slots)


class Smooth(torch.nn.Module):
    """The model: a seeded two-layer tanh network R^4 -> R^3, defined here (gencc never saw it)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="an existing Ray cluster's address (default: start one)")
    args = parser.parse_args()

    f = gencc.as_model(Smooth(), input_shape=(4,))  # its factory carries the module to each actor
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(K, 4)) for _ in range(6)]
    latency = np.zeros(N)
    latency[[3, 11]] = np.inf  # two workers never deliver: only cancellation ends their tasks
    with RayExecutor(factory=f.factory, num_actors=ACTORS, address=args.address) as ex:
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
