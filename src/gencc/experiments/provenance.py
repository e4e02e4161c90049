"""Which trained models a docs folder's figures were built with (`data/models.csv`).

The same training recipe gives weights that differ in their last bits on another processor (torch's CPU kernels
round differently with AVX2 than with AVX-512), and a trained model's figures then move by up to tens of percent,
while an analytic workload's stay equal to the last bit. `reproduce` records, per preset, the sha256 of each
cached trained model's weights; the staleness check compares the record with the models its rebuild used, so it
can tell a stale figure from one rebuilt with other weights (`moved`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

#: the record, relative to a docs folder
PATH = Path("data") / "models.csv"
FIELDS = ("preset", "model", "weights_sha256")


def fingerprints(workloads: Iterable[str] | None = None) -> dict[str, str]:
    """Trained workload -> sha256 of its cached weights (current recipe), for those in the model cache (among
    `workloads` when given: a preset on analytic workloads alone records nothing and never imports torch)."""
    from ..workloads import WORKLOADS, cached_weights_sha256

    among = None if workloads is None else set(workloads)
    out = {}
    for name, spec in WORKLOADS.items():
        if spec.trained and (among is None or name in among) and (sha := cached_weights_sha256(name)) is not None:
            out[name] = sha
    return out


def read(docs: Path, preset: str) -> dict[str, str]:
    """Model -> weights sha256 recorded for `preset` under `docs` ({} when none is)."""
    return {r["model"]: r["weights_sha256"] for r in _rows(Path(docs) / PATH) if r["preset"] == preset}


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def record(docs: Path, preset: str, workloads: Iterable[str] | None = None) -> None:
    """Record the cached trained models' fingerprints as those `preset`'s figures under `docs` were built with:
    of `workloads` (a sweep preset's own), or of every cached trained model (a table preset's)."""
    path = Path(docs) / PATH
    rows = [r for r in _rows(path) if r["preset"] != preset]
    rows += [{"preset": preset, "model": m, "weights_sha256": h} for m, h in sorted(fingerprints(workloads).items())]
    if not rows and not path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, FIELDS, lineterminator="\n")
        out.writeheader()
        out.writerows(sorted(rows, key=lambda r: (r["preset"], r["model"])))


def moved(committed: Path, rebuilt: Path, preset: str) -> dict[str, tuple[str, str]]:
    """Model -> (committed sha256, rebuilt sha256) for the models of `preset` recorded in both and not equal."""
    a, b = read(committed, preset), read(rebuilt, preset)
    return {m: (a[m], b[m]) for m in sorted(a.keys() & b.keys()) if a[m] != b[m]}
