"""What every table preset writes and reads back: its CSV under <out>/tables/ and its section of results.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..analysis import read_csv, write_csv
from ..markdown import command


def table_path(out: str | Path, preset: str, part: str | None = None) -> Path:
    """<out>/tables/<preset>.csv, or <preset>-<part>.csv for a table in parts."""
    return Path(out) / "tables" / (f"{preset}-{part}.csv" if part else f"{preset}.csv")


def write_table(out: str | Path, preset: str, rows: list[dict], t0: float) -> dict[str, Any]:
    """Write one table's rows and report what `reproduce` reports: seconds since t0, rows, paths, points."""
    path = write_csv(table_path(out, preset), rows)
    return {"seconds": time.perf_counter() - t0, "rows": len(rows), "paths": [path], "points": len(rows)}


def table_section(out: str | Path, preset: str, description: str, markdown: Callable[[list[dict]], list[str]],
                  note: Callable[[list[dict]], str] | None = None) -> list[str]:
    """The preset's part of docs/results.md from its one table (empty when the table is absent); `note` adds a
    sentence after the command, read from the rows."""
    path = table_path(out, preset)
    if not path.exists():
        return []
    rows = read_csv(path)
    extra = f" {note(rows)}" if note is not None else ""
    return [description, "", f"Command: `{command(preset)}`.{extra}", "", *markdown(rows)]
