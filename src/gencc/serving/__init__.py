"""Coded prediction serving: request streams on the engine's W workers with finite capacity.

The public face (like Ray Serve's `serve` module, over private sections):

- run a service: `Service` (a scheme's dispatcher on a worker pool, bounded admission, graceful close; configured
  by `ServiceConfig`, slowed by `Slowdown`, faults injected with `gencc.faults`), `make_dispatcher` (a scheme's
  policy on any `Env`), `simulate_load` (the same policy in virtual time), `freeze_heap`;
- put it behind HTTP: `create_app` (FastAPI, imported on demand), `start_in_thread`, `check_model_name` (what
  a model's name in the protocol's paths may be), `Limits` (the door's API
  key, body size and read deadline), `uvicorn_options` (the keywords applying those limits below the app, for
  running uvicorn yourself);
- extend it: `Dispatcher` (subclass it for a policy of your own), `Request`, `Env` (what a dispatcher may ask of
  its workers), `RollingQuantile` (these four are `gencc.serving.dispatch`, the extension API), and the
  built-in policies `UncodedDispatcher`, `ReplicatedDispatcher`, `HedgedDispatcher`, `CodedDispatcher`
  (GCC / BACC / SGCC / ParM, eager or as a coded hedge),
  `CheckedDispatcher` (answers after a wrong-result check, `ResultCheck`), `Gate` (decoded answers held back
  unless likely right; its threshold from `calibrate_gate`, `CALIBRATION_RUNS` simulated runs on training
  inputs, or for a `Service` assembled by hand the gate `Service.build` would give it, `service_gate`) and
  `Redundancy` (coded tasks only where the queues leave room); `Memo` (a model memoised on inputs known up front:
  what the calibration runs in virtual time); a code's abilities come from its declared `gencc.codes.Capabilities`.

Sections: `serving.dispatch` (the extension API: the `Dispatcher` base, `Request`, `Env`, `RollingQuantile`),
`serving._policy` (the built-in policies, gate, slots, loop environment, simulator), `serving._http` (the app,
its limits, the request schemas), `serving.service` (assembly), `serving.config` (the scheme table).
The load generator is `gencc.loadgen`.
"""

from __future__ import annotations

from typing import Any

from ._http.limits import Limits, uvicorn_options
from ._policy.checked import CheckedDispatcher, ResultCheck
from ._policy.coded import CodedDispatcher
from ._policy.dispatchers import HedgedDispatcher, ReplicatedDispatcher, UncodedDispatcher
from ._policy.gate import CALIBRATION_RUNS, Gate, Memo, calibrate_gate, service_gate
from ._policy.redundancy import DEFAULT_REDUNDANCY, Redundancy
from ._policy.sim import simulate_load
from ._policy.slots import systematic_slots, worker_functions
from .config import CHECKS, SCHEME_TABLE, SCHEMES, Scheme, ServiceConfig, Slowdown
from .dispatch import Dispatcher, Env, Request, RollingQuantile
from .service import Service, freeze_heap, make_dispatcher

#: names served by the HTTP section, which imports FastAPI and pydantic: loaded on first use
_HTTP = {"create_app": "app", "start_in_thread": "app", "check_model_name": "v2"}


def __getattr__(name: str) -> Any:
    if name in _HTTP:
        from importlib import import_module

        return getattr(import_module(f"._http.{_HTTP[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CALIBRATION_RUNS", "CHECKS", "DEFAULT_REDUNDANCY", "SCHEMES", "SCHEME_TABLE", "CheckedDispatcher",
    "CodedDispatcher", "Dispatcher", "Env", "Gate", "HedgedDispatcher", "Limits", "Redundancy", "ReplicatedDispatcher",
    "Request", "ResultCheck", "RollingQuantile", "Scheme", "Service", "ServiceConfig", "Slowdown",
    "Memo", "UncodedDispatcher", "calibrate_gate", "create_app", "freeze_heap", "make_dispatcher", "service_gate",
    "simulate_load", "start_in_thread", "systematic_slots", "uvicorn_options", "worker_functions",
    "check_model_name",
]
