"""gencc sweep / plot / reproduce end to end on the analytic stand-in workloads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gencc.cli import app
from gencc.experiments import analysis as A
from gencc.experiments.presets import preset_spec
from gencc.experiments.reproduce import reproduce

runner = CliRunner()
TINY = {"workloads": "toy-xsinx", "ratios": "2,4,8", "seeds": "0:2", "trials": "3"}


def test_import_gencc_stays_light() -> None:
    code = ("import sys, gencc, gencc.experiments; "
            "print([m for m in ('matplotlib', 'typer', 'torch', 'rich') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sweep_then_plot_cli(tmp_path: Path) -> None:
    csv = tmp_path / "s.csv"
    args = ["sweep", "-w", "toy-xsinx,toy-softmax", "--K", "6", "--ratios", "2,3,4,6", "--stragglers",
            "worst:1,random:10%", "--seeds", "0:2", "--trials", "3", "-o", str(csv), "--no-progress"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "0 already in" in res.output
    res = runner.invoke(app, args)
    assert "run now" in res.output and " 0 run now" in res.output
    res = runner.invoke(app, ["plot", str(csv), "-o", str(tmp_path / "docs"), "--prefix", "t"])
    assert res.exit_code == 0, res.output
    figs = tmp_path / "docs" / "figures"
    for fam in ("worst", "random"):
        assert (figs / f"t-rate-{fam}.png").read_bytes()[:4] == b"\x89PNG"
    pts = A.read_csv(tmp_path / "docs" / "data" / "t-rate-points.csv")
    assert {p["N"] for p in pts} == {12, 18, 24, 36}
    slopes = A.read_csv(tmp_path / "docs" / "tables" / "t-rate-slopes.csv")
    assert {(s["scheme"], s["straggler"]) for s in slopes if s["range"] == "all"} == {
        (sch, st) for sch in ("gcc", "bacc") for st in ("worst:1", "random:10%")}
    assert (tmp_path / "docs" / "tables" / "t-configs.csv").exists()
    assert (figs / "t-redundancy.png").exists()


def test_plot_rejects_unknown_kind(tmp_path: Path) -> None:
    csv = tmp_path / "s.csv"
    runner.invoke(app, ["sweep", "-w", "toy-xsinx", "--K", "4", "--workers", "8", "-o", str(csv), "--no-progress"])
    res = runner.invoke(app, ["plot", str(csv), "-o", str(tmp_path), "--kind", "pie"])
    assert res.exit_code == 2 and "'--kind'" in res.output, res.output


def _tables(out: Path) -> dict[str, bytes]:
    files = [*(out / "tables").glob("*.csv"), *(out / "data").glob("*-points.csv")]
    return {p.name: p.read_bytes() for p in files}


@pytest.mark.slow
def test_reproduce_tiny_preset_end_to_end_and_deterministic(tmp_path: Path) -> None:
    res = reproduce("rate-worst", tmp_path / "a", TINY, jobs=1, progress=False, n_boot=200)
    assert res["sweep"].ran == len(preset_spec("rate-worst", TINY).points())
    md = (tmp_path / "a" / "results.md").read_text()
    assert "## rate-worst" in md and "GCC slope" in md and "figures/rate-worst.png" in md
    fits = res["rate_fits"]
    assert {f["straggler"] for f in fits} == {"worst:2", "worst:5"}
    # the same command twice (here: again into a new folder, with 2 processes) gives identical tables
    reproduce("rate-worst", tmp_path / "b", TINY, jobs=2, progress=False, n_boot=200)
    ta, tb = _tables(tmp_path / "a"), _tables(tmp_path / "b")
    assert ta and ta == tb
    # rerunning resumes: nothing recomputed, tables unchanged
    again = reproduce("rate-worst", tmp_path / "a", TINY, jobs=1, progress=False, n_boot=200)
    assert again["sweep"].ran == 0 and _tables(tmp_path / "a") == ta


@pytest.mark.slow
def test_reproduce_cli_other_presets(tmp_path: Path) -> None:
    out = str(tmp_path / "d")
    res = runner.invoke(app, ["reproduce", "--preset", "vs-S", "-o", out, "--no-progress", "--set",
                              "workloads=toy-xsinx", "--set", "seeds=0"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["reproduce", "--preset", "redundancy", "-o", out, "--no-progress", "--set",
                              "workloads=toy-softmax", "--set", "seeds=0", "--set", "trials=3"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["reproduce", "--preset", "rate-bernoulli", "-o", out, "--no-progress", "--set",
                              "workloads=toy-xsinx", "--set", "seeds=0", "--set", "trials=3", "--set",
                              "ratios=2,4,8"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "d" / "results.md").read_text()
    for section in ("## vs-S", "## redundancy", "## rate-bernoulli", "replication agreement", "log³"):
        assert section in md
    assert (tmp_path / "d" / "figures" / "vs-S.png").exists()
    timings = A.read_csv(tmp_path / "d" / "data" / "timings.csv")
    assert [t["preset"] for t in timings] == ["rate-bernoulli", "vs-S", "redundancy"]
    res = runner.invoke(app, ["reproduce", "--preset", "nope", "-o", out])
    assert res.exit_code != 0
    res = runner.invoke(app, ["reproduce", "--preset", "vs-S", "-o", out, "--set", "colour=red"])
    assert res.exit_code != 0


def test_sweep_k_frac_gives_k_per_n_and_refuses_bad_loads(tmp_path: Path) -> None:
    csv = tmp_path / "f.csv"
    res = runner.invoke(app, ["sweep", "-w", "toy-softmax", "--K", "", "--k-frac", "0.5", "--workers", "10,20",
                              "--stragglers", "random:20%", "--trials", "2", "-o", str(csv), "--no-progress"])
    assert res.exit_code == 0, res.output
    from gencc.experiments.sweep import read_rows

    assert sorted({(r["K"], r["N"], r["S"]) for r in read_rows(csv)}) == [(5, 10, 2), (10, 20, 4)]
    bad = runner.invoke(app, ["sweep", "-w", "toy-softmax", "--k-frac", "2", "--workers", "10", "-o",
                              str(tmp_path / "g.csv"), "--no-progress"])
    assert bad.exit_code == 2 and "'--k-frac'" in bad.output and "(0, 1]" in bad.output, bad.output
    none = runner.invoke(app, ["sweep", "-w", "toy-softmax", "--K", "", "--workers", "10", "-o",
                               str(tmp_path / "h.csv"), "--no-progress"])
    assert none.exit_code == 2 and "no K given" in none.output, none.output
    st = runner.invoke(app, ["reproduce", "--preset", "fixed-fraction", "-o", str(tmp_path), "--set", "K_frac=0"])
    assert st.exit_code == 2 and "K_frac values are loads" in st.output, st.output
