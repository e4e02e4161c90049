"""The one table of schemes: every scheme gencc runs, by name, with its code (a name in `gencc.codes.registry`) when
it is coded, the front ends that take it and, for a baseline, its kind.

The front ends read their lists from here: `schemes("jobs")` is what `gencc run` and `gencc.runtime` jobs take,
`schemes("serving")` what a service takes (`gencc.serving.SCHEMES`, `gencc serve --scheme`), `schemes("training")`
what `gencc train` takes (`gencc.training.TRAINING_SCHEMES`) and `schemes("sweeps")` what the sweeps simulate
(`gencc sweep --scheme`: every code of the registry).

    >>> schemes("jobs")
    ('uncoded', 'replication', 'hedged', 'parm', 'bacc', 'gcc', 'sgcc')
    >>> scheme_spec("gcc-hedge").code
    'gcc'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .registry import CODES

#: the front ends that take schemes: jobs (`gencc.runtime`, `gencc run`), serving (`gencc.serving`, `gencc serve`),
#: training (`gencc.training`, `gencc train`) and sweeps (`gencc.experiments`, `gencc sweep`)
FRONTS = ("jobs", "serving", "training", "sweeps")


@dataclass(frozen=True)
class SchemeSpec:
    """A scheme: its `name`; `code`, the registry name of the code it runs (None: it codes nothing); `fronts`, the
    front ends that take it; `baseline`, how a baseline sends its work (None: a coded scheme): uncoded,
    replication, hedged (jobs and serving), sync, ignore, gc, agc (training); `parity`: its code's parity workers
    run a trained parity model; `hedge`: serving sends its coded tasks only to cover late requests."""

    name: str
    code: str | None = None
    fronts: tuple[str, ...] = ()
    baseline: str | None = None
    parity: bool = False
    hedge: bool = False

    def __post_init__(self):
        if self.code is not None and self.code not in CODES:
            raise ValueError(f"scheme {self.name!r} names code {self.code!r}, not in gencc.codes.registry")
        unknown = sorted(set(self.fronts) - set(FRONTS))
        if unknown:
            raise ValueError(f"scheme {self.name!r} names unknown front end(s) {', '.join(unknown)}")

    @property
    def coded(self) -> bool:
        """Whether jobs and serving run it through its code (a baseline sends plain copies)."""
        return self.code is not None and self.baseline is None

    def takes_code_options(self, front: str) -> bool:
        """Whether the user's code options apply to it on `front`: a sweep builds any code with them; jobs and
        serving take them for the coded schemes without a parity model (a parity scheme's code follows from
        its parity model)."""
        if front == "sweeps":
            return self.code is not None
        return self.coded and not self.parity


_J, _S, _T, _W = FRONTS
#: every scheme by name (serving's order first: the baselines, the coded schemes, the coded hedges)
SCHEME_SPECS: dict[str, SchemeSpec] = {s.name: s for s in (
    SchemeSpec("uncoded", None, (_J, _S), "uncoded"),
    SchemeSpec("replication", "replication", (_J, _S, _W), "replication"),
    SchemeSpec("hedged", None, (_J, _S), "hedged"),
    SchemeSpec("parm", "parm", (_J, _S, _W), parity=True),
    SchemeSpec("bacc", "bacc", (_J, _S, _T, _W)),
    SchemeSpec("gcc", "gcc", (_J, _S, _T, _W)),
    SchemeSpec("sgcc", "sgcc", (_J, _S, _W)),
    SchemeSpec("sgcc-parity", "sgcc", (_S,), parity=True),
    SchemeSpec("gcc-hedge", "gcc", (_S,), hedge=True),
    SchemeSpec("sgcc-hedge", "sgcc", (_S,), hedge=True),
    SchemeSpec("sgcc-parity-hedge", "sgcc", (_S,), parity=True, hedge=True),
    SchemeSpec("parm-hedge", "parm", (_S,), parity=True, hedge=True),
    SchemeSpec("lcc", "lcc", (_W,)),
    SchemeSpec("sync", None, (_T,), "sync"),
    SchemeSpec("ignore", None, (_T,), "ignore"),
    SchemeSpec("gc", None, (_T,), "gc"),
    SchemeSpec("agc", None, (_T,), "agc"),
)}


def _check_front(front: str) -> str:
    if front not in FRONTS:
        raise ValueError(f"unknown front end {front!r}; choose one of {', '.join(FRONTS)}")
    return front


def schemes(front: str) -> tuple[str, ...]:
    """The names of the schemes `front` takes, in the table's order."""
    _check_front(front)
    return tuple(n for n, s in SCHEME_SPECS.items() if front in s.fronts)


def scheme_spec(name: str, front: str | None = None) -> SchemeSpec:
    """The table entry of scheme `name`; with `front`, one that front end takes (a ValueError listing them)."""
    valid = schemes(front) if front is not None else tuple(SCHEME_SPECS)
    if not isinstance(name, str) or name not in valid:
        raise ValueError(f"unknown scheme {name!r}; choose one of {', '.join(valid)}")
    return SCHEME_SPECS[name]


def check_code_options(name: str, options: Mapping[str, Any] | Any, front: str) -> None:
    """Refuse code options (any non-empty `options`) for a scheme of `front` that takes none, saying why: a
    baseline codes nothing; a parity scheme's code follows from its parity model (jobs, serving)."""
    spec = scheme_spec(name, front)
    if not options or spec.takes_code_options(front):
        return
    takers = ", ".join(n for n in schemes(front) if SCHEME_SPECS[n].takes_code_options(front))
    why = (f"{name} is a baseline and runs no code" if not spec.coded else
           f"{name}'s code follows from its parity model")
    raise ValueError(f"code options apply to the coded schemes without a parity model ({takers}); {why}")


def option_code(name: str) -> str:
    """The registry code whose options `name.key=value` sets: `name` itself when it is a code, else the code of
    scheme `name` (gcc-hedge: gcc)."""
    if name in CODES:
        return name
    spec = SCHEME_SPECS.get(name)
    if spec is None or spec.code is None:
        raise ValueError(f"{name!r} is neither a code nor a coded scheme; codes: {', '.join(CODES)}")
    return spec.code
