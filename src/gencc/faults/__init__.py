"""Faults: every way a worker can fail a job, one injection family for every backend and simulator.

- `gencc.faults.injection` (re-exported here): latency models, persistent slow states, injected service times,
  raise / NaN / hang / crash faults, wrong results, and `run_injected`, the one place a worker applies them.
- `gencc.faults.stragglers`: straggler-set models (`FixedCount`, `Bernoulli`, `Collected`) and the worst-case
  search.
- `gencc.faults.adversaries`: wrong-but-finite result models (silent corruption, colluding adversaries).
"""

from ..errors import Cancelled, InjectedFault
from . import adversaries, stragglers
from .injection import (
    FAULTS,
    PER_RESULT,
    Bimodal,
    Faults,
    LatencyModel,
    Pareto,
    PersistentStragglers,
    ServiceTimes,
    ShiftedExponential,
    WrongResults,
    draw_delays,
    run_injected,
)

__all__ = ["FAULTS", "PER_RESULT", "Bimodal", "Cancelled", "Faults", "InjectedFault", "LatencyModel", "Pareto",
           "PersistentStragglers", "ServiceTimes", "ShiftedExponential", "WrongResults", "adversaries",
           "draw_delays", "run_injected", "stragglers"]
