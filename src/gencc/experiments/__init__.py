"""Experiments: sweeps over schemes, sizes and straggler models into tidy CSV tables, slope fits, figures.

This layer sits on top of the math layer and the workloads; nothing below imports it. Importing it pulls in
numpy only: matplotlib, rich and typer are imported inside the functions that need them.
"""

from .fit import SlopeFit, fit_slope
from .schemes import sweep_code
from .sweep import GridPoint, SweepSpec, parse_straggler, read_rows, run_sweep, stable_seed

__all__ = [
    "GridPoint",
    "SlopeFit",
    "SweepSpec",
    "fit_slope",
    "sweep_code",
    "parse_straggler",
    "read_rows",
    "run_sweep",
    "stable_seed",
]
