"""The reproducible experiments behind docs/: named sweep grids (PRESETS) and fixed tables (TABLE_PRESETS).

A sweep preset is a SweepSpec grid with the figure kinds it feeds; a table preset is a module of
`gencc.experiments.tables` that computes one claim table. `gencc.experiments.reproduce` runs either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from .sweep import SweepSpec
from .tables import TABLES

RATE_WORKLOADS = ("xsinx", "tanh-mlp", "digits-cnn")
RATE_RATIOS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: the fixed-fraction preset's worker counts (K = N/4 and N/2 of each)
FRACTION_N = (20, 40, 80, 120, 160, 200)


@dataclass(frozen=True)
class Preset:
    """A named grid (SweepSpec keyword arguments), the figure kinds it feeds, and what it is meant to show."""

    name: str
    description: str
    spec: dict[str, Any]
    kinds: tuple[str, ...]


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("rate-worst",
               "Worst-case stragglers at fixed S (S = 2 and S = 5), K = 10, N from 2K to 64K: rel_mse against N "
               "and its fitted slope (theory for GCC: O(S^3 N^-3)). One worst-case search per input draw (seed).",
               dict(workloads=RATE_WORKLOADS, schemes=("gcc", "bacc"), K=(10,), ratios=RATE_RATIOS,
                    stragglers=("worst:2", "worst:5"), seeds=tuple(range(6)), trials=1),
               ("rate", "configs")),
        Preset("rate-bernoulli",
               "Bernoulli stragglers, p in {0.1, 0.3}, K = 10, N from 2K to 64K: mean rel_mse over straggler draws, "
               "divided by log^3_{1/p}(N), against N (theory for GCC: O(log^3_{1/p}(N) N^-3)).",
               dict(workloads=RATE_WORKLOADS, schemes=("gcc", "bacc"), K=(10,), ratios=RATE_RATIOS,
                    stragglers=("bernoulli:0.1", "bernoulli:0.3"), seeds=tuple(range(5)), trials=40),
               ("rate",)),
        Preset("vs-S",
               "rel_mse against the number of worst-case stragglers S at fixed N = 160 (K = 10); theory: O(S^3).",
               dict(workloads=RATE_WORKLOADS, schemes=("gcc", "bacc"), K=(10,), N=(160,),
                    stragglers=tuple(f"worst:{s}" for s in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)),
                    seeds=tuple(range(5)), trials=1),
               ("vs-S",)),
        Preset("redundancy",
               "Classifiers: agreement with f and RelAcc at redundancy N/K in {1.25, 1.5, 2, 4} (K = 20) with S at "
               "10% and 25% of N (uniformly random stragglers, mean over draws), GCC, BACC and replication at "
               "equal N.",
               dict(workloads=("digits-cnn", "mnist1d-cnn"), schemes=("gcc", "bacc", "replication"), K=(20,),
                    ratios=(1.25, 1.5, 2, 4), stragglers=("random:10%", "random:25%"), seeds=tuple(range(10)),
                    trials=20),
               ("redundancy", "configs")),
        Preset("adversarial",
               "Wrong results: A = round(N^a) sign-flipping workers (a in {0.25, 0.5}) among the results of GCC "
               "with S = 2 random stragglers, decoded by `code.robust_decode`, K = 10, N from 2K to 32K: rel_mse "
               "against N and its fitted slope next to the rate (6/5)(a-1) of arXiv 2502.08058.",
               dict(workloads=("digits-cnn",), schemes=("gcc",), K=(10,), N=(20, 40, 80, 160, 320),
                    stragglers=("random:2",), adversaries=("signflip:N^0.25", "signflip:N^0.5"),
                    seeds=tuple(range(4)), trials=5),
               ("adversarial",)),
        Preset("fixed-fraction",
               "A fixed straggler fraction: S = rho N with rho in {0.05, 0.1, 0.2} and K = N/4 or N/2 as N "
               "grows to 200, GCC's defaults against BACC, worst-case stragglers (every contiguous block of S workers "
               "and the search of docs/design.md section 2, one per input set: the set of largest rel_mse, and the "
               "set of least top-1 agreement) and uniformly random ones (mean over draws), on the trained digits and "
               "mnist1d CNNs, three input sets each. About 5 minutes with --procs 2 on a shared 2-core machine (the "
               "worst-case searches at N >= 160 dominate), so `reproduce --check` rebuilds it only when named.",
               dict(workloads=("digits-cnn", "mnist1d-cnn"), schemes=("gcc", "bacc"), K=(), K_frac=(0.25, 0.5),
                    N=FRACTION_N, stragglers=tuple(f"{p}:{r}%" for p in ("worst", "worst-agreement", "random")
                                     for r in (5, 10, 20)),
                    seeds=tuple(range(3)), trials=10),
               ("fraction",)),
    )
}
#: presets that are not sweeps: the modules of gencc.experiments.tables (reproduce(out, overrides, progress),
#: section(out))
TABLE_PRESETS = tuple(TABLES)
PRESET_NAMES = (*PRESETS, *TABLE_PRESETS, "all")
_LIST_FIELDS = {"workloads": str, "schemes": str, "K": int, "N": int, "ratios": float, "stragglers": str, "seeds": int,
                "adversaries": str, "K_frac": float}


def parse_list(text: str, kind: type) -> tuple:
    """`a,b,c` as a tuple of `kind`; for ints also `lo:hi` ranges (lo, lo + 1, ..., hi - 1; never empty)."""
    out: list = []
    what = {int: "an integer or a lo:hi range", float: "a number"}.get(kind, "a name")
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            if kind is int and ":" in part:
                lo, hi = (int(x) for x in part.split(":"))
                if hi <= lo:
                    raise ValueError(f"empty range {part!r}: lo:hi means lo, lo+1, ..., hi-1, so hi must exceed lo")
                out.extend(range(lo, hi))
            else:
                out.append(kind(part))
        except ValueError as err:
            raise ValueError(str(err) if "range" in str(err) else f"expected {what}, got {part!r}") from None
    return tuple(out)


def apply_overrides(spec: dict[str, Any], overrides: Sequence[str] | dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `spec` with `key=value` overrides (lists comma-separated; `trials` an integer)."""
    spec = dict(spec)
    if not overrides:
        return spec
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        bad = [o for o in overrides if "=" not in o]
        if bad:
            raise ValueError(f"overrides look like key=value (e.g. seeds=0:2), got {bad[0]!r}")
        items = [tuple(o.split("=", 1)) for o in overrides]
    names = {f.name for f in fields(SweepSpec)}
    for key, val in items:
        key = key.strip()
        if key not in names or key == "opts":
            raise ValueError(f"cannot override {key!r}; choose from {', '.join(sorted(names - {'opts'}))}")
        if key == "trials":
            if not str(val).strip().isdigit():
                raise ValueError(f"trials must be a positive integer, got {val!r}")
            spec[key] = int(val)
        elif isinstance(val, str):
            spec[key] = parse_list(val, _LIST_FIELDS[key])
        else:
            spec[key] = tuple(val)
    return spec


def preset_spec(name: str, overrides: Sequence[str] | dict[str, Any] | None = None) -> SweepSpec:
    """The SweepSpec of preset `name` with overrides applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESET_NAMES)}")
    return SweepSpec(**apply_overrides(PRESETS[name].spec, overrides))
