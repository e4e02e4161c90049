"""The one list of codes: name -> class and keyword options, read by `gencc info`, the experiments and `gencc run`.

`make_code(name, K, N, **options)` builds a code by name and refuses unknown names and unknown or ill-typed
options with a message listing the valid ones; `parse_option` turns an option's text (a command line's
`gcc.lam_dec=gcv`) into the value its type wants.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._util.validate import check_int, check_real
from ..rkhs.kernels import KERNELS
from ..rkhs.points import DESIGNS, NESTED
from .base import Code
from .berrut import BACC
from .gcc import GCC
from .lagrange import LCC
from .parm import ParM
from .private import DEFAULT_MASK_SCALE
from .replication import Replication
from .systematic import SystematicGCC

#: a parameter with no default must be given
REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """A keyword option of a code. `type` is one of int, count (an integer >= 0), seed (an integer >= 0 or None),
    float, float|gcv|loo, positive|auto, choice, callable."""

    name: str
    type: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        kind = "|".join(self.choices) if self.type == "choice" else self.type
        default = "required" if self.required else f"default {self.default!r}"
        return f"{self.name} ({kind}, {default}): {self.help}"

    def accepts(self) -> str:
        """The values this option takes, in a command line's words: "a number >= 0, gcv or loo"."""
        if self.type == "choice":
            return "one of " + ", ".join(self.choices)
        return {"int": "an integer >= 1", "count": "an integer >= 0", "seed": "an integer >= 0 or none",
                "float": "a number >= 0", "float|gcv|loo": "a number >= 0, gcv or loo",
                "positive|auto": "a number > 0 or auto"}.get(self.type, "a callable (no text form)")

    def check(self, code: str, value: Any) -> Any:
        """`value` checked against this parameter's type (a ValueError names the code and the option)."""
        try:
            return self._check(code, value)
        except ValueError as e:
            if not isinstance(value, str) or self.type == "choice":
                raise
            # a number's text ("0.1", or "abc" from a command line) is read by parse_option, which names the values
            # the option takes; "convert it first" would fail on text that is no number
            why = str(e).split("; convert it first")[0]
            raise ValueError(f"{why}; pass the value itself, or read a command line's text with "
                             f"parse_option({code!r}, {self.name!r}, text)") from None

    def _check(self, code: str, value: Any) -> Any:
        label = f"{code} option {self.name}"
        if self.type == "int":
            return check_int(label, value, 1)
        if self.type == "count":
            return check_int(label, value, 0)
        if self.type == "seed":
            return check_int(label, value, 0, optional=True)
        if self.type == "float":
            return check_real(label, value, 0.0)
        if self.type == "float|gcv|loo":
            if isinstance(value, str) and value in ("gcv", "loo"):
                return value
            return check_real(label, value, 0.0, what="a finite non-negative number, 'gcv' or 'loo'")
        if self.type == "positive|auto":
            if isinstance(value, str) and value == "auto":
                return value
            return check_real(label, value, 0.0, lo_open=True, what="a positive number or 'auto'")
        if self.type == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"{label} must be one of {', '.join(self.choices)}, got {value!r}")
            return value
        if value is not None and not callable(value):
            raise ValueError(f"{label} must be a callable or None, got {type(value).__name__}")
        return value

    def parse(self, code: str, text: str) -> Any:
        """The value of this option written as text on a command line (`--opt code.name=text`); a ValueError in
        its words: "gcc.lam_dec takes a number >= 0, gcv or loo; got 'abc'"."""
        if self.type == "callable":
            raise ValueError(f"{code}.{self.name} is a callable and has no text form: {self.help}")
        try:
            if self.type in ("int", "count"):
                return self.check(code, int(text))
            if self.type == "seed":
                return self.check(code, None if text.lower() == "none" else int(text))
            if self.type == "float" or (self.type == "float|gcv|loo" and text not in ("gcv", "loo")) \
                    or (self.type == "positive|auto" and text != "auto"):
                return self.check(code, float(text))
            return self.check(code, text)
        except ValueError:
            raise ValueError(f"{code}.{self.name} takes {self.accepts()}; got {text!r}") from None


@dataclass(frozen=True)
class CodeSpec:
    """A code by name: its class, a one-line summary, its keyword options. `fixed_N`: N follows from K and
    the options (ParM), so make_code checks a given N against it instead of passing it on."""

    name: str
    cls: type[Code]
    summary: str
    params: tuple[Param, ...] = ()
    fixed_N: Callable[[int, dict], int] | None = None  # noqa: N815 - N is the paper's name

    def param(self, key: str) -> Param:
        for p in self.params:
            if p.name == key:
                return p
        valid = ", ".join(p.name for p in self.params) or "none"
        raise ValueError(f"{self.name} has no option {key!r}; its options: {valid}")


_LAM = "penalty weight of the {} fit (0 interpolates)"
#: the options of a private code (gencc.codes.private), shared by GCC, BACC and LCC
PRIVATE = (
    Param("colluders", "count", 0, "private against this many colluding workers: T Gaussian masks interpolated "
          "with the inputs, fresh every call (0: not private)"),
    Param("mask_scale", "float", DEFAULT_MASK_SCALE, "the masks' standard deviation over the inputs' root mean "
          "square (larger: less leakage, less accuracy)"),
    Param("seed", "seed", None, "seed of the masks' generator (none: fresh entropy)"),
)
CODES: dict[str, CodeSpec] = {spec.name: spec for spec in (
    CodeSpec("gcc", GCC, "general coded computing: RKHS (smoothing-spline) encoder and decoder", (
        Param("kernel", "choice", "auto", "RKHS kernel (auto: Matern 3/2 up to 512 points, then the cubic spline)",
              ("auto", *KERNELS)),
        Param("length_scale", "positive|auto", "auto", "the auto kernel's length scale on [-1, 1] (auto: 0.3, or "
              "2.4 / K where longer and N >= 4 K; 0.15 with colluders)"),
        Param("lam_enc", "float", 0.0, _LAM.format("encoder")),
        Param("lam_dec", "float|gcv|loo", 0.0, _LAM.format("decoder") + "; gcv or loo choose it per pattern"),
        Param("alpha", "choice", "chebyshev1", "data points", DESIGNS),
        Param("beta", "choice", "chebyshev2-nested", "worker points (-nested: a worker on each data point)",
              (*DESIGNS, *NESTED)),
        Param("decoder", "choice", "auto", "interpolate, or select (per decode, the best of three readings by "
              "leave-one-out; auto: select for K < N <= 1.5K)", ("auto", "interpolate", "select")),
        Param("gaps", "choice", "auto", "auto: a bounded reading of the data points in gaps of returned workers "
              "that hold 3 or more (2 beyond the outermost one when N <= 4K) for K >= 16, the fit elsewhere; bridge: "
              "of gaps that hold 2 or more; fit: the fit everywhere (safer worst case at high straggler fractions: "
              "auto)",
              ("auto", "fit", "bridge")),
        *PRIVATE,
    )),
    CodeSpec("bacc", BACC, "Berrut approximated coded computing (rational interpolation)", PRIVATE),
    CodeSpec("lcc", LCC, "Lagrange coded computing, exact for polynomial f", (
        Param("degree", "int", REQUIRED, "the degree of polynomial f (decodes from (K+colluders-1) degree + 1 "
              "results)"),
        *PRIVATE,
    )),
    CodeSpec("replication", Replication, "each input on about N/K workers; the first replica wins"),
    CodeSpec("parm", ParM, "parity models: k inputs per group plus one parity query (N = K + ceil(K/k))", (
        Param("k", "int", 2, "inputs per parity group"),
        Param("parity", "callable", None, "the parity model F_P, None: f itself (exact for linear f only); "
              "build it with gencc.workloads.load_parity(workload, k) (packed=True: queries are the k inputs "
              "stacked); `gencc sweep` and `gencc run` build the plain one for their workload"),
    ), fixed_N=lambda K, opts: K + math.ceil(K / opts.get("k", 2))),
    CodeSpec("sgcc", SystematicGCC, "systematic GCC for low redundancy (N <= 2K): K raw inputs, coded group "
             "means, kriging decoder", (
        Param("rho", "float", SystematicGCC.__init__.__kwdefaults__["rho"],
              "coded results' residual variance relative to the prior's (SystematicGCC.calibrated fits it)"),
        Param("kernel", "choice", "auto", "prior kernel over the inputs (auto: Matern 3/2)", ("auto", *KERNELS)),
        Param("parity", "callable", None, "a parity model run by the coded workers (gencc.workloads.load_parity; "
              "packed=True sends each its group's inputs stacked); None: f itself"),
    )),
)}


def code_spec(name: str) -> CodeSpec:
    """The registry entry of code `name`."""
    if not isinstance(name, str) or name not in CODES:
        raise ValueError(f"unknown code {name!r}; choose one of {', '.join(CODES)}")
    return CODES[name]


def make_code(name: str, K: int, N: int | None = None, **options: Any) -> Code:
    """The code `name` for K inputs on N workers with keyword `options` (omitted ones keep the class's
    defaults, so `make_code("gcc", K, N)` is `GCC(K, N)`). For ParM N follows from K and k: None, or that N."""
    spec = code_spec(name)
    opts = {key: spec.param(key).check(name, v) for key, v in options.items()}
    missing = [p.name for p in spec.params if p.required and p.name not in opts]
    if missing:
        raise ValueError(f"{name} needs option(s) {', '.join(missing)}: "
                         + "; ".join(spec.param(m).describe() for m in missing))
    if spec.fixed_N is not None:
        K = check_int("K", K, 1)
        want = spec.fixed_N(K, opts)
        if N is not None and N != want:
            raise ValueError(f"{name} with K={K} and these options runs on N={want} workers, got N={N}; "
                             f"pass N={want} or None")
        return spec.cls(K, **opts)
    if N is None:
        raise ValueError(f"{name} needs N, the number of workers")
    return spec.cls(K, N, **opts)


def parse_option(name: str, key: str, text: str) -> Any:
    """Option `key` of code `name` from its text form (`lam_dec`, "gcv" -> "gcv"; `degree`, "2" -> 2); a
    ValueError naming the values it takes ("gcc.lam_dec takes a number >= 0, gcv or loo; got 'abc'")."""
    return code_spec(name).param(key).parse(name, text)
