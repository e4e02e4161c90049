"""Matplotlib helpers shared by every figure (Agg backend, imported on first use), and file stems.

Importing this module does not import matplotlib: `pyplot()` does, the first time a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: the colour of each scheme in every figure
COLORS = {"gcc": "C0", "bacc": "C1", "replication": "C2", "lcc": "C3"}


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def color(scheme: str, i: int) -> str:
    return COLORS.get(scheme.split("[")[0], f"C{(i + 4) % 10}")


def save(fig: Any, path: Path, title: str = "") -> Path:
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    pyplot().close(fig)
    return path


def finish(ax: Any, xlabel: str, ylabel: str, title: str, fontsize: int = 10, which: str = "both") -> None:
    """Labels, legend and grid of one panel."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=fontsize)
    ax.legend(fontsize=7)
    ax.grid(True, which=which, alpha=0.2)


def null_formatter() -> Any:
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def log_axes(ax: Any, xs: Sequence[float] = ()) -> None:
    """Log-log axes; x ticks labelled with grid values (at least 1.9x apart, so labels never collide)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(null_formatter())
    ticks: list[float] = []
    for x in sorted({float(x) for x in xs if x > 0}):
        if not ticks or x >= 1.9 * ticks[-1]:
            ticks.append(x)
    if ticks:
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])


def grid(n_rows: int, n_cols: int, w: float = 4.2, h: float = 3.3) -> tuple[Any, np.ndarray]:
    plt = pyplot()
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(w * n_cols, h * n_rows), squeeze=False)
    return fig, axes


def positive(points: Sequence[dict], col: str, x: str) -> list[dict]:
    """The points whose `col` is finite and positive (drawable on log axes), sorted by `x`."""
    return sorted((p for p in points if np.isfinite(p[col]) and p[col] > 0), key=lambda p: p[x])


def slope_label(name: str, fit: dict | None) -> str:
    """A series' legend entry: its name and, when fitted, the slope with its 95% interval."""
    return name + (f": slope {fit['slope']:.2f} [{fit['lo']:.2f}, {fit['hi']:.2f}]" if fit else "")


def stem(prefix: str, kind: str) -> str:
    """File stem of a figure or table: `prefix-kind`, or just `prefix` when it already starts with the kind."""
    return prefix if prefix.startswith(kind) else f"{prefix}-{kind}"
