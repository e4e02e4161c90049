"""gencc: general coded computing.

Straggler-resilient distributed computation of arbitrary functions: encode K inputs into N coded inputs with
a smooth (RKHS) curve, let workers compute f, decode from whichever workers answer.
"""

from . import kernels, metrics, points, smoothing
from .codes import BACC, GCC, LCC, Code, Replication
from .ordering import order_inputs
from .simulate import apply_f, simulate, summarize
from .stragglers import (
    Bernoulli,
    Bimodal,
    FixedCount,
    LatencyModel,
    Pareto,
    ShiftedExponential,
    first_returned,
    worst_case_returned,
)

__version__ = "0.1.0"

__all__ = [
    "BACC",
    "GCC",
    "LCC",
    "Bernoulli",
    "Bimodal",
    "Code",
    "FixedCount",
    "LatencyModel",
    "Pareto",
    "Replication",
    "ShiftedExponential",
    "apply_f",
    "first_returned",
    "kernels",
    "metrics",
    "order_inputs",
    "points",
    "simulate",
    "smoothing",
    "summarize",
    "worst_case_returned",
]
