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

from .._util.validate import check_int, check_nonneg, check_positive, check_real
from ..codes.registry import CODES
from ..codes.schemes import SCHEME_SPECS, SchemeSpec, scheme_spec, schemes
from ..engine.backends import BACKENDS
from ..errors import ConfigError
from ..faults import PersistentStragglers, ServiceTimes

#: wrong-result checks (gencc.serving._policy.checked): none, answers after the check, or every answer checked
CHECKS = ("off", "on", "strict")
#: the gate on decoded answers (gencc.serving._policy.gate): on (calibrated per model on training inputs) or off
GATES = ("on", "off")
#: coded tasks of the eager coded schemes: adaptive (`gencc.serving.DEFAULT_REDUNDANCY`: only where the queues
#: leave room, late members still covered) or full (every coded task, whatever the load)
REDUNDANCIES = ("adaptive", "full")
#: where requests wait (`gencc.serving.dispatch.SCHEDULES`, or "auto": edf when a default deadline is set)
SCHEDULE_CHOICES = ("auto", "fifo", "edf")


@dataclass(frozen=True)
class Scheme:
    """A serving scheme: its dispatcher ("uncoded", "replication", "hedged" or "coded"); for a coded one the
    registry name of its code, whether its coded slots run a parity model, and "eager" or "hedge" dispatch;
    `bar`: what the gate frontier (benchmarks/investigations/gate.py) measured of its answers against the two
    serving targets (see BAR).
    Built from the one scheme table, `gencc.codes.schemes`."""

    name: str
    dispatcher: str
    code: str | None = None
    parity: bool = False
    mode: str = "eager"
    bar: str = ""  # whether it met the serving targets (docs/guides/serving.md), as measured

    def __post_init__(self):
        if self.code is not None and self.code not in CODES:
            raise ValueError(f"scheme {self.name!r} names code {self.code!r}, not in gencc.codes.registry")

    @property
    def checkable(self) -> bool:
        """Whether a wrong-result check covers it: an eager coded scheme whose groups are K requests (not ParM)."""
        return self.dispatcher == "coded" and self.mode == "eager" and self.code != "parm"


#: per scheme, what benchmarks/investigations/gate.py measured against two targets: top-1 agreement >= 0.95 with
#: the model's own answers of the degraded (decoded) answers sent, and p99.9 - p50 at most 0.3 of uncoded's; W = 12,
#: K = 8, 40 ms, 10% slow x10, load 0.3; the table: docs/generated/gate_frontier.md; the coded hedges sgcc-hedge
#: and sgcc-parity-hedge: gate_hedge.md
BAR = {
    "uncoded": "exact answers; the reference for the latency gap",
    "replication": "exact answers; not measured",
    "hedged": "exact answers; not measured",
    "parm": "not measured",
    "bacc": "its decodes miss the agreement target: the gate's calibration finds no threshold at which they agree "
            "at 0.95, so with the gate on it sends none (every answer is the model's own)",
    "gcc": "its decodes miss the agreement target: the gate's calibration finds no threshold at which they agree "
           "at 0.95, so with the gate on it sends none (every answer is the model's own)",
    "sgcc": "meets both targets with the gate, sending the decodes its calibration trusts (on some models none): "
            "the default without a parity model",
    "sgcc-parity": "meets both targets with the gate: the default with a parity model",
    "sgcc-hedge": "its decodes miss the agreement target: the gate's calibration finds no threshold at which they "
                  "agree at 0.95, so with the gate on it sends none (every answer is the model's own)",
    "sgcc-parity-hedge": "meets both targets with the gate (in the simulator)",
}


def _serving(spec: SchemeSpec) -> Scheme:
    """The serving entry of a scheme of the one table."""
    return Scheme(spec.name, spec.baseline or "coded", spec.code if spec.coded else None, spec.parity,
                  "hedge" if spec.hedge else "eager", BAR.get(spec.name, "not measured"))


#: every scheme by name, from the one scheme table (`gencc.codes.schemes`): the baselines, the coded schemes, then
#: the coded hedges
SCHEME_TABLE: dict[str, Scheme] = {name: _serving(SCHEME_SPECS[name]) for name in schemes("serving")}
#: the scheme a service gets when none is named: the one that meets both serving targets (BAR), with or without
#: a parity model
DEFAULTS = {True: "sgcc-parity", False: "sgcc"}


def default_scheme(parity: bool) -> str:
    """The default scheme for a model with (`parity`) or without a trained parity model."""
    return DEFAULTS[bool(parity)]


SCHEMES = tuple(SCHEME_TABLE)
#: the schemes a wrong-result check covers (bacc, gcc, sgcc, sgcc-parity); they also code groups of K requests
CHECKED_SCHEMES = tuple(n for n, s in SCHEME_TABLE.items() if s.checkable)
#: the schemes that send each request on its own (no coding group)
BASELINES = tuple(n for n, s in SCHEME_TABLE.items() if s.dispatcher != "coded")
#: `gencc serve --scheme`'s help: the names; what each does and what was measured of it (BAR) is the scheme table
#: of docs/guides/serving.md (tests/cli/test_serve.py holds it to BAR)
SCHEME_HELP = f"{', '.join(SCHEMES)} (docs: serving guide)"


def scheme(name: str) -> Scheme:
    """The table entry of scheme `name` (a ValueError listing the valid ones)."""
    return SCHEME_TABLE[scheme_spec(name, "serving").name]


def check_result_check(sch: Scheme, check: str) -> None:
    """A wrong-result check `sch` takes: one of CHECKS, and "on" / "strict" only for the eager coded schemes
    (CHECKED_SCHEMES); else a `ConfigError` naming "check". `ServiceConfig` and `make_dispatcher` both ask it."""
    if check not in CHECKS:
        raise ConfigError(f"unknown check {check!r}; choose one of {', '.join(CHECKS)}", "check")
    if check != "off" and not sch.checkable:
        raise ConfigError(f"wrong-result checks apply to the eager coded schemes {', '.join(CHECKED_SCHEMES)}, not "
                          f"{sch.name!r}", "check")


def check_workers(sch: Scheme, K: int, workers: int, parm_k: int = 2) -> None:
    """Enough workers for `sch`: two for replication, parm_k + 1 for parm, and more than K for the other coded
    schemes (their N = `gencc.serving.parity.coded_workers(K, workers)`, `check_coded_workers`); else a
    `ConfigError` naming "workers". `ServiceConfig` and `make_dispatcher` both ask it."""
    from .parity import check_coded_workers

    if sch.dispatcher == "replication" and workers < 2:
        raise ConfigError(f"replication sends two copies to distinct workers: needs workers >= 2, got {workers}",
                          "workers")
    if sch.code == "parm" and workers < parm_k + 1:
        raise ConfigError(f"parm with parm_k={parm_k} runs groups on {parm_k + 1} distinct workers; got "
                          f"workers={workers}", "workers")
    if sch.dispatcher == "coded" and sch.code != "parm":
        check_coded_workers(sch.name, K, workers)


@dataclass(frozen=True)
class ServiceConfig:
    """What a deployment chooses. max_wait_ms: a coded group's formation deadline; max_pending: admission bound
    (more requests in flight get a 503); check: wrong-result check (see `make_dispatcher`); packed_parity: the
    parity model takes each group's members stacked (parm, sgcc-parity schemes); gate: "on" sends a decoded
    answer only when its uncertainty says it is likely right (`gencc.serving._policy.gate`; coded schemes without a
    check), at `gate_threshold` or, when None, at the threshold calibrated on the model's training inputs;
    redundancy: the eager coded schemes' coded tasks, "adaptive" (only where the queues leave room) or "full";
    deadline_ms: the latency target of a request that carries none (None: only `request_timeout`): answered by
    it, exactly, or decoded from the results that arrived (`degraded`, where the gate trusts it), or 504;
    schedule: where requests wait, "edf" (earliest deadline first, in the dispatcher; a request whose deadline
    can no longer be met is answered 504 unrun), "fifo" (the workers' queues, in arrival order) or "auto" (edf
    when deadline_ms is set);
    code_options: keyword arguments of the code of gcc, bacc or sgcc (and their -hedge forms), a dict or
    (key, value) pairs, e.g. {"lam_dec": 0.01}; kept as sorted pairs;
    worker_placement, worker_cpus, worker_resources (backend ray): where the workers' actors run, "spread" across the
    nodes (and moved onto nodes that join) or "pack" (Ray's default; None: pack), the CPUs each reserves (None:
    none) and the custom resources each asks of its node, a dict or (name, amount) pairs, kept as sorted pairs
    (`gencc.engine.ray.placement.check_placement`)."""

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
    upstreams: tuple[str, ...] = ()
    start_degraded: bool = False
    deadline_ms: float | None = None
    schedule: str = "auto"
    worker_placement: str | None = None
    worker_cpus: float | None = None
    worker_resources: tuple[tuple[str, float], ...] = ()

    def __post_init__(self):
        with ConfigError.about("scheme"):
            sch = scheme(self.scheme)
        self._check_upstreams()
        for name, lo in (("workers", 1), ("K", 1), ("parm_k", 1), ("max_pending", 1), ("seed", 0)):
            with ConfigError.about(name):
                object.__setattr__(self, name, check_int(name, getattr(self, name), lo))
        with ConfigError.about("backend"):
            if self.backend not in BACKENDS:
                raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        with ConfigError.about("address"):
            if self.address is not None and self.backend != "ray":
                raise ValueError("address needs backend ray (the local backend runs its workers as threads in this "
                                 "process)")
        self._check_placement()
        with ConfigError.about("max_wait_ms"):
            object.__setattr__(self, "max_wait_ms", check_real("max_wait_ms", self.max_wait_ms, 0.0))
        with ConfigError.about("request_timeout"):
            object.__setattr__(self, "request_timeout", check_positive("request_timeout", self.request_timeout,
                                                                       unit="seconds"))
        with ConfigError.about("deadline_ms"):
            object.__setattr__(self, "deadline_ms", check_positive("deadline_ms", self.deadline_ms, optional=True,
                                                                   unit="milliseconds"))
        with ConfigError.about("schedule"):
            if self.schedule not in SCHEDULE_CHOICES:
                raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULE_CHOICES)}")
        check_result_check(sch, self.check)
        with ConfigError.about("gate"):
            if self.gate not in GATES:
                raise ValueError(f"unknown gate {self.gate!r}; choose one of {', '.join(GATES)}")
        with ConfigError.about("redundancy"):
            if self.redundancy not in REDUNDANCIES:
                raise ValueError(f"unknown redundancy {self.redundancy!r}; choose one of {', '.join(REDUNDANCIES)}")
        if self.gate_threshold is not None:
            with ConfigError.about("gate_threshold"):
                object.__setattr__(self, "gate_threshold", check_real("gate_threshold", self.gate_threshold, 0.0,
                                                                      finite=False))
        from .parity import PARITY_SCHEMES, parity_k

        with ConfigError.about("packed_parity"):
            if self.packed_parity and not sch.parity:
                raise ValueError(f"packed parity applies to the schemes with a parity model "
                                 f"({' and '.join(PARITY_SCHEMES)} and their -hedge forms), not {self.scheme!r}")
        check_workers(sch, self.K, self.workers, self.parm_k)
        with ConfigError.about("K"):
            parity_k(self.scheme, self.K, self.workers, self.parm_k)
        with ConfigError.about("code_options"):
            opts = self.code_options
            try:
                opts = tuple(sorted(dict(opts.items() if isinstance(opts, Mapping) else opts).items()))
            except (TypeError, ValueError):
                raise ValueError(f"code_options must be a dict of keyword arguments of the code, got {opts!r}"
                                 ) from None
            from .codes import check_code_options

            check_code_options(sch, self.K, self.workers, dict(opts))
        object.__setattr__(self, "code_options", opts)
        if dict(opts).get("colluders") and self.gate == "on":
            raise ConfigError("a private code (colluders) never sends a worker a plain input, and the gate answers "
                              "a decode it does not trust with a plain copy: every request it held would time "
                              "out; turn the gate off (each decode is then sent with its uncertainty)", "gate")

    @property
    def queueing(self) -> str:
        """The dispatcher's schedule: "edf" or "fifo" ("auto": edf when a default deadline is set)."""
        if self.schedule == "auto":
            return "edf" if self.deadline_ms is not None else "fifo"
        return self.schedule

    def _check_placement(self) -> None:
        """worker_placement, worker_cpus and worker_resources: checked, for backend ray only."""
        from ..engine.ray.placement import check_placement

        res = self.worker_resources
        with ConfigError.about("worker_resources"):
            if isinstance(res, dict):
                res = tuple(res.items())
            if not isinstance(res, tuple | list) or not all(isinstance(p, tuple | list) and len(p) == 2 for p in res):
                raise ValueError(f"worker_resources must map resource names to amounts, got {res!r}")
        given = [name for name, v in (("worker_placement", self.worker_placement), ("worker_cpus", self.worker_cpus),
                                      ("worker_resources", res)) if v not in (None, (), [])]
        if given and self.backend != "ray":
            raise ConfigError(f"{given[0]} places the workers' Ray actors: it needs backend ray", given[0])
        checked = check_placement(self.worker_placement, self.worker_cpus, dict(res))
        object.__setattr__(self, "worker_cpus", None if self.worker_cpus is None else checked.cpus)
        object.__setattr__(self, "worker_resources", tuple(sorted(checked.resources.items())))

    def _check_upstreams(self) -> None:
        """upstreams: the replicas' URLs, one worker each (`gencc.serving.upstreams`); they imply backend "remote"
        (the default "local" is read as it) and workers equal to their number."""
        if not self.upstreams:
            if self.backend == "remote":
                raise ConfigError("backend remote needs upstreams: the URLs of the model replicas, one per worker",
                                  "upstreams")
            if self.start_degraded:
                raise ConfigError("start_degraded applies with upstreams", "start_degraded")
            object.__setattr__(self, "upstreams", ())
            return
        from ..engine.remote import check_upstreams

        urls = tuple(u.url for u in check_upstreams(self.upstreams))  # one URL, or several
        object.__setattr__(self, "upstreams", urls)
        if self.backend not in ("local", "remote"):
            raise ConfigError(f"upstreams are the workers (backend remote); backend {self.backend!r} does not apply",
                              "backend")
        object.__setattr__(self, "backend", "remote")
        if self.workers != len(urls):
            raise ConfigError(f"over upstreams each worker is one replica: workers must be {len(urls)} (the number of "
                              f"upstreams) or left out, got {self.workers}", "workers")
        sch = scheme(self.scheme)
        if sch.parity or sch.code == "parm":
            usable = [n for n, s in SCHEME_TABLE.items() if not s.parity and s.code != "parm"]
            raise ConfigError(f"{self.scheme} runs a trained parity model on its coded slots, which the replicas do "
                              f"not hold; over upstreams choose {', '.join(usable)}", "scheme")


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
        with ConfigError.about("service_ms"):
            object.__setattr__(self, "service_ms", check_nonneg("service_ms", self.service_ms, unit="milliseconds"))
        with ConfigError.about("slow_fraction"):
            object.__setattr__(self, "slow_fraction", check_real(
                "slow_fraction", self.slow_fraction, 0.0, 1.0, hi_open=True, what="a probability in [0, 1)",
                hint="a worker slow all the time is a slower worker"))
        with ConfigError.about("slow_factor"):
            object.__setattr__(self, "slow_factor", check_real("slow_factor", self.slow_factor, 1.0))
        with ConfigError.about("mean_slow_s"):
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
    if cfg.get("upstreams") and "workers" not in cfg:  # over upstreams the workers are the replicas
        ups = cfg["upstreams"] = (cfg["upstreams"],) if isinstance(cfg["upstreams"], str) else tuple(cfg["upstreams"])
        cfg["workers"] = len(ups)
    slow = {k: v for k, v in options.items() if k in _SLOW}
    if config is not None and cfg:
        raise ValueError(f"pass the configuration once: config= or {', '.join(sorted(cfg))}")
    if slowdown is not None and slow:
        raise ValueError(f"pass the slowdown once: slowdown= or {', '.join(sorted(slow))}")
    return config or ServiceConfig(**cfg), slowdown or Slowdown(**slow)
