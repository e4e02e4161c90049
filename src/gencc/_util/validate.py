"""Parameter checks shared by every layer, so that one kind of parameter is judged one way everywhere.

Integers: Python and numpy integers pass; bool, floats (even 10.0) and strings are refused with a message that
names the parameter and the fix. Numbers: Python and numpy reals pass (bool and strings refused), checked
against a range; NaN and infinities are refused unless asked for.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np


def _kind(v: Any) -> str:
    return type(v).__name__


def _int_fix(v: Any) -> str:
    """How to turn a refused value into an integer, when there is an obvious way."""
    if isinstance(v, bool) or isinstance(v, np.bool_):
        return "; pass an integer, not a bool"
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        return f"; pass {int(v)} (an int), not {v!r}"
    if isinstance(v, str):
        return "; convert it first, e.g. int(text)"
    return ""


def _int_range(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"an integer in [{lo}, {hi}]"
    if lo == 1:
        return "a positive integer"
    if lo == 0:
        return "a non-negative integer"
    if lo is not None:
        return f"an integer >= {lo}"
    if hi is not None:
        return f"an integer <= {hi}"
    return "an integer"


def check_int(name: str, v: Any, lo: int | None = None, hi: int | None = None, *, optional: bool = False,
              hint: str = "", what: str | None = None) -> int | None:
    """`v` as an int, checked to lie in [lo, hi] (either bound may be None). `optional`: None passes through.

    `what` (the accepted values in words, replacing the range's) and `hint` (why) go into the message.
    """
    if v is None and optional:
        return None
    if type(v) is int and (lo is None or v >= lo) and (hi is None or v <= hi):
        return v  # the common case; the message below is built only for a refusal
    what = (what or _int_range(lo, hi)) + (" or None" if optional else "")
    extra = f" ({hint})" if hint else ""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (Integral, np.integer)):
        raise ValueError(f"{name} must be {what}{extra}, got {v!r} ({_kind(v)}){_int_fix(v)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be {what}{extra}, got {v!r}")
    return int(v)


def _real_range(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo == 0 and hi is None:
        return "a positive number" if lo_open else "a non-negative number"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi:g}")
    return "a number" + (" " + " and ".join(parts) if parts else "")


def check_real(name: str, v: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
               hi_open: bool = False, finite: bool = True, optional: bool = False, unit: str = "",
               hint: str = "", what: str | None = None) -> float | None:
    """`v` as a float, checked against [lo, hi] (`lo_open` / `hi_open` exclude the bound). `finite` refuses
    NaN and infinities; NaN is refused always. `optional`: None passes through. `unit` ("seconds"), `hint`
    and `what` (the accepted values in words, replacing the range's) go into the message."""
    if v is None and optional:
        return None
    if not isinstance(v, (bool, np.bool_)) and isinstance(v, (Real, np.integer, np.floating)):
        x = float(v)
        bad = math.isnan(x) or (finite and math.isinf(x))
        if lo is not None:
            bad = bad or (x <= lo if lo_open else x < lo)
        if hi is not None:
            bad = bad or (x >= hi if hi_open else x > hi)
        if not bad:
            return x  # the message below is built only for a refusal (a job checks several numbers per call)
    if what is None:
        what = _real_range(lo, hi, lo_open, hi_open)
        if finite:
            what = what.replace("a number", "a finite number").replace("positive number", "positive finite number")
            what = what.replace("non-negative number", "non-negative finite number")
        what += f" of {unit}" if unit else ""
    what += " or None" if optional else ""
    extra = f" ({hint})" if hint else ""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (Real, np.integer, np.floating)):
        fix = "; convert it first, e.g. float(text)" if isinstance(v, str) else ""
        raise ValueError(f"{name} must be {what}{extra}, got {v!r} ({_kind(v)}){fix}")
    raise ValueError(f"{name} must be {what}{extra}, got {v!r}")


def check_positive(name: str, v: Any, *, optional: bool = False, unit: str = "") -> float | None:
    """A positive finite number (a rate, a scale, seconds)."""
    return check_real(name, v, 0.0, lo_open=True, optional=optional, unit=unit)


def check_nonneg(name: str, v: Any, *, optional: bool = False, unit: str = "") -> float | None:
    """A non-negative finite number (a penalty weight, a shift)."""
    return check_real(name, v, 0.0, optional=optional, unit=unit)


def check_probability(name: str, v: Any, *, below_one: bool = False) -> float:
    """A probability: in [0, 1], or in [0, 1) with `below_one`."""
    what = "a probability in [0, 1)" if below_one else "a probability in [0, 1]"
    return check_real(name, v, 0.0, 1.0, hi_open=below_one, what=what)  # type: ignore[return-value]
