"""gencc: general coded computing.

Straggler-resilient distributed computation of arbitrary functions: encode K inputs into N coded inputs with
a smooth (RKHS) curve, let workers compute f, decode from whichever workers answer.

The names a user needs, by category (`__all__`); everything else lives in its layer, one folder each:
`gencc.rkhs` (points, kernels, smoothing: the RKHS math), `gencc.codes` (codes, ordering, registry, robust
decoding), `gencc.faults` (latency and fault injection, `stragglers`, `adversaries`), `gencc.model` (your model),
`gencc.engine` (workers; Ray in `gencc.engine.ray`), `gencc.runtime` (jobs, `simulate`, `metrics`),
`gencc.serving` (request streams), `gencc.errors` (every exception, under `GenccError`) and, imported on
demand so that `import gencc` needs only numpy and scipy, `gencc.training`, `gencc.workloads` (torch) and
`gencc.experiments`. `gencc.metrics`, `gencc.stragglers`, `gencc.adversaries`, `gencc.kernels`,
`gencc.points` and `gencc.smoothing` stay reachable from here.
"""

from typing import Any

from . import errors  # noqa: F401  (the documented modules stay attributes of the face)
from ._util.arrays import take_rows  # noqa: F401  (stacks rows of a packed encode; not in __all__)
from ._util.version import __version__  # noqa: F401
from .codes import BACC, GCC, LCC, Code, ParM, Replication, SystematicGCC, calibrate_rho
from .codes.ordering import order_inputs
from .errors import GenccError, JobFailed, JobTimeout
from .faults import Bimodal, LatencyModel, Pareto, ShiftedExponential, adversaries, stragglers  # noqa: F401
from .faults.stragglers import Bernoulli, Collected, FixedCount
from .model import Model, as_model
from .rkhs import kernels, points, smoothing  # noqa: F401
from .runtime import (
    Hedged,
    LocalExecutor,
    RayExecutor,
    Replicated,
    RunResult,
    Uncoded,
    metrics,  # noqa: F401
    run,
    stream,
)
from .runtime.simulate import simulate, summarize


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
