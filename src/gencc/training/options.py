"""The options of a training run and their one check, kept free of torch so the command line can check them (and
print its help) before it loads a model or its data.

    from gencc.training import TrainOptions
    opts = TrainOptions(scheme="gc", workers=8, stragglers=2, gc_kind="frc")   # a ConfigError: 3 does not divide 8
    train(model, data, **opts.kwargs())                                         # train checks them the same way

`TrainOptions` refuses a bad value with a `gencc.errors.ConfigError` whose `field` names the parameter of
`gencc.training.train` to fix; `train` and `make_plan` build one, so every check of an option lives here. What
needs the data (enough samples for K partitions, labels, the model's output) is checked by `train` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from .._util.validate import check_int, check_nonneg, check_positive, check_real
from ..codes.schemes import scheme_spec
from ..engine.backends import BACKEND_ALIASES
from ..errors import ConfigError
from .gradcodes import GC_KINDS
from .injection import Injection, injection

#: the optimizers `train` offers (from torch.optim)
OPTIMIZERS = ("sgd", "momentum", "adam")
#: the workloads `gencc train` knows
TRAIN_WORKLOADS = ("digits-cnn", "mnist1d-cnn", "digits-logreg")
#: where `train` runs its workers: the engine's threads ("local", also "threads") or one Ray actor each
TRAIN_BACKENDS = ("local", "ray")
#: how the K partitions are formed from the training set
PLACEMENTS = ("stratified", "by-label")
#: the slowdown of a persistent straggler while slow, when `slow_fraction` is given without `slow_factor`
DEFAULT_SLOW_FACTOR = 10.0


def check_choice(field: str, value: Any, choices: tuple[str, ...], what: str) -> str:
    """`value` if it is one of `choices`; else a ConfigError naming `field`: "unknown <what> 'x'; choose one of ..."."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"unknown {what} {value!r}; choose one of {', '.join(choices)}", field)
    return value


def check_workload(name: str) -> str:
    """`name` if it is one of TRAIN_WORKLOADS (the workloads `gencc train` and the benchmark train); else a
    ConfigError naming "workload"."""
    return check_choice("workload", name, TRAIN_WORKLOADS, "training workload")


def default_partitions(scheme: str, N: int, S: int) -> int:
    """K for the coded-placement schemes: ceil(N / (S + 1)), so each worker computes about (S + 1) times an
    uncoded shard's rows, as gradient coding with s = S does (equal compute); N for the others."""
    return max(1, math.ceil(N / (S + 1))) if scheme_spec(scheme, "training").coded else N


@dataclass(frozen=True)
class TrainOptions:
    """The options of `gencc.training.train` (its parameters of the same names, see there), checked when built: a
    bad value raises a `ConfigError` naming its field. Nothing here needs torch or the data.

    The checks: scheme, optimizer, gc_kind, placement and backend are known names (backend "threads" is read as
    "local"); workers, steps, eval_every >= 1; seed >= 0; batch_size >= 1 or None (full batch); lr, step_timeout
    > 0; sample_s, delay_s >= 0; stragglers a count in [0, workers - 1] or `gencc.faults` models
    (`gencc.training.injection`); tolerate in [0, workers - 1]; partitions in [1, workers], and only for the
    coded placements (gcc, bacc) unless it equals workers; gc with gc_kind "frc" needs tolerate + 1 to divide
    workers, agc needs replication to divide workers; slow_fraction in [0, 1), slow_factor >= 1 and only with
    slow_fraction > 0; address only with backend "ray", and a Ray address (auto, HOST:PORT, ray://HOST:PORT).

    slow_fraction / slow_factor: persistent stragglers (`gencc.faults.PersistentStragglers`, seeded by `seed`)
    added to `stragglers`: each worker slow about that fraction of the time, slow_factor (default 10) times
    slower while slow.

    code_options: keyword options of the coded placement's code (gcc, bacc only), checked by building it; with
    colluders=T (and mask_scale) the placement is private: every worker's shard carries random masks, so no T
    colluding workers see the data in the clear (`gencc.metrics.leakage_bits` measures what they learn)."""

    scheme: str = "sync"
    workers: int = 8
    stragglers: Any = 0
    steps: int = 100
    batch_size: int | None = None
    lr: float = 0.1
    seed: int = 0
    eval_every: int = 10
    track_grad_error: bool = False
    optimizer: str = "sgd"
    backend: str = "local"
    tolerate: int | None = None
    partitions: int | None = None
    gc_kind: str = "cyclic"
    replication: int = 2
    placement: str = "stratified"
    sample_s: float = 0.0
    delay_s: float = 0.05
    step_timeout: float = 60.0
    address: str | None = None
    slow_fraction: float = 0.0
    slow_factor: float | None = None
    code_options: dict[str, Any] | None = None

    def __post_init__(self):
        with ConfigError.about("scheme"):
            coded = scheme_spec(self.scheme, "training").coded
        for name, lo in (("workers", 1), ("steps", 1), ("eval_every", 1), ("seed", 0)):
            with ConfigError.about(name):
                self._set(name, check_int(name, getattr(self, name), lo))
        N = self.workers
        with ConfigError.about("batch_size"):
            self._set("batch_size", check_int("batch_size", self.batch_size, 1, optional=True,
                                              hint="None: the full training set each step"))
        with ConfigError.about("lr"):
            self._set("lr", check_positive("lr", self.lr))
        for name in ("sample_s", "delay_s"):
            with ConfigError.about(name):
                self._set(name, check_nonneg(name, getattr(self, name), unit="seconds"))
        with ConfigError.about("step_timeout"):
            self._set("step_timeout", check_positive("step_timeout", self.step_timeout, unit="seconds"))
        self._set("track_grad_error", bool(self.track_grad_error))
        check_choice("optimizer", self.optimizer, OPTIMIZERS, "optimizer")
        check_choice("gc_kind", self.gc_kind, GC_KINDS, "gradient code")
        check_choice("placement", self.placement, PLACEMENTS, "placement")
        backend = BACKEND_ALIASES.get(self.backend, self.backend) if isinstance(self.backend, str) else self.backend
        self._set("backend", check_choice("backend", backend, TRAIN_BACKENDS, "backend"))
        if self.address is not None:
            if self.backend != "ray":
                raise ConfigError("address needs backend ray (the local backend runs its workers as threads in this "
                                  "process)", "address")
            from ..engine.ray.backend import check_address  # imports no Ray

            with ConfigError.about("address"):
                check_address(self.address)
        inj = self._injection()
        if self.tolerate is not None:
            with ConfigError.about("tolerate"):
                self._set("tolerate", check_int("tolerate", self.tolerate, 0, N - 1,
                                                what=f"an integer in [0, N - 1 = {N - 1}] (N = workers)"))
        S = inj.expected if self.tolerate is None else self.tolerate
        if self.partitions is not None:
            with ConfigError.about("partitions"):
                K = check_int("partitions", self.partitions, 1, N, what=f"an integer in [1, N = {N}] (N = workers)")
            if not coded and K != N:
                raise ConfigError(f"partitions applies to gcc and bacc only ({self.scheme} uses one partition per "
                                  "worker, K = N)", "partitions")
            self._set("partitions", K)
        if self.scheme == "gc" and self.gc_kind == "frc" and N % (S + 1):
            raise ConfigError(f"gc_kind frc (fractional repetition) needs s + 1 to divide N: s + 1 = {S + 1} (s: the "
                              f"stragglers planned for) does not divide N = {N} workers; use gc_kind cyclic (any N), "
                              "or change workers or tolerate", "gc_kind")
        with ConfigError.about("replication"):
            r = check_int("replication", self.replication, 1, N, what=f"an integer in [1, N = {N}] (N = workers)")
        if self.scheme == "agc" and N % r:
            raise ConfigError(f"agc groups workers by r = replication = {r}, which must divide N = {N} (workers)",
                              "replication")
        self._set("replication", r)
        object.__setattr__(self, "_inj", inj)
        object.__setattr__(self, "_S", S)
        object.__setattr__(self, "_K", default_partitions(self.scheme, N, S) if self.partitions is None
                           else self.partitions)
        self._check_code_options(coded)

    def _check_code_options(self, coded: bool) -> None:
        """code_options: keyword options of the coded placement's code (gcc, bacc), checked by building it once
        (`gencc.codes.registry.make_code`), e.g. {"colluders": 1, "mask_scale": 16} for a private placement."""
        if not self.code_options:
            self._set("code_options", None)
            return
        if not isinstance(self.code_options, dict):
            raise ConfigError(f"code_options must be a dict of the code's keyword options, got "
                              f"{type(self.code_options).__name__}", "code_options")
        if not coded:
            raise ConfigError(f"code_options apply to the coded placements gcc and bacc, not {self.scheme} (it "
                              "builds no code)", "code_options")
        from ..codes.registry import make_code

        with ConfigError.about("code_options"):
            make_code(scheme_spec(self.scheme, "training").code, self.K, self.workers, **self.code_options)
        self._set("code_options", dict(self.code_options))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _injection(self) -> Injection:
        """The stragglers and the persistent slowness of slow_fraction / slow_factor, checked, as one Injection."""
        with ConfigError.about("slow_fraction"):
            self._set("slow_fraction", check_real("slow_fraction", self.slow_fraction, 0.0, 1.0, hi_open=True,
                                                  what="a probability in [0, 1)",
                                                  hint="a worker slow all the time is a slower worker"))
        if self.slow_factor is not None:
            with ConfigError.about("slow_factor"):
                self._set("slow_factor", check_real("slow_factor", self.slow_factor, 1.0))
            if self.slow_fraction == 0:
                raise ConfigError("slow_factor applies with slow_fraction > 0 (without it no worker is ever slow)",
                                  "slow_factor")
        from ..faults import PersistentStragglers

        spec = self.stragglers
        if self.slow_fraction > 0:
            items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
            if any(isinstance(s, PersistentStragglers) for s in items):
                raise ConfigError("slow_fraction adds persistent stragglers, and stragglers already holds a "
                                  "PersistentStragglers: give one of them", "slow_fraction")
            factor = DEFAULT_SLOW_FACTOR if self.slow_factor is None else self.slow_factor
            spec = [*items, PersistentStragglers(self.workers, self.slow_fraction, factor, seed=self.seed)]
        with ConfigError.about("stragglers"):
            return injection(spec, self.workers, self.delay_s)

    @property
    def injected(self) -> Injection:
        """What is injected each step: `stragglers` with the persistent stragglers of slow_fraction, parsed."""
        return self._inj  # type: ignore[attr-defined]

    @property
    def tolerance(self) -> int:
        """The stragglers per step the scheme plans for: `tolerate`, or the expected count of the stragglers."""
        return self._S  # type: ignore[attr-defined]

    @property
    def K(self) -> int:  # noqa: N802
        """The partitions of the data: `partitions`, or the scheme's default (`default_partitions`)."""
        return self._K  # type: ignore[attr-defined]

    @property
    def coded(self) -> bool:
        """Whether the scheme places coded data (gcc, bacc), the schemes `partitions` applies to."""
        return scheme_spec(self.scheme, "training").coded

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of `gencc.training.train`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
