"""Stragglers for training, all from `gencc.faults`: what `train(stragglers=...)` accepts and the text form the
command line uses.

- an int S: each step S workers drawn at random (seeded) are held back `delay_s` seconds (transient);
- a `gencc.faults.LatencyModel` (`Bimodal` for Bernoulli stragglers, `ShiftedExponential`, `Pareto`): each
  worker's delivery delay drawn afresh every step (transient);
- `gencc.faults.PersistentStragglers`: the same slow workers for long periods (compute and service slowed);
- `gencc.faults.Faults`: raise / NaN / hang / crash; a failed worker is a straggler, never a crash of the master;
- a list or tuple of these, combined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..faults import Bimodal, Faults, LatencyModel, Pareto, PersistentStragglers, ShiftedExponential, draw_delays


@dataclass
class Injection:
    """The parsed straggler spec: per-step `count` workers held `delay_s`, a latency model, persistent slow
    periods, faults; `expected` the stragglers per step a scheme should plan for (its S, unless given)."""

    count: int = 0
    delay_s: float = 0.0
    latency: LatencyModel | None = None
    persistent: PersistentStragglers | None = None
    faults: Faults | None = None
    expected: int = 0

    def delays(self, N: int, rng: np.random.Generator) -> np.ndarray:
        """This step's per-worker delivery delays (seconds)."""
        d = draw_delays(self.latency, N, rng)
        if self.count:
            d[rng.choice(N, size=self.count, replace=False)] += self.delay_s
        return d


def injection(spec: Any, N: int, delay_s: float = 0.05) -> Injection:
    """An `Injection` from `train`'s `stragglers=` (see the module docstring); ValueError on anything else."""
    inj = Injection(delay_s=float(delay_s))
    items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    for item in items:
        if item is None:
            continue
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer, LatencyModel,
                                                                         PersistentStragglers, Faults)):
            raise ValueError("stragglers must be an int S (S random workers held back each step), a "
                             "gencc.faults LatencyModel, PersistentStragglers, Faults, or a list of these; got "
                             f"{item!r}")
        if isinstance(item, (int, np.integer)):
            if not 0 <= int(item) < N:
                raise ValueError(f"stragglers as a count must lie in [0, N - 1 = {N - 1}] (N = workers), got {item}")
            inj.count = int(item)
            inj.expected = max(inj.expected, int(item))
        elif isinstance(item, LatencyModel):
            inj.latency = item
            if isinstance(item, Bimodal):
                inj.expected = max(inj.expected, math.ceil(item.p * N))
        elif isinstance(item, PersistentStragglers):
            if len(item._rng) < N:
                raise ValueError(f"PersistentStragglers was built for {len(item._rng)} workers, fewer than N={N}")
            inj.persistent = item
            inj.expected = max(inj.expected, math.ceil(item.fraction * N))
        else:
            inj.faults = item
            p = item.raise_p + item.nan_p + item.hang_p + item.crash_p
            inj.expected = max(inj.expected, math.ceil(p * N))
    inj.expected = min(inj.expected, N - 1)
    return inj


def _options(kind: str, text: str, allowed: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        key, eq, val = part.partition("=")
        if not eq or key not in allowed:
            raise ConfigError(f"{kind}: options are {', '.join(allowed)} as key=value, got {part!r}", "stragglers")
        try:
            out[key] = float(val)
        except ValueError:
            raise ConfigError(f"{kind}: {key} must be a number, got {val!r}", "stragglers") from None
    return out


#: the parts of the command line's --stragglers: each kind's options and what it builds
_PARTS: dict[str, tuple[tuple[str, ...], Any]] = {
    "bernoulli": (("p", "factor", "base"), Bimodal),
    "exp": (("shift", "rate"), ShiftedExponential),
    "pareto": (("x_m", "a"), Pareto),
    "persistent": (("fraction", "factor", "mean_slow_s"), PersistentStragglers),
    "faults": (("raise_p", "nan_p", "hang_p", "crash_p", "hang_s"), Faults),
}


def parse_stragglers(text: str, N: int, seed: int = 0) -> list[Any]:
    """The command line's --stragglers: parts joined by '+', each an int S, `bernoulli:p=,factor=,base=`
    (a Bimodal latency), `exp:shift=,rate=`, `pareto:x_m=,a=`, `persistent:fraction=,factor=,mean_slow_s=`, or
    `faults:raise_p=,nan_p=,hang_p=,crash_p=,hang_s=`. A part it cannot read, or a value its model refuses,
    raises a `gencc.errors.ConfigError` naming "stragglers" (the message names the part)."""
    out: list[Any] = []
    for part in filter(None, str(text).split("+")):
        kind, _, opts = part.strip().partition(":")
        if kind.isdigit():
            out.append(int(kind))
            continue
        if kind not in _PARTS:
            raise ConfigError(f"unknown part {part!r}; use an int S, bernoulli:, exp:, pareto:, persistent: or "
                              "faults: (joined by '+')", "stragglers")
        allowed, build = _PARTS[kind]
        o = _options(kind, opts, allowed)
        try:
            out.append(PersistentStragglers(N, seed=seed, **o) if build is PersistentStragglers else build(**o))
        except ValueError as e:
            raise ConfigError(f"{kind}: {e}", "stragglers") from None
    return out
