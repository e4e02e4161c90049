"""Fixed-fraction sweeps: K as a fraction of N in the grid, the preset's spec, and its tables, figure and page from
a tiny override grid run through `reproduce`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gencc.experiments import analysis as A
from gencc.experiments import fraction
from gencc.experiments.plots import detect_kinds
from gencc.experiments.presets import preset_spec
from gencc.experiments.reproduce import reproduce
from gencc.experiments.sweep import SweepSpec, parse_straggler, read_rows


def test_k_frac_gives_k_as_a_fraction_of_n() -> None:
    spec = SweepSpec(workloads=("toy-xsinx",), K=(), K_frac=(0.25, 0.5), N=(8, 20, 40), stragglers=("worst:20%",))
    pairs = [(pt.K, pt.N) for pt in spec.points() if pt.scheme == "gcc"]
    assert pairs == [(2, 8), (5, 20), (10, 40), (4, 8), (10, 20), (20, 40)]
    # with K as well: the union, a point in both listed once
    both = SweepSpec(workloads=("toy-xsinx",), schemes=("gcc",), K=(10,), N=(20, 40), K_frac=(0.5,))
    assert sorted((pt.K, pt.N) for pt in both.points()) == [(10, 20), (10, 40), (20, 40)]
    assert SweepSpec(workloads=("toy-xsinx",), K=(), K_frac=(0.01,), N=(20,)).plan()[1] == [
        "K=0 at N=20 (K_frac too small: a code needs K >= 1): 2 points"]
    assert SweepSpec(workloads=("toy-xsinx",), K=(), K_frac=(0.5,)).plan() == ([], ["no N given"])
    assert SweepSpec(workloads=("toy-xsinx",), K=(), N=(10,)).plan() == ([], ["no K or K_frac given"])
    with pytest.raises(ValueError, match=r"K_frac values are loads K / N in \(0, 1\]"):
        SweepSpec(workloads=("toy-xsinx",), K_frac=(1.5,), N=(10,))


def test_preset_spec_is_the_issue_grid() -> None:
    spec = preset_spec("fixed-fraction")
    pts = spec.points()
    assert {pt.K / pt.N for pt in pts} == {0.25, 0.5} and max(pt.N for pt in pts) == 200
    assert {pt.scheme for pt in pts} == {"gcc", "bacc"} and not any(pt.opts for pt in pts)
    rhos = {parse_straggler(pt.straggler, pt.N).S / pt.N for pt in pts if pt.N == 200}
    assert rhos == {0.05, 0.1, 0.2}
    assert {pt.straggler.split(":")[0] for pt in pts} == {"worst", "worst-agreement", "random"}
    assert {pt.workload for pt in pts} == {"digits-cnn", "mnist1d-cnn"}
    small = preset_spec("fixed-fraction", ["K_frac=0.5", "N=10,20", "workloads=toy-softmax"])
    assert sorted({(pt.K, pt.N) for pt in small.points()}) == [(5, 10), (10, 20)]


def test_tiny_override_grid_writes_table_figure_and_page(tmp_path: Path) -> None:
    sets = ["workloads=toy-softmax", "N=10,20,30", "K_frac=0.5", "stragglers=worst:20%,worst-agreement:20%,random:10%",
            "seeds=0,1", "trials=3"]
    res = reproduce("fixed-fraction", tmp_path, sets, progress=False, n_boot=50)
    rows = read_rows(tmp_path / "data" / "sweeps" / "fixed-fraction.csv")
    assert "fraction" in detect_kinds(rows)
    assert (tmp_path / "figures" / "fixed-fraction.png").stat().st_size > 0
    cmp = A.read_csv(tmp_path / "tables" / "fixed-fraction-gcc-vs-bacc.csv")
    assert len(cmp) == 3 * 3  # (straggler, N)
    # an independent recomputation of one cell from the raw rows
    for c in cmp:
        def mean(scheme: str, col: str, c: dict = c) -> float:
            return float(np.mean([r[col] for r in rows if r["scheme"] == scheme and r["N"] == c["N"]
                                  and r["straggler"] == c["straggler"]]))
        assert c["gcc_rel_mse"] == pytest.approx(mean("gcc", "rel_mse"))
        assert c["bacc_agreement"] == pytest.approx(mean("bacc", "agreement"))
        assert c["a_at_or_below_b"] == (c["gcc_rel_mse"] <= c["bacc_rel_mse"])
        assert c["K"] == c["N"] // 2 and c["S"] == parse_straggler(c["straggler"], c["N"]).S
    assert {c["rho"] for c in cmp} == {0.2, 0.1} and {c["pattern"] for c in cmp} == {"worst", "worst-agreement",
                                                                                      "random"}
    least = {(c["N"], c["pattern"]): c for c in cmp}
    for N in (10, 20, 30):  # each scheme's set of least agreement agrees no more than its set of largest rel_mse
        assert least[N, "worst-agreement"]["gcc_agreement"] <= least[N, "worst"]["gcc_agreement"]
        assert least[N, "worst-agreement"]["bacc_agreement"] <= least[N, "worst"]["bacc_agreement"]
    assert res["fraction_compare"] and len(res["fraction_points"]) == 2 * 3 * 3
    page = (tmp_path / "generated" / "fixed-fraction.md").read_text()
    assert "K = N x [0.25, 0.5]" in page and "| toy-softmax | 0.5 | worst:20% |" in page
    assert "- worst: GCC's mean rel_mse at or below BACC's at" in page
    assert "- worst-agreement: GCC's mean agreement at least BACC's - 0.02 at" in page
    assert "| toy-softmax | 0.5 | worst-agreement:20% |" in page  # in the agreement table only
    assert page.count("| toy-softmax | 0.5 | worst-agreement:20% |") == 1
    assert "## fixed-fraction" in (tmp_path / "results.md").read_text()


def test_rho_and_support() -> None:
    assert fraction.rho("worst:10%") == 0.1
    assert fraction.rho("worst:3") is None and fraction.rho("bernoulli:0.1") is None
    row = {"workload": "w", "scheme": "gcc", "straggler": "random:10%", "S": 2, "K": 5}
    assert not fraction.supported([dict(row, N=n) for n in (10, 20)])
    assert fraction.supported([dict(row, N=n, K=n // 2) for n in (10, 20, 40)])
    assert not fraction.supported([dict(row, N=n) for n in (10, 20, 40)])  # K fixed: K/N changes
