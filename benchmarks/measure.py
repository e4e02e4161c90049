"""What every benchmark reports: a figure measured side by side with its floor, and the ratio of the two.

A floor is the cheapest way to get the same result (E @ X for an encode, f called directly for a job, the
uncoded scheme for a tail latency), timed in the same run and interleaved with the figure, so both see the
same machine load; a ratio near 1 means gencc adds little on top of it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Figure:
    """One measured figure beside its floor (same unit), with what each of them is."""

    suite: str
    name: str
    value: float
    floor: float
    floor_name: str
    unit: str = "ms"

    @property
    def ratio(self) -> float:
        return self.value / self.floor if self.floor > 0 else float("nan")


def interleaved(fn: Callable[[], object], floor: Callable[[], object], repeat: int,
                clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Best-of-`repeat` seconds of `fn` and of `floor`, run alternately (one warm-up call of each first)."""
    fn(), floor()
    a, b = [], []
    for _ in range(repeat):
        t = clock()
        fn()
        a.append(clock() - t)
        t = clock()
        floor()
        b.append(clock() - t)
    return min(a), min(b)


def median(values: list[float]) -> float:
    return float(np.median(values))


def render(figures: list[Figure]) -> str:
    """The figures as a markdown table: measured, floor, ratio."""
    lines = ["| suite | figure | measured | floor | floor is | ratio |", "|---|---|---|---|---|---|"]
    for f in figures:
        lines.append(f"| {f.suite} | {f.name} | {f.value:.3g} {f.unit} | {f.floor:.3g} {f.unit} | {f.floor_name} | "
                     f"{f.ratio:.2f} |")
    return "\n".join(lines)


def machine() -> str:
    """The machine the figures come from (they move with its load)."""
    return (f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} when written (on a shared machine these "
            "figures move with the load).")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for a server the benchmark starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_ready(port: int) -> bool:
    """Whether a `gencc serve` on 127.0.0.1:port answers the Open Inference Protocol's readiness with 200."""
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
