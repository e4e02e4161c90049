"""Serving in front of model replicas gencc does not run (`ServiceConfig(upstreams=[...])`, `gencc serve
--upstream URL`): which inputs the schemes can code over them, and the model a service describes from their
metadata.

The workers are the replicas (`gencc.engine.remote`: one worker per upstream), so every scheme that sends the
model's own inputs or real-valued mixes of them works as usual: uncoded (a least-loaded proxy), replication,
hedged, and the coded schemes gcc, bacc, sgcc and their -hedge forms, whose coded inputs are float tensors the
replicas compute on like any input. Not over upstreams: the parity schemes (parm, sgcc-parity), whose coded slots
run a trained parity model the replicas do not hold; and any coded scheme over integer inputs (a mix of inputs
is not an input of an integer model: copies, hedging and replication only).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..engine.remote import Fleet, check_fleet
from ..errors import ConfigError
from ..model import Model, load_inputs
from .config import BASELINES


def check_codable(fleet: Fleet, scheme: str) -> None:
    """A coded scheme needs float inputs; a `ConfigError` naming "scheme" says which schemes integer inputs take."""
    if scheme in BASELINES or fleet.codable:
        return
    t = fleet.signature.input
    raise ConfigError(f"{scheme} sends coded inputs (real-valued mixes of inputs), which input {t.name} "
                      f"({t.datatype}) of the upstreams cannot carry; integer inputs take only copies, hedging and "
                      f"replication: --scheme {', '.join(BASELINES)}", "scheme")


def upstream_model(upstreams: Iterable[str], scheme: str, *, workload: Any = None, data: Any = None,
                   parity: Any = None, start_degraded: bool = False) -> tuple[Fleet, Model, Any]:
    """(the fleet checked, its `Model`, the training inputs of `data` or None) for a service over `upstreams`:
    the replicas' metadata read and compared (`gencc.engine.remote.check_fleet`), the scheme checked against
    their inputs (`ServiceConfig` refused the parity schemes over upstreams already). A ValueError when a workload
    or parity model is given too (the replicas hold the model)."""
    if workload is not None:
        raise ConfigError("a service over upstreams serves the replicas' model: give no workload or model", "upstreams")
    if parity is not None:
        raise ConfigError("a parity model runs on gencc's own workers, not over upstreams", "scheme")
    fleet = check_fleet(upstreams, allow_degraded=start_degraded)
    check_codable(fleet, scheme)
    model = fleet.model()
    X = None if data is None else load_inputs(data, model.in_shape)
    return fleet, model, X
