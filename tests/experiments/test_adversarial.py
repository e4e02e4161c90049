"""Sweeps with adversaries: specs, robust-decoded rows, resuming into a plain CSV, the slope against N, the
`adversarial` preset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gencc
from gencc import adversaries as adv
from gencc.experiments import SweepSpec, read_rows, run_sweep
from gencc.experiments import adversarial as ADV
from gencc.experiments.presets import preset_spec
from gencc.experiments.reproduce import reproduce
from gencc.experiments.sweep import ADV_COLUMNS, COLUMNS, run_point, stable_seed
from gencc.experiments.toy_workloads import get_workload


def _spec(**kw) -> SweepSpec:
    base = dict(workloads=("toy-xsinx",), schemes=("gcc",), K=(6,), N=(24, 48), stragglers=("random:2",),
                adversaries=("signflip:N^0.5", "offset:1"), seeds=(0, 1), trials=3)
    base.update(kw)
    return SweepSpec(**base)


def test_parse_adversary_specs() -> None:
    assert ADV.parse_adversary("signflip:N^0.5", 80) == adv.SignFlip(9)
    assert ADV.parse_adversary("signflip:N^0.25", 20) == adv.SignFlip(2)  # round(20^0.25) = round(2.11)
    assert ADV.parse_adversary("signflip:N^0", 500) == adv.SignFlip(1)
    assert ADV.parse_adversary("offset:2:1.5", 40) == adv.Offset(2, 1.5)
    assert ADV.parse_adversary("honest:3", 40) == adv.Honest(3)
    assert ADV.exponent("noise:N^0.25") == 0.25 and ADV.exponent("noise:3") is None
    assert ADV.theory_slope("signflip:N^0.5") == pytest.approx(-0.6)
    assert ADV.theory_slope("signflip:2") == pytest.approx(-1.2)
    for bad in ("nope:2", "signflip", "signflip:N^1.5", "signflip:-1", "signflip:x", "offset:2:-1", "a:1:2:3"):
        with pytest.raises(ValueError, match="bad adversary spec"):
            ADV.parse_adversary(bad, 40)


def test_sweep_with_adversaries_writes_robust_rows(tmp_path: Path) -> None:
    spec = _spec(stragglers=("random:2", "worst:2"))
    pts, dropped = spec.plan()
    assert {pt.adversary for pt in pts} == {"signflip:N^0.5", "offset:1"}
    assert all(pt.straggler == "random:2" for pt in pts)
    assert dropped == ["adversaries with worst:2 (the worst-case search runs without adversaries): 8 points"]
    path = tmp_path / "adv.csv"
    res = run_sweep(spec, path, progress=False)
    assert res.ran == 8 and res.rows_written == 24
    assert path.read_text().splitlines()[0].split(",") == [*COLUMNS, *ADV_COLUMNS]
    rows = read_rows(path)
    flips = [r for r in rows if r["adversary"] == "signflip:N^0.5"]
    assert {(r["N"], r["A"]) for r in flips} == {(24, 5), (48, 7)}
    assert {r["A"] for r in rows if r["adversary"] == "offset:1"} == {1}
    # the rows are simulate's with that adversary (same inputs, stragglers and corruption draws)
    w = get_workload("toy-xsinx")
    X, _ = w.sample(6, np.random.default_rng(stable_seed("inputs", "toy-xsinx", 6, 1)))
    draw = stable_seed("draws", "toy-xsinx", 6, 48, "random:2", 1)
    recs = gencc.simulate(w.f, X, gencc.GCC(6, 48), gencc.FixedCount(2), trials=3, seed=draw,
                          adversaries=adv.SignFlip(7))
    mine = [r for r in rows if r["N"] == 48 and r["seed"] == 1 and r["adversary"] == "signflip:N^0.5"]
    assert [r["rel_mse"] for r in mine] == pytest.approx([r["rel_mse"] for r in recs], rel=1e-12)
    # 7 sign flips among 46 smooth results: all caught, the decode equals the one without them
    assert all(r["recall"] == 1.0 and r["false_alarms"] == 0 for r in mine)
    assert all(r["rel_mse"] == pytest.approx(r["rel_mse_excluded"], rel=1e-9) for r in mine)
    again = run_sweep(spec, path, progress=False)
    assert again.ran == 0


def test_adversarial_grid_resumes_into_a_plain_csv(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    run_sweep(_spec(adversaries=()), path, progress=False)
    plain = read_rows(path)
    assert path.read_text().splitlines()[0].split(",") == list(COLUMNS)
    res = run_sweep(_spec(adversaries=("noise:2",)), path, progress=False)
    assert res.skipped == 0 and res.ran == 4
    rows = read_rows(path)
    assert len(rows) == len(plain) + 12
    assert [r for r in rows if not r["adversary"]] == [{**r, **dict.fromkeys(ADV_COLUMNS)} for r in plain]
    # both grids are complete now: nothing reruns
    assert run_sweep(_spec(adversaries=()), path, progress=False).ran == 0
    assert run_sweep(_spec(adversaries=("noise:2",)), path, progress=False).ran == 0


def test_fits_match_a_least_squares_line_on_the_log_means() -> None:
    rows = []
    for N, vals in ((20, [1e-2, 3e-2]), (40, [2e-3, 4e-3]), (80, [1e-4, 5e-4]), (160, [2e-5, 2e-5])):
        for v in vals:
            rows.append(dict(workload="w", scheme="gcc", K=10, straggler="random:2", adversary="signflip:N^0.5",
                             N=N, A=int(round(N**0.5)), decodable=True, rel_mse=v, rel_mse_excluded=v / 2,
                             recall=1.0, false_alarms=0))
    (fit,) = ADV.fits(rows, n_boot=200)
    Ns = np.array([20, 40, 80, 160.0])
    means = np.array([2e-2, 3e-3, 3e-4, 2e-5])
    slope = np.polyfit(np.log(Ns), np.log(means), 1)[0]
    assert fit["slope"] == pytest.approx(slope, rel=1e-10)
    assert fit["slope_excluded"] == pytest.approx(slope, rel=1e-10)  # halving every value moves no slope
    assert fit["theory"] == pytest.approx(1.2 * (0.5 - 1))
    assert fit["lo"] <= fit["slope"] <= fit["hi"]
    (pt,) = [p for p in ADV.points(rows) if p["N"] == 40]
    assert pt["A"] == 6 and pt["rel_mse"] == pytest.approx(3e-3) and pt["rel_mse_excluded"] == pytest.approx(1.5e-3)


def test_adversarial_preset_end_to_end(tmp_path: Path) -> None:
    over = {"workloads": ("toy-xsinx",), "N": (24, 48), "seeds": (0,), "trials": 2}
    assert preset_spec("adversarial").adversaries == ("signflip:N^0.25", "signflip:N^0.5")
    res = reproduce("adversarial", tmp_path, over, progress=False, n_boot=100)
    assert res["sweep"].ran == 4 and res["rows"] == 8
    assert {f["adversary"] for f in res["adversarial_fits"]} == {"signflip:N^0.25", "signflip:N^0.5"}
    md = (tmp_path / "results.md").read_text()
    assert "## adversarial" in md and "figures/adversarial.png" in md and "| -0.90 |" in md and "| -0.60 |" in md
    assert "adversaries signflip:N^0.25, signflip:N^0.5" in md
    assert (tmp_path / "tables" / "adversarial-slopes.csv").exists()
    assert (tmp_path / "data" / "adversarial-points.csv").exists()
    assert run_point(preset_spec("adversarial", over).points()[0])  # a point runs on its own too
