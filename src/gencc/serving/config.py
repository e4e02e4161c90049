"""A service's configuration, apart from what is injected into it; the scheme table, built on the codes registry.

`ServiceConfig` holds what a deployment chooses (scheme, workers, K, backend, admission, timeouts, checks);
`Slowdown` the injected service time and persistent stragglers (`gencc.faults`) a test or benchmark adds;
faults and wrong results are passed to `Service.build` as `gencc.faults.Faults` / `WrongResults` objects.
Each scheme names its dispatcher and, for the coded ones, its code in `gencc.codes.registry` (`SCHEME_TABLE`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .._util.validate import check_int, check_nonneg, check_positive, check_probability, check_real
from ..codes.registry import CODES
from ..engine.backends import BACKENDS
from ..faults import PersistentStragglers, ServiceTimes

#: wrong-result checks (gencc.serving._policy.checked): none, answers after the check, or every answer checked
CHECKS = ("off", "on", "strict")
#: the gate on decoded answers (gencc.serving._policy.gate): on (calibrated per model on training inputs) or off
GATES = ("on", "off")
#: coded tasks of the eager coded schemes: adaptive (`gencc.serving.DEFAULT_REDUNDANCY`: only where the queues
#: leave room, late members still covered) or full (every coded task, whatever the load)
REDUNDANCIES = ("adaptive", "full")


@dataclass(frozen=True)
class Scheme:
    """A serving scheme: its dispatcher ("uncoded", "replication", "hedged" or "coded"); for a coded one the
    registry name of its code, whether its coded slots run a parity model, and "eager" or "hedge" dispatch;
    `bar`: what the gate frontier (benchmarks/gate.py) measured of it against the answer bar."""

    name: str
    dispatcher: str
    code: str | None = None
    parity: bool = False
    mode: str = "eager"
    bar: str = ""  # whether it meets the answer bar (docs/guides/serving.md), as measured

    def __post_init__(self):
        if self.code is not None and self.code not in CODES:
            raise ValueError(f"scheme {self.name!r} names code {self.code!r}, not in gencc.codes.registry")

    @property
    def checkable(self) -> bool:
        """Whether a wrong-result check covers it: an eager coded scheme whose groups are K requests (not ParM)."""
        return self.dispatcher == "coded" and self.mode == "eager" and self.code != "parm"


#: per scheme, what benchmarks/gate.py measured against the answer bar (top-1 agreement >= 0.95 of the degraded
#: answers sent, p99.9 - p50 at most 0.3 of uncoded's; W = 12, K = 8, 40 ms, 10% slow x10, load 0.3; the table:
#: docs/generated/gate_frontier.md; the coded hedges sgcc-hedge and sgcc-parity-hedge: gate_hedge.md)
BAR = {
    "uncoded": "exact answers; its tail is the bar's reference",
    "replication": "exact answers; not measured against the bar",
    "hedged": "exact answers; not measured against the bar",
    "parm": "not measured against the bar",
    "bacc": "cannot meet the bar with its decodes: the gate's calibration finds no threshold at which they agree "
            "at 0.95, so with the gate on it sends none (every answer is the model's own)",
    "gcc": "cannot meet the bar with its decodes: the gate's calibration finds no threshold at which they agree "
           "at 0.95, so with the gate on it sends none (every answer is the model's own)",
    "sgcc": "meets the bar with the gate, sending the decodes its calibration trusts (on some models none): the "
            "default without a parity model",
    "sgcc-parity": "meets the bar with the gate: the default with a parity model",
    "sgcc-hedge": "cannot meet the bar with its decodes: the gate's calibration finds no threshold at which they "
                  "agree at 0.95, so with the gate on it sends none (every answer is the model's own)",
    "sgcc-parity-hedge": "meets the bar with the gate (in the simulator)",
}


def _coded(name: str, code: str, parity: bool = False) -> tuple[Scheme, Scheme]:
    return (Scheme(name, "coded", code, parity, bar=BAR[name]),
            Scheme(f"{name}-hedge", "coded", code, parity, "hedge",
                   bar=BAR.get(f"{name}-hedge", "not measured against the bar")))


_eager_hedge = {s.name: s for pair in (_coded("parm", "parm", True), _coded("bacc", "bacc"), _coded("gcc", "gcc"),
                                       _coded("sgcc", "sgcc"), _coded("sgcc-parity", "sgcc", True)) for s in pair}
#: every scheme by name: the contract's schemes, then the coded hedges
SCHEME_TABLE: dict[str, Scheme] = {s.name: s for s in (
    *(Scheme(n, n, bar=BAR[n]) for n in ("uncoded", "replication", "hedged")),
    *(_eager_hedge[n] for n in ("parm", "bacc", "gcc", "sgcc", "sgcc-parity", "gcc-hedge", "sgcc-hedge",
                                "sgcc-parity-hedge", "parm-hedge")),
)}
#: the scheme a service gets when none is named: the one that meets the answer bar (BAR), with or without a
#: parity model
DEFAULTS = {True: "sgcc-parity", False: "sgcc"}


def default_scheme(parity: bool) -> str:
    """The default scheme for a model with (`parity`) or without a trained parity model."""
    return DEFAULTS[bool(parity)]


SCHEMES = tuple(SCHEME_TABLE)
#: the schemes a wrong-result check covers (bacc, gcc, sgcc, sgcc-parity); they also code groups of K requests
CHECKED_SCHEMES = tuple(n for n, s in SCHEME_TABLE.items() if s.checkable)
#: the schemes that send each request on its own (no coding group)
BASELINES = tuple(n for n, s in SCHEME_TABLE.items() if s.dispatcher != "coded")
#: `gencc serve --scheme`'s help: each scheme with what it measured against the answer bar
SCHEME_HELP = "; ".join(f"{n} ({s.bar})" for n, s in SCHEME_TABLE.items()) + \
    f". Default: {DEFAULTS[False]} ({DEFAULTS[True]} with a parity model)"


def scheme(name: str) -> Scheme:
    """The table entry of scheme `name` (a ValueError listing the valid ones)."""
    if not isinstance(name, str) or name not in SCHEME_TABLE:
        raise ValueError(f"unknown scheme {name!r}; choose one of {', '.join(SCHEMES)}")
    return SCHEME_TABLE[name]


@dataclass(frozen=True)
class ServiceConfig:
    """What a deployment chooses. max_wait_ms: a coded group's formation deadline; max_pending: admission bound
    (more requests in flight get a 503); check: wrong-result check (see `make_dispatcher`); packed_parity: the
    parity model takes each group's members stacked (parm, sgcc-parity schemes); gate: "on" sends a decoded
    answer only when its uncertainty says it is likely right (`gencc.serving._policy.gate`; coded schemes without a
    check), at `gate_threshold` or, when None, at the threshold calibrated on the model's training inputs;
    redundancy: the eager coded schemes' coded tasks, "adaptive" (only where the queues leave room) or "full";
    code_options: keyword arguments of the code of gcc, bacc or sgcc (and their -hedge forms), a dict or
    (key, value) pairs, e.g. {"lam_dec": 0.01}; kept as sorted pairs."""

    scheme: str = DEFAULTS[False]
    workers: int = 12
    K: int = 8
    backend: str = "local"
    address: str | None = None
    max_wait_ms: float = 50.0
    parm_k: int = 2
    max_pending: int = 1000
    request_timeout: float = 30.0
    seed: int = 0
    check: str = "off"
    packed_parity: bool = False
    gate: str = "on"
    gate_threshold: float | None = None
    redundancy: str = "adaptive"
    code_options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        scheme(self.scheme)
        object.__setattr__(self, "workers", check_int("workers", self.workers, 1))
        object.__setattr__(self, "K", check_int("K", self.K, 1))
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose local or ray")
        object.__setattr__(self, "max_wait_ms", check_real("max_wait_ms", self.max_wait_ms, 0.0))
        object.__setattr__(self, "parm_k", check_int("parm_k", self.parm_k, 1))
        object.__setattr__(self, "max_pending", check_int("max_pending", self.max_pending, 1))
        object.__setattr__(self, "request_timeout", check_positive("request_timeout", self.request_timeout,
                                                                   unit="seconds"))
        object.__setattr__(self, "seed", check_int("seed", self.seed, 0))
        if self.check not in CHECKS:
            raise ValueError(f"unknown check {self.check!r}; choose one of {', '.join(CHECKS)}")
        if self.gate not in GATES:
            raise ValueError(f"unknown gate {self.gate!r}; choose on or off")
        if self.redundancy not in REDUNDANCIES:
            raise ValueError(f"unknown redundancy {self.redundancy!r}; choose one of {', '.join(REDUNDANCIES)}")
        if self.gate_threshold is not None:
            object.__setattr__(self, "gate_threshold", check_real("gate_threshold", self.gate_threshold, 0.0,
                                                                               finite=False))
        opts = self.code_options
        try:
            opts = tuple(sorted(dict(opts.items() if isinstance(opts, Mapping) else opts).items()))
        except (TypeError, ValueError):
            raise ValueError(f"code_options must be a dict of keyword arguments of the code, got {opts!r}") from None
        from .codes import check_code_options

        check_code_options(scheme(self.scheme), self.K, self.workers, dict(opts))
        object.__setattr__(self, "code_options", opts)


@dataclass(frozen=True)
class Slowdown:
    """Injected slowness: a base service time of `service_ms` per task, and persistent stragglers (each worker
    slow about `slow_fraction` of the time, `slow_factor` times slower, slow periods of `mean_slow_s` on
    average)."""

    service_ms: float = 0.0
    slow_fraction: float = 0.0
    slow_factor: float = 10.0
    mean_slow_s: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "service_ms", check_nonneg("service_ms", self.service_ms, unit="milliseconds"))
        object.__setattr__(self, "slow_fraction", check_probability("slow_fraction", self.slow_fraction,
                                                                    below_one=True))
        object.__setattr__(self, "slow_factor", check_real("slow_factor", self.slow_factor, 1.0))
        object.__setattr__(self, "mean_slow_s", check_positive("mean_slow_s", self.mean_slow_s, unit="seconds"))

    def service_times(self) -> ServiceTimes:
        return ServiceTimes(self.service_ms / 1000)

    def stragglers(self, workers: int, seed: int) -> PersistentStragglers:
        return PersistentStragglers(workers, self.slow_fraction, self.slow_factor, self.mean_slow_s, seed=seed)


_CONFIG = {f.name for f in fields(ServiceConfig)}
_SLOW = {f.name for f in fields(Slowdown)}


def _split(config: ServiceConfig | None, slowdown: Slowdown | None, **options: Any) -> tuple[ServiceConfig, Slowdown]:
    """(config, slowdown) from the objects and/or their fields as keywords (None keywords are left out)."""
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - _CONFIG - _SLOW)
    if unknown:
        raise ValueError(f"unknown service option(s) {', '.join(unknown)}; configuration: "
                         f"{', '.join(sorted(_CONFIG))}; slowdown: {', '.join(sorted(_SLOW))}")
    cfg = {k: v for k, v in options.items() if k in _CONFIG}
    slow = {k: v for k, v in options.items() if k in _SLOW}
    if config is not None and cfg:
        raise ValueError(f"pass the configuration once: config= or {', '.join(sorted(cfg))}")
    if slowdown is not None and slow:
        raise ValueError(f"pass the slowdown once: slowdown= or {', '.join(sorted(slow))}")
    return config or ServiceConfig(**cfg), slowdown or Slowdown(**slow)
