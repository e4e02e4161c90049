"""The one place experiments construct codes, so the math layer's defaults (GCC's in particular) flow through."""

from __future__ import annotations

import inspect
from typing import Any

import gencc

#: scheme names the sweeps understand
SCHEMES = ("gcc", "bacc", "lcc", "replication")


def make_code(scheme: str, K: int, N: int, **opts: Any) -> gencc.Code:
    """A code for `scheme` with K inputs on N workers; `opts` are passed on, and omitted ones keep the defaults
    of the math layer (so `make_code("gcc", K, N)` is exactly `gencc.GCC(K, N)`)."""
    cls = {"gcc": gencc.GCC, "bacc": gencc.BACC, "lcc": gencc.LCC, "replication": gencc.Replication}.get(scheme)
    known = [p for p in inspect.signature(cls).parameters if p not in ("K", "N")] if cls else []
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ValueError(f"{scheme} has no option {', '.join(unknown)}; its options are {', '.join(known) or 'none'}")
    if scheme == "gcc":
        return gencc.GCC(K, N, **opts)
    if scheme == "bacc":
        return gencc.BACC(K, N, **opts)
    if scheme == "lcc":
        if "degree" not in opts:
            raise ValueError("lcc needs the degree of f: pass degree=... in the code options")
        return gencc.LCC(K, N, **opts)
    if scheme == "replication":
        return gencc.Replication(K, N, **opts)
    raise ValueError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")


def scheme_label(scheme: str, opts: dict[str, Any] | None = None) -> str:
    """The name a scheme with options carries in tables: `gcc`, or `gcc[lam_dec=0]` with options."""
    if not opts:
        return scheme
    return scheme + "[" + ",".join(f"{k}={opts[k]}" for k in sorted(opts)) + "]"
