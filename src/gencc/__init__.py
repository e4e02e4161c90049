"""gencc: general coded computing.

The math layer (points, kernels, smoothing, codes, stragglers, metrics) and the runtime are re-exported
here; workloads (torch) live in `gencc.workloads` and experiments in `gencc.experiments`, imported on demand
so that `import gencc` needs only numpy and scipy.

Straggler-resilient distributed computation of arbitrary functions: encode K inputs into N coded inputs with
a smooth (RKHS) curve, let workers compute f, decode from whichever workers answer.
"""

from . import adversaries, kernels, metrics, points, smoothing
from ._arrays import take_rows
from .codes import BACC, GCC, LCC, Code, ParM, Replication, SystematicGCC, calibrate_rho
from .ordering import order_inputs
from .runtime import (
    Hedged,
    JobFailed,
    JobTimeout,
    LocalExecutor,
    RayExecutor,
    Replicated,
    RunResult,
    Uncoded,
    run,
    stream,
)
from .simulate import apply_f, simulate, summarize
from .stragglers import (
    Bernoulli,
    Bimodal,
    Collected,
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
    "Collected",
    "Hedged",
    "JobFailed",
    "JobTimeout",
    "LocalExecutor",
    "RayExecutor",
    "Replicated",
    "RunResult",
    "Uncoded",
    "FixedCount",
    "LatencyModel",
    "ParM",
    "Pareto",
    "Replication",
    "ShiftedExponential",
    "SystematicGCC",
    "adversaries",
    "apply_f",
    "calibrate_rho",
    "first_returned",
    "kernels",
    "metrics",
    "order_inputs",
    "points",
    "run",
    "simulate",
    "smoothing",
    "stream",
    "summarize",
    "take_rows",
    "worst_case_returned",
]
