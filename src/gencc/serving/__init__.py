"""Coded prediction serving: requests one at a time on W workers with finite capacity (runtime level).

The policies (`Uncoded`, `Replicated`, `Hedged`, `Coded` for GCC / BACC / ParM, eager or as a coded hedge)
are written once against the `Env` interface; `Pool` (threads or Ray actors, wall clock) and `SimEnv`
(virtual time) both drive them. `Service` adds bounded admission; `gencc.serving.app` the HTTP front door
(FastAPI, imported on demand); `gencc.serving.load` the open-loop load generator.
"""

from .coded import Coded, systematic_slots, worker_functions
from .core import FAULTS, Env, Request, RollingQuantile, Task
from .policy import Dispatcher, Hedged, Replicated, Uncoded
from .pool import LocalBackend, Pool
from .service import SCHEMES, Service, freeze_heap, make_dispatcher
from .sim import SimEnv, poisson_arrivals, simulate_load
from .stragglers import Faults, PersistentStragglers, ServiceTimes

__all__ = [
    "FAULTS", "SCHEMES", "Coded", "Dispatcher", "Env", "Faults", "Hedged", "LocalBackend", "PersistentStragglers",
    "Pool", "Replicated", "Request", "RollingQuantile", "Service", "ServiceTimes", "SimEnv", "Task", "Uncoded",
    "freeze_heap", "make_dispatcher", "poisson_arrivals", "simulate_load", "systematic_slots", "worker_functions",
]
