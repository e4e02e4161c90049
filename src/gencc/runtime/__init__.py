"""The runtime: run coded jobs on real workers (threads, processes, Ray actors) under injected latency.

`run` runs one job, `stream` many with several in flight; `LocalExecutor` (default), `RayExecutor` and
`RemoteExecutor` (model replicas you run, over the Open Inference Protocol: `upstreams=`) are the backends;
`Uncoded`, `Replicated` and `Hedged` are the baselines engineers use today against tail latency.
`simulate` is the in-process twin of a job (no workers: the returned set comes from a straggler model), and
`metrics` scores a decode (rel_mse, agreement, rel_acc). Nothing here imports ray or torch at import time.
"""

from ..errors import JobFailed, JobTimeout
from . import metrics
from .baselines import Baseline, Hedged, Replicated, Uncoded
from .executor import Completion, Executor
from .job import default_executor, run, stream
from .local import LocalExecutor
from .ray import RayExecutor
from .remote import RemoteExecutor
from .results import RunResult

__all__ = [
    "Baseline",
    "Completion",
    "Executor",
    "Hedged",
    "JobFailed",
    "JobTimeout",
    "LocalExecutor",
    "RayExecutor",
    "RemoteExecutor",
    "Replicated",
    "RunResult",
    "Uncoded",
    "default_executor",
    "metrics",
    "run",
    "stream",
]
