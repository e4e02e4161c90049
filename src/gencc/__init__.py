"""gencc: general coded computing.

Straggler-resilient distributed computation of arbitrary functions: encode K inputs into N coded inputs with
a smooth (RKHS) curve, let workers compute f, decode from whichever workers answer.

The names a user needs, by category (`__all__`); everything else lives in its subpackage: `gencc.codes`
(codes, registry, robust decoding), `gencc.stragglers` and `gencc.faults` (straggler sets; latency and fault
injection), `gencc.model` (your model), `gencc.errors` (every exception, under `GenccError`), `gencc.runtime`
(jobs), `gencc.engine` (workers), `gencc.serving` (request streams), `gencc.adversaries`, `gencc.kernels`,
`gencc.points`, `gencc.smoothing`, and, imported on demand so that `import gencc` needs only numpy and scipy,
`gencc.workloads` (torch) and `gencc.experiments`.
"""

from typing import Any

from . import adversaries, errors, kernels, metrics, points, smoothing  # noqa: F401  (subpackages, as attributes)
from ._arrays import take_rows  # noqa: F401  (kept as an attribute for existing callers; not in __all__)
from .codes import BACC, GCC, LCC, Code, ParM, Replication, SystematicGCC, calibrate_rho
from .errors import GenccError, JobFailed, JobTimeout
from .faults import Bimodal, LatencyModel, Pareto, ShiftedExponential
from .model import Model, as_model
from .ordering import order_inputs
from .runtime import (
    Hedged,
    LocalExecutor,
    RayExecutor,
    Replicated,
    RunResult,
    Uncoded,
    run,
    stream,
)
from .simulate import simulate, summarize
from .stragglers import Bernoulli, Collected, FixedCount

__version__ = "0.1.0"


def train(model: Any, data: Any, **options: Any) -> Any:
    """Straggler-resilient data-parallel training of a torch model: `gencc.training.train` (see its options).

    Defined here as a thin wrapper so that `import gencc` does not import torch; the training package loads on
    the first call."""
    from .training import train as train_

    return train_(model, data, **options)

__all__ = [
    # codes
    "GCC", "BACC", "LCC", "Replication", "ParM", "SystematicGCC", "Code", "calibrate_rho",
    # straggler and latency models
    "FixedCount", "Bernoulli", "Collected", "LatencyModel", "ShiftedExponential", "Pareto", "Bimodal",
    # your model (a torch module, import path, saved file or callable) as a batched Model
    "as_model", "Model",
    # run / stream / simulate (and the job baselines and executors they take)
    "order_inputs", "simulate", "summarize", "run", "stream", "Uncoded", "Replicated", "Hedged",
    "LocalExecutor", "RayExecutor",
    # training (torch, loaded on first use)
    "train",
    # results and errors (every gencc exception subclasses GenccError; the others are in gencc.errors)
    "RunResult", "GenccError", "JobFailed", "JobTimeout",
    # metrics
    "metrics",
]
