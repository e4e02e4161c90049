"""The one place experiments construct codes: by name from the math layer's registry, so its defaults (GCC's in
particular) flow through, with ParM's parity model built for the workload at hand."""

from __future__ import annotations

from typing import Any

from gencc.codes import Code, make_code
from gencc.codes.schemes import scheme_spec, schemes

#: the schemes a sweep simulates, from the one scheme table (`gencc.codes.schemes`): every code of the registry
SWEEP_SCHEMES = schemes("sweeps")


def check_scheme(scheme: str) -> str:
    """`scheme` if a sweep simulates it (a ValueError listing those it does)."""
    return scheme_spec(scheme, "sweeps").name


def sweep_code(scheme: str, K: int, N: int, workload: str | None = None, **opts: Any) -> Code:
    """A code for `scheme` with K inputs on N workers; `opts` are checked by the registry, and omitted ones keep
    the defaults of the math layer (so `sweep_code("gcc", K, N)` is exactly `gencc.GCC(K, N)`); the sweeps' code
    names are the registry's (`gencc.codes.CODES`).

    ParM without a `parity` option gets the parity model trained for `workload` with its k
    (`gencc.workloads.load_parity`, cached); the analytic `toy-` workloads have none, so their parity workers
    run f itself (exact for linear f only).
    """
    code = scheme_spec(scheme, "sweeps").code
    if code == "parm" and "parity" not in opts and workload is not None and not workload.startswith("toy-"):
        from gencc.workloads import load_parity

        opts = {**opts, "parity": load_parity(workload, opts.get("k", 2), progress=False)}
    return make_code(code, K, N, **opts)


def scheme_label(scheme: str, opts: dict[str, Any] | None = None) -> str:
    """The name a scheme with options carries in tables: `gcc`, or `gcc[lam_dec=0]` with options."""
    if not opts:
        return scheme
    return scheme + "[" + ",".join(f"{k}={opts[k]}" for k in sorted(opts)) + "]"
