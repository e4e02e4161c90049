"""Open-loop arrivals: request times that do not wait for answers (the load generator's and the simulator's)."""

from __future__ import annotations

import math

import numpy as np


def poisson_arrivals(rate: float, duration: float, rng: np.random.Generator, max_count: int = 5_000_000
                     ) -> np.ndarray:
    """Open-loop arrival times of a Poisson process of `rate` per second on [0, duration)."""
    if not rate > 0 or not duration > 0:
        raise ValueError(f"rate and duration must be positive, got rate={rate}, duration={duration}")
    n = min(int(rate * duration * 1.2 + 10 * math.sqrt(rate * duration) + 10), max_count)
    t = np.cumsum(rng.exponential(1 / rate, size=n))
    return t[t < duration]
