"""`reproduce`: rerun a preset end to end into a docs folder.

A sweep preset sweeps into <out>/data/sweeps/<preset>.csv (resuming), then writes its figures and tables; a
table preset computes its table into <out>/tables/. Either records its run time in <out>/data/timings.csv and
regenerates results.md and the pages under <out>/generated/ (`report.write_results`) from every preset's
tables found there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import analysis as A
from . import provenance
from .plots import make_outputs
from .presets import PRESETS, TABLE_PRESETS, preset_spec
from .report import write_results
from .sweep import read_rows, row_key, run_sweep
from .tables import TABLES


def reproduce(name: str, out: str | Path = "docs", overrides: Sequence[str] | dict[str, Any] | None = None,
              jobs: int = 1, progress: bool = True, n_boot: int = 2000) -> dict[str, Any]:
    """Run preset `name` (or "all") into `out`: sweep (resuming), figures, tables, timings and results.md."""
    if name == "all":
        res = {}
        for n in PRESETS:
            res[n] = reproduce(n, out, overrides, jobs, progress, n_boot)
        for n in TABLE_PRESETS:  # their grids are fixed tables: --set applies to the sweep presets only
            res[n] = reproduce(n, out, None, jobs, progress, n_boot)
        return res
    if name in TABLES:
        t0 = time.perf_counter()
        res = TABLES[name].reproduce(out, overrides, progress)
        _record_timing(Path(out), name, time.perf_counter() - t0, res["points"], res["points"], 1, bool(overrides))
        provenance.record(Path(out), name)
        write_results(out)
        return res
    out = Path(out)
    spec = preset_spec(name, overrides)
    t0 = time.perf_counter()
    sweep_path = out / "data" / "sweeps" / f"{name}.csv"
    result = run_sweep(spec, sweep_path, jobs=jobs, progress=progress)
    keys = {pt.key for pt in spec.points()}
    rows = [r for r in read_rows(sweep_path) if row_key(r) in keys]
    outputs = make_outputs(rows, out, name, PRESETS[name].kinds, n_boot=n_boot)
    seconds = time.perf_counter() - t0
    _record_timing(out, name, seconds, result.total, result.ran, jobs, bool(overrides))
    provenance.record(out, name, spec.workloads)
    write_results(out)
    outputs.update(seconds=seconds, sweep=result, rows=len(rows))
    return outputs


def _record_timing(out: Path, name: str, seconds: float, points: int, ran: int, jobs: int, overridden: bool) -> None:
    path = out / "data" / "timings.csv"
    rows = [r for r in A.read_csv(path) if r["preset"] != name] if path.exists() else []
    rows.append({"preset": name, "seconds": round(seconds, 1), "points": points, "points_run": ran, "jobs": jobs,
                 "overridden": overridden})
    order = {n: i for i, n in enumerate((*PRESETS, *TABLE_PRESETS))}
    A.write_csv(path, sorted(rows, key=lambda r: order.get(r["preset"], 99)))
