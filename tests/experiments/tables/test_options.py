"""Table presets' --set overrides: integers, integer lists and names, each refused with a message naming it."""

from __future__ import annotations

import pytest

from gencc.experiments.tables.options import Option, parse_overrides

OPTS = {"sets": Option("input sets", minimum=2), "N": Option("worker counts", minimum=11, many=True),
        "workloads": Option("workloads", choices=("a", "b"))}


def test_parses_strings_and_dicts() -> None:
    assert parse_overrides("t", ["sets=3", "N=20,40", "workloads=b"], OPTS) == {"sets": 3, "N": (20, 40),
                                                                               "workloads": ("b",)}
    assert parse_overrides("t", {"sets": 5, "N": [12], "workloads": ["a", "b"]}, OPTS) == {
        "sets": 5, "N": (12,), "workloads": ("a", "b")}
    assert parse_overrides("t", None, OPTS) == {}


@pytest.mark.parametrize("over, match", [
    (["colour=red"], "cannot override 'colour' in t; choose from sets, N, workloads"),
    (["sets"], "key=value"),
    (["sets=x"], r"sets must be an integer \(input sets\), got 'x'"),
    (["sets=1"], r"sets must be at least 2 \(input sets\), got 1"),
    (["sets=2,3"], "sets must be one integer"),
    (["N=20,5"], "N must be at least 11"),
    (["N="], "N must be integers"),
    (["workloads=c"], r"t runs on a, b \(workloads\); got c"),
    (["workloads=,"], "got none"),
])
def test_refuses_bad_values_naming_the_key(over, match) -> None:
    with pytest.raises(ValueError, match=match):
        parse_overrides("t", over, OPTS)
