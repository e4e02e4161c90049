"""Table presets of `gencc reproduce`: each module computes one claim table of the docs.

Every module has PRESET (its name), DESCRIPTION, `reproduce(out, overrides, progress)` (computes the table into
<out>/tables/<PRESET>*.csv) and `section(out)` (its markdown, read back from those CSVs; empty when absent).
"""

from . import gcc_defaults, low_redundancy, noisy, parm, privacy, robust

#: preset name -> module, in the order results.md shows them
TABLES = {m.PRESET: m for m in (gcc_defaults, parm, robust, low_redundancy, noisy, privacy)}

__all__ = ["TABLES", "gcc_defaults", "low_redundancy", "noisy", "parm", "privacy", "robust"]
