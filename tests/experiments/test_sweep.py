"""Sweeps: tidy CSV, resume after an interruption, the same rows for any --jobs, seeds from keys."""

from __future__ import annotations

from pathlib import Path

import pytest

import gencc
from gencc.experiments import SweepSpec, parse_straggler, read_rows, run_sweep, stable_seed
from gencc.experiments.sweep import COLUMNS, TIMING


def _spec(**kw) -> SweepSpec:
    base = dict(workloads=("toy-xsinx", "toy-softmax"), schemes=("gcc", "bacc"), K=(6,), ratios=(2, 4),
                stragglers=("worst:2", "random:2", "bernoulli:0.2"), seeds=(0, 1), trials=3)
    base.update(kw)
    return SweepSpec(**base)


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_sweep_writes_tidy_csv(tmp_path: Path) -> None:
    spec = _spec()
    res = run_sweep(spec, tmp_path / "s.csv", progress=False)
    rows = read_rows(tmp_path / "s.csv")
    header = (tmp_path / "s.csv").read_text().splitlines()[0].split(",")
    assert header == list(COLUMNS)
    pts = spec.points()
    assert res.total == len(pts) == 2 * 2 * 2 * 3 * 2
    assert len(rows) == sum(pt.n_rows for pt in pts) == res.rows_written
    worst = [r for r in rows if r["pattern"] == "worst"]
    assert worst and all(r["trial"] == 0 and r["exact"] is not None for r in worst)
    bern = [r for r in rows if r["pattern"] == "bernoulli"]
    assert all(r["p"] == 0.2 and r["S"] is None for r in bern)
    clf = [r for r in rows if r["workload"] == "toy-softmax"]
    assert all(r["agreement"] is not None for r in clf)
    assert all(r["agreement"] is None for r in rows if r["workload"] == "toy-xsinx")
    # paired comparison: every scheme at a grid point gets the same inputs and straggler draws
    by = {}
    for r in rows:
        by.setdefault((r["workload"], r["N"], r["straggler"], r["seed"], r["trial"]), set()).add(
            (r["draw_seed"], r["n_returned"] if r["pattern"] != "worst" else None))
    assert all(len(v) == 1 for v in by.values())


def test_sweep_resumes_after_interruption(tmp_path: Path) -> None:
    spec = _spec()
    full = tmp_path / "full.csv"
    run_sweep(spec, full, progress=False)
    part = tmp_path / "part.csv"
    first = run_sweep(spec, part, progress=False, limit=7)  # an interrupted run
    assert first.ran == 7
    # a sub-grid run into the same file: its points are done and get skipped later
    run_sweep(_spec(seeds=(1,)), part, progress=False)
    with part.open("a") as fh:  # a torn last line, as from a kill during a write
        fh.write("toy-xsinx,gcc,6,12,worst:2,2,")
    res = run_sweep(spec, part, progress=False)
    assert res.skipped == 7 + len(_spec(seeds=(1,)).points()) - sum(
        1 for pt in spec.points()[:7] if pt.seed == 1)
    assert res.skipped + res.ran == res.total
    key = lambda r: tuple(str(r[c]) for c in ("workload", "scheme", "K", "N", "straggler", "seed", "trial"))  # noqa: E731
    assert sorted(_strip(read_rows(part)), key=key) == sorted(_strip(read_rows(full)), key=key)
    again = run_sweep(spec, part, progress=False)
    assert again.ran == 0 and again.rows_written == 0


def test_rows_of_incomplete_points_are_redone(tmp_path: Path) -> None:
    spec = _spec(workloads=("toy-xsinx",), stragglers=("random:2",), seeds=(0,))
    path = tmp_path / "s.csv"
    run_sweep(spec, path, progress=False)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the last point lost one of its trials
    res = run_sweep(spec, path, progress=False)
    assert res.ran == 1
    assert len(read_rows(path)) == len(lines) - 1


def test_jobs_do_not_change_results(tmp_path: Path) -> None:
    spec = _spec(seeds=(0,))
    run_sweep(spec, tmp_path / "a.csv", jobs=1, progress=False)
    run_sweep(spec, tmp_path / "b.csv", jobs=2, progress=False)
    a, b = read_rows(tmp_path / "a.csv"), read_rows(tmp_path / "b.csv")
    assert len(a) > 0 and _strip(a) == _strip(b)


def test_seeds_and_specs() -> None:
    assert stable_seed("a", 1) == stable_seed("a", 1) != stable_seed("a", 2)
    assert 0 <= stable_seed("x") < 2**63
    assert parse_straggler("worst:3", 40) == gencc.FixedCount(3, "worst")
    assert parse_straggler("random:10%", 40) == gencc.FixedCount(4, "random")
    assert parse_straggler("random:25%", 25) == gencc.FixedCount(6, "random")
    assert parse_straggler("bernoulli:0.3", 40) == gencc.Bernoulli(0.3)
    with pytest.raises(ValueError, match="bad straggler spec"):
        parse_straggler("worst:x", 10)
    # invalid combinations are left out of the grid
    pts = SweepSpec(workloads=("toy-xsinx",), K=(5,), N=(4, 5, 8), stragglers=("worst:5",)).points()
    assert sorted({pt.N for pt in pts}) == [8]


@pytest.mark.parametrize("change,field,match", [
    ({"workloads": ()}, "workloads", "no workloads given"),
    ({"schemes": ("mds",)}, "schemes", "unknown scheme 'mds'"),
    ({"workloads": ("nope",)}, "workloads", "unknown workload 'nope'"),
    ({"trials": 0}, "trials", "trials must be a positive integer"),
    ({"K": (0,)}, "K", "K .inputs per code. must be a positive integer"),
    ({"ratios": (float("nan"),)}, "ratios", "ratios must be finite numbers > 0"),
    ({"N": (200_000,)}, "N", "N must be at most 100000 workers"),
    ({"stragglers": ("worst:x",)}, "stragglers", "bad straggler spec"),
    ({"N": (3,)}, "N", "the grid is empty: N=3 < K=4"),
    ({"opts": {"gcc": {"nosuch": 1}}}, "opts", "nosuch"),
])
def test_the_grid_check_names_the_field_to_fix(change, field, match) -> None:
    """SweepSpec.check refuses a bad grid before any simulation, with a ConfigError naming the field."""
    from gencc.errors import ConfigError

    spec = SweepSpec(**{"workloads": ("toy-xsinx",), "schemes": ("gcc",), "K": (4,), "N": (8,), **change})
    with pytest.raises(ConfigError, match=match) as err:
        spec.check()
    assert err.value.field == field
    good = SweepSpec(workloads=("toy-xsinx",), schemes=("gcc", "bacc"), K=(4,), N=(8,))
    assert [pt.key for pt in good.check()] == [pt.key for pt in good.points()]
