"""What a job returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RunResult:
    """The outcome of one job.

    outputs: (K, *out_shape) estimates in the caller's order (same array kind as X).
    returned: sorted worker indices whose results were used. stragglers: worker index -> reason.
    timings: seconds for encode, dispatch, first_result (from dispatch), decode, total.
    arrivals: worker -> seconds from dispatch to its completion (every completion, valid or not).
    missing: inputs with no estimate (only replication-style schemes have any; their rows are zero).
    """

    outputs: Any
    returned: np.ndarray
    stragglers: dict[int, str]
    timings: dict[str, float]
    scheme: str = ""
    K: int = 0
    N: int = 0
    arrivals: dict[int, float] = field(default_factory=dict)
    missing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def latency(self) -> float:
        """End-to-end seconds of the job (timings['total'])."""
        return self.timings["total"]
