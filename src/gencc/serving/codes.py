"""The code each coded serving scheme runs on its groups of K requests, with the user's code options."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..codes.base import Code
from ..codes.registry import code_spec, make_code
from ..codes.schemes import check_code_options as takes_none
from .parity import coded_workers, sgcc_parity_code


def check_code_options(sch: Any, K: int, workers: int, options: Mapping[str, Any]) -> None:  # noqa: N803
    """Refuse code options scheme `sch` (its `gencc.serving.config.Scheme` entry) cannot take (a ValueError saying
    why): the baselines code nothing, the parity schemes' codes follow from their parity model
    (`gencc.codes.schemes.check_code_options`); for the others, the code is built once with them."""
    if not options:
        return
    takes_none(sch.name, options, "serving")
    N = coded_workers(K, workers)  # noqa: N806
    if N > K:  # else the worker count's own error comes first, where the service is built
        scheme_code(sch, K, N, options=options)


def scheme_code(sch: Any, K: int, N: int, *, parm_k: int = 2, parity: Callable | None = None,  # noqa: N803
                calibration: dict[str, float] | None = None, options: Mapping[str, Any] | None = None) -> Code:
    """The code of coded scheme `sch` (its `Scheme` entry) for groups of K on N workers (ParM: parm_k inputs per
    parity query).

    GCC reads with its interpolating decoder: 'select' (GCC's default at N <= 1.5 K) picks per decode by
    leave-one-out, 13-39 ms on the first decode of a pattern, on every request's path. BACC sits on GCC's nested
    worker points, so that K slots are systematic. `options` (gcc, bacc, sgcc): keyword arguments of the code,
    over those defaults."""
    opts = dict(options or {})
    if sch.code == "parm":
        return make_code("parm", parm_k, k=parm_k, parity=parity)
    if sch.parity:  # sgcc-parity
        return sgcc_parity_code(K, N, parity, calibration)
    if sch.code == "gcc":
        return make_code("gcc", K, N, **{"decoder": "interpolate", **opts})
    if sch.code == "bacc":
        if opts:  # the registry's checks: it refuses an option BACC does not take
            private = make_code("bacc", K, N, **opts)
            if private.colluders:  # a private BACC keeps its workers off the data points (no systematic slots)
                return private
        return code_spec("bacc").cls(K, N, beta=make_code("gcc", K, N).beta, **opts)
    return make_code(sch.code, K, N, **opts)
