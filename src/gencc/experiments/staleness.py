"""Staleness check of a docs folder: rebuild presets from scratch in a temporary folder and compare.

`check(docs)` reruns the cheap presets (CHEAP) without resuming from the committed sweeps, and compares every
table, figure-data CSV, tracked sweep CSV (timing columns aside), generated page (generated/<preset>.md) and
results.md ("Last run" lines aside) with what `docs` holds. Numbers are compared to a relative tolerance, so
last-bit differences between BLAS builds do not count; figures (PNG) are not compared (their bytes depend on
the matplotlib version), their data is.

Where the rebuild trained a model whose weights differ from those the committed figures were built with
(`provenance.moved`: another processor's kernels round differently), a trained workload's figures cannot be
compared by value: that preset's rows of trained workloads (and its files without a workload column) are compared
for their shape and text, every number masked, its pages and results.md likewise, and its analytic workloads'
rows still to `rtol`. `CheckResult.models` names the models that moved.
"""

from __future__ import annotations

import csv
import math
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import provenance
from .markdown import GENERATED, TIMING_PREFIX
from .presets import PRESETS, TABLE_PRESETS
from .reproduce import reproduce
from .sweep import TIMING

#: presets rebuilt by default: the sweeps each take under 20 s with --procs 2 on a quiet 2-core machine (rate-worst:
#: 139 s; adversarial: 19 s of CPU time with --procs 1) and the parm table a few seconds; the other table presets
#: (gcc-defaults, robust, low-redundancy: minutes each, data/timings.csv) are listed as not rechecked
CHEAP = ("rate-bernoulli", "vs-S", "redundancy", "adversarial", "parm")


@dataclass
class CheckResult:
    """Presets rebuilt, files that differ (path relative to docs -> first difference), presets not rebuilt."""

    checked: list[str]
    differ: dict[str, str] = field(default_factory=dict)
    not_checked: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: preset -> {model: (committed weights sha256, rebuilt sha256)} where the rebuild's trained model differs
    models: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.differ


def _own_files(root: Path, name: str) -> list[Path]:
    """The files preset `name` writes under root (figures excluded), relative to root."""
    pats = [f"tables/{name}*.csv", f"data/{name}*-points.csv", f"data/sweeps/{name}.csv", f"{GENERATED}/{name}.md"]
    return sorted(p.relative_to(root) for pat in pats for p in root.glob(pat))


#: numbers both this close to zero agree: a squared relative error (rel_mse, its quantiles) of an exact decode is
#: float64 rounding, about eps^2 = 5e-32 times a small factor, and its digits differ between processors' BLAS kernels
ROUNDING_FLOOR = 1e-24


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _same_cell(a: str, b: str, rtol: float) -> bool:
    if a == b:
        return True
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return False
    if math.isnan(x) and math.isnan(y):
        return True
    return math.isclose(x, y, rel_tol=rtol, abs_tol=ROUNDING_FLOOR)


#: a number as the pages and tables write one (integers, decimals, thousands separators, exponents)
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")


def _masked(text: str) -> str:
    return _NUMBER.sub("#", text)


def _trained(workload: str) -> bool:
    from ..workloads import WORKLOADS

    spec = WORKLOADS.get(workload)
    return bool(spec and spec.trained)


def diff_csv(committed: Path, rebuilt: Path, rtol: float = 1e-6, skip: Sequence[str] = (),
             values_of_trained: bool = True) -> str | None:
    """None when the two CSVs agree (numbers to `rtol`, columns in `skip` ignored), else the first difference.

    values_of_trained=False: rows of a trained workload (every row of a file without a `workload` column) are
    compared for their text alone, numbers masked; rows of analytic workloads still to `rtol`."""
    with committed.open(newline="") as fa, rebuilt.open(newline="") as fb:
        a, b = list(csv.reader(fa)), list(csv.reader(fb))
    if not a or not b or a[0] != b[0]:
        return f"columns differ: {a[0] if a else []} committed, {b[0] if b else []} rebuilt"
    if len(a) != len(b):
        return f"{len(a) - 1} rows committed, {len(b) - 1} rebuilt"
    head = a[0]
    wcol = head.index("workload") if "workload" in head else None
    for i, (ra, rb) in enumerate(zip(a[1:], b[1:], strict=True), start=1):
        by_value = values_of_trained or (wcol is not None and not _trained(ra[wcol]))
        for col, x, y in zip(head, ra, rb, strict=False):
            if col in skip:
                continue
            if not (_same_cell(x, y, rtol) if by_value else _masked(x) == _masked(y)):
                return f"row {i}, {col}: {x} committed, {y} rebuilt"
    return None


def _diff_markdown(committed: Path, rebuilt: Path, values: bool = True) -> str | None:
    """None when the two pages agree line by line ("Last run" lines aside; values=False: numbers masked)."""
    def lines(p: Path) -> list[str]:
        return [ln for ln in p.read_text().splitlines() if not ln.startswith(TIMING_PREFIX)]

    a, b = lines(committed), lines(rebuilt)
    for i, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if (x != y) if values else (_masked(x) != _masked(y)):
            return f"line {i}: {x[:100]!r} committed, {y[:100]!r} rebuilt"
    return None if len(a) == len(b) else f"{len(a)} lines committed, {len(b)} rebuilt"


def check(docs: str | Path, names: Sequence[str] | None = None, overrides: Any = None, jobs: int = 1,
          progress: bool = False, rtol: float = 1e-6) -> CheckResult:
    """Rebuild presets `names` (default CHEAP) from scratch in a temporary copy of `docs` and compare.

    `overrides` apply to every preset named; with the default CHEAP list, to its sweep presets only (a table
    preset's options are its own, as in `reproduce("all")`)."""
    docs = Path(docs)
    if not (docs / "results.md").is_file():
        raise FileNotFoundError(f"no results.md in {docs}: pass the docs folder to check, e.g. --out docs")
    named = bool(names)
    names = list(names or CHEAP)
    every = (*PRESETS, *TABLE_PRESETS)
    unknown = [n for n in names if n not in every]
    if unknown:
        raise ValueError(f"unknown preset(s) {', '.join(unknown)}; choose from {', '.join(every)}")
    res = CheckResult(checked=names, not_checked=[n for n in every if n not in names])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gencc-check-") as tmp:
        work = Path(tmp) / "docs"
        shutil.copytree(docs, work)
        for name in names:  # from scratch: no resuming from the committed sweep
            for rel in _own_files(work, name):
                (work / rel).unlink()
        for name in names:  # as `reproduce all`: grid overrides reach a table preset only when it is named
            reproduce(name, work, overrides if named or name in PRESETS else None, jobs=jobs, progress=progress)
        for name in names:
            moved = provenance.moved(docs, work, name)
            if moved:
                res.models[name] = moved
            committed, rebuilt = _own_files(docs, name), _own_files(work, name)
            for rel in sorted(set(committed) | set(rebuilt)):
                if rel.parts[-2] == "sweeps" and rel not in committed:
                    continue  # an untracked sweep (see docs/.gitignore): its tables are compared
                if rel not in committed or rel not in rebuilt:
                    res.differ[str(rel)] = "only " + ("rebuilt" if rel not in committed else "committed")
                    continue
                d = (_diff_markdown(docs / rel, work / rel, not moved) if rel.suffix == ".md"
                     else diff_csv(docs / rel, work / rel, rtol, skip=TIMING, values_of_trained=not moved))
                if d:
                    res.differ[str(rel)] = d
        d = _diff_markdown(docs / "results.md", work / "results.md", not res.models)
        if d:
            res.differ["results.md"] = d
    res.seconds = time.perf_counter() - t0
    return res
