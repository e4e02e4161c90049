"""The `--set key=value` overrides of a table preset, checked before any work starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One overridable setting: an integer (`many`: a comma-separated list of them) of at least `minimum`, or
    names from `choices`."""

    what: str
    minimum: int = 1
    many: bool = False
    choices: Sequence[str] = ()


def _items(overrides: Any) -> list[tuple[str, Any]]:
    if not overrides:
        return []
    if isinstance(overrides, dict):
        return [(str(k).strip(), v) for k, v in overrides.items()]
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides look like key=value (e.g. sets=20), got {bad[0]!r}")
    return [(k.strip(), v) for k, v in (o.split("=", 1) for o in overrides)]


def _names(val: Any) -> tuple[str, ...]:
    return tuple(v.strip() for v in val.split(",") if v.strip()) if isinstance(val, str) else tuple(val)


def _ints(key: str, opt: Option, val: Any) -> tuple[int, ...]:
    parts = val.split(",") if isinstance(val, str) else (val if isinstance(val, (list, tuple)) else [val])
    out = []
    for p in parts:
        try:
            out.append(int(str(p).strip()))
        except ValueError:
            raise ValueError(f"{key} must be {'integers' if opt.many else 'an integer'} ({opt.what}), "
                             f"got {val!r}") from None
    if not out or (len(out) > 1 and not opt.many):
        raise ValueError(f"{key} must be {'integers' if opt.many else 'one integer'} ({opt.what}), got {val!r}")
    low = [v for v in out if v < opt.minimum]
    if low:
        raise ValueError(f"{key} must be at least {opt.minimum} ({opt.what}), got {low[0]}")
    return tuple(out)


def parse_overrides(preset: str, overrides: Any, options: dict[str, Option]) -> dict[str, Any]:
    """{key: value} from key=value strings (or a dict) for the keys of `options`, or a ValueError naming the
    key: integers (a tuple of them for `many` options), or a tuple of names from `choices`."""
    out: dict[str, Any] = {}
    for key, val in _items(overrides):
        opt = options.get(key)
        if opt is None:
            raise ValueError(f"cannot override {key!r} in {preset}; choose from {', '.join(options)}")
        if opt.choices:
            names = _names(val)
            bad = [n for n in names if n not in opt.choices]
            if bad or not names:
                raise ValueError(f"{preset} runs on {', '.join(opt.choices)} ({key}); got "
                                 f"{', '.join(bad) or 'none'}")
            out[key] = names
        else:
            ints = _ints(key, opt, val)
            out[key] = ints if opt.many else ints[0]
    return out
