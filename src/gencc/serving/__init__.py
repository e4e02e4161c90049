"""Coded prediction serving: request streams on the engine's W workers with finite capacity.

The dispatchers (`UncodedDispatcher`, `ReplicatedDispatcher`, `HedgedDispatcher`, `CodedDispatcher` for GCC /
BACC / SGCC / ParM, eager or as a coded hedge) are written once against the `Env` interface;
`CheckedDispatcher` holds a coded group's answers until its results were checked against each other (wrong
results outvoted, bad workers quarantined). `gencc.engine.Workers` (threads or Ray actors, wall clock) and
`gencc.engine.VirtualWorkers` (virtual time) both drive them. `Service` adds bounded admission (configured by
`ServiceConfig`, slowed by `Slowdown`, faults injected with `gencc.faults`); `gencc.serving._http.app` the HTTP front
door (FastAPI, imported on demand); `gencc.loadgen.load` the open-loop load generator.
"""

from ._policy.checked import CheckedDispatcher, ResultCheck
from ._policy.coded import CodedDispatcher
from ._policy.dispatchers import Dispatcher, HedgedDispatcher, ReplicatedDispatcher, UncodedDispatcher
from ._policy.requests import Env, Request, RollingQuantile
from ._policy.sim import poisson_arrivals, simulate_load
from ._policy.slots import systematic_slots, worker_functions
from .config import CHECKS, SCHEME_TABLE, SCHEMES, Scheme, ServiceConfig, Slowdown
from .service import Service, freeze_heap, make_dispatcher

__all__ = [
    "CHECKS", "SCHEMES", "SCHEME_TABLE", "CheckedDispatcher", "CodedDispatcher", "Dispatcher", "Env",
    "HedgedDispatcher", "ReplicatedDispatcher", "Request", "ResultCheck", "RollingQuantile", "Scheme", "Service",
    "ServiceConfig", "Slowdown", "UncodedDispatcher", "freeze_heap", "make_dispatcher", "poisson_arrivals",
    "simulate_load", "systematic_slots", "worker_functions",
]
