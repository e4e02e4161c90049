"""Coded prediction serving: requests one at a time on W workers with finite capacity (runtime level).

The policies (`Uncoded`, `Replicated`, `Hedged`, `Coded` for GCC / BACC / ParM, eager or as a coded hedge)
are written once against the `Env` interface; `Checked` holds a coded group's answers until its results were
checked against each other (wrong results outvoted, bad workers quarantined). `Pool` (threads or Ray actors,
wall clock) and `SimEnv` (virtual time) both drive them. `Service` adds bounded admission; `gencc.serving.app`
the HTTP front door (FastAPI, imported on demand); `gencc.serving.load` the open-loop load generator.
"""

from .checked import Checked, ResultCheck
from .coded import Coded, systematic_slots, worker_functions
from .core import FAULTS, Env, Request, RollingQuantile, Task
from .policy import Dispatcher, Hedged, Replicated, Uncoded
from .pool import LocalBackend, Pool
from .service import CHECKS, SCHEMES, Service, freeze_heap, make_dispatcher
from .sim import SimEnv, poisson_arrivals, simulate_load
from .stragglers import Faults, PersistentStragglers, ServiceTimes, WrongResults

__all__ = [
    "CHECKS", "FAULTS", "SCHEMES", "Checked", "Coded", "Dispatcher", "Env", "Faults", "Hedged", "LocalBackend",
    "PersistentStragglers", "Pool", "Replicated", "Request", "ResultCheck", "RollingQuantile", "Service",
    "ServiceTimes", "SimEnv", "Task", "Uncoded", "WrongResults", "freeze_heap", "make_dispatcher",
    "poisson_arrivals", "simulate_load", "systematic_slots", "worker_functions",
]
