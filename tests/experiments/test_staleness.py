"""`gencc reproduce --check`: fails on a hand-edited table, passes on a fresh regenerate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gencc.cli import app
from gencc.experiments.presets import PRESETS, TABLE_PRESETS
from gencc.experiments.reproduce import reproduce
from gencc.experiments.staleness import CHEAP, check, diff_csv

runner = CliRunner()
TINY = {"workloads": "toy-xsinx", "seeds": "0", "K": "4", "N": "12", "stragglers": "worst:1,worst:2,worst:3"}
SET = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]


@pytest.mark.slow
def test_check_fails_on_a_hand_edit_and_passes_after_a_fresh_regenerate(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    reproduce("vs-S", docs, TINY, progress=False)
    res = check(docs, ["vs-S"], TINY)
    assert res.ok, res.differ
    assert res.not_checked == [n for n in (*PRESETS, *TABLE_PRESETS) if n != "vs-S"]

    edited = tmp_path / "edited"
    shutil.copytree(docs, edited)
    table = edited / "tables" / "vs-S-slopes.csv"
    head, first, *rest = table.read_text().splitlines()
    cols = first.split(",")
    i = head.split(",").index("slope")
    cols[i] = repr(float(cols[i]) * 1.01)  # a 1% hand edit of one slope
    table.write_text("\n".join([head, ",".join(cols), *rest]) + "\n")
    res = check(edited, ["vs-S"], TINY)
    assert list(res.differ) == ["tables/vs-S-slopes.csv"]
    assert res.differ["tables/vs-S-slopes.csv"].startswith("row 1, slope:")

    cli = runner.invoke(app, ["reproduce", "--check", "--preset", "vs-S", "-o", str(edited), "--no-progress", *SET])
    assert cli.exit_code == 1, cli.output
    assert f"differs: {table}" in cli.output
    assert f"rm -f {edited}/data/sweeps/vs-S.csv && gencc reproduce --preset vs-S --out {edited}" in cli.output
    assert "not rechecked: rate-worst" in cli.output

    # the command it prints regenerates from scratch; then the check passes
    (edited / "data" / "sweeps" / "vs-S.csv").unlink()
    reproduce("vs-S", edited, TINY, progress=False)
    cli = runner.invoke(app, ["reproduce", "--check", "--preset", "vs-S", "-o", str(edited), "--no-progress", *SET])
    assert cli.exit_code == 0, cli.output
    assert "up to date" in cli.output


@pytest.mark.slow
def test_check_sees_a_stale_sweep_and_results_md(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    reproduce("vs-S", docs, TINY, progress=False)
    sweep = docs / "data" / "sweeps" / "vs-S.csv"
    head, first, *rest = sweep.read_text().splitlines()
    cols = first.split(",")
    i = head.split(",").index("rel_mse")
    cols[i] = repr(float(cols[i]) * 2)
    sweep.write_text("\n".join([head, ",".join(cols), *rest]) + "\n")
    md = docs / "results.md"
    md.write_text(md.read_text().replace("Fitted slope", "Fitted  slope", 1))
    res = check(docs, ["vs-S"], TINY)
    assert set(res.differ) == {"data/sweeps/vs-S.csv", "results.md"}


@pytest.mark.slow
def test_check_covers_a_table_preset_and_its_generated_page(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    tiny = {"batches": "2", "trials": "2", "S": "1"}
    docs = tmp_path / "docs"
    reproduce("parm", docs, tiny, progress=False)
    assert check(docs, ["parm"], tiny).ok
    page = docs / "generated" / "parm.md"
    page.write_text(page.read_text().replace("| 1 | GCC |", "| 1 | GCC (edited) |"))
    res = check(docs, ["parm"], tiny)
    assert list(res.differ) == ["generated/parm.md"] and "GCC (edited)" in res.differ["generated/parm.md"]
    results = docs / "results.md"
    results.write_text(results.read_text().replace("| 1 | GCC |", "| 1 | GCC (edited) |"))
    assert set(check(docs, ["parm"], tiny).differ) == {"generated/parm.md", "results.md"}


@pytest.mark.slow
def test_default_check_passes_grid_overrides_to_sweep_presets_only(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from gencc.experiments import staleness
    from gencc.experiments.tables import parm

    monkeypatch.setattr(parm, "DEFAULTS", {"batches": 2, "trials": 2, "S": (1,)})  # a tiny default grid
    docs = tmp_path / "docs"
    reproduce("vs-S", docs, TINY, progress=False)
    reproduce("parm", docs, None, progress=False)
    with pytest.raises(ValueError, match="cannot override 'workloads' in parm"):
        reproduce("parm", docs, TINY, progress=False)
    monkeypatch.setattr(staleness, "CHEAP", ("vs-S", "parm"))
    res = check(docs, None, TINY)
    assert res.ok, res.differ
    assert res.checked == ["vs-S", "parm"]


def test_diff_csv_tolerates_last_bit_noise_and_ignores_skipped_columns(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("x,t,name\n0.1,1.0,gcc\n")
    b.write_text("x,t,name\n0.10000000000000002,2.0,gcc\n")
    assert diff_csv(a, b, skip=("t",)) is None
    assert diff_csv(a, b) == "row 1, t: 1.0 committed, 2.0 rebuilt"
    b.write_text("x,t,name\n0.1,1.0,bacc\n")
    assert diff_csv(a, b) == "row 1, name: gcc committed, bacc rebuilt"


def test_cheap_presets_are_presets() -> None:
    assert set(CHEAP) < {*PRESETS, *TABLE_PRESETS} and "rate-worst" not in CHEAP
    assert not {"gcc-defaults", "robust", "low-redundancy"} & set(CHEAP)  # minutes each: not in CI's check


def test_diff_csv_compares_a_trained_workloads_rows_by_text_when_its_model_moved(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("workload,scheme,rel_mse\ndigits-cnn,gcc,0.013\nxsinx,gcc,0.002\n")
    b.write_text("workload,scheme,rel_mse\ndigits-cnn,gcc,0.017\nxsinx,gcc,0.002\n")
    assert diff_csv(a, b) == "row 1, rel_mse: 0.013 committed, 0.017 rebuilt"
    assert diff_csv(a, b, values_of_trained=False) is None  # another model's figure: its shape is compared
    b.write_text("workload,scheme,rel_mse\ndigits-cnn,gcc,0.017\nxsinx,gcc,0.00202\n")
    assert diff_csv(a, b, values_of_trained=False) == "row 2, rel_mse: 0.002 committed, 0.00202 rebuilt"
    b.write_text("workload,scheme,rel_mse\ndigits-cnn,bacc,0.017\nxsinx,gcc,0.002\n")
    assert diff_csv(a, b, values_of_trained=False) == "row 1, scheme: gcc committed, bacc rebuilt"
    a.write_text("S,scheme,rel_mse\n1,GCC,0.5\n")  # no workload column: every row is the trained model's
    b.write_text("S,scheme,rel_mse\n1,GCC,0.7\n")
    assert diff_csv(a, b, values_of_trained=False) is None and diff_csv(a, b) is not None


@pytest.mark.slow
def test_check_with_another_trained_model_still_checks_analytic_rows_by_value(tmp_path: Path, monkeypatch) -> None:
    from gencc.experiments import provenance

    monkeypatch.setattr(provenance, "fingerprints", lambda w=None: {"digits-cnn": "a" * 64})
    docs = tmp_path / "docs"
    reproduce("vs-S", docs, TINY, progress=False)
    assert provenance.read(docs, "vs-S") == {"digits-cnn": "a" * 64}
    monkeypatch.setattr(provenance, "fingerprints", lambda w=None: {"digits-cnn": "b" * 64})  # as on another processor
    res = check(docs, ["vs-S"], TINY)
    assert res.ok, res.differ
    assert res.models == {"vs-S": {"digits-cnn": ("a" * 64, "b" * 64)}}
    cli = runner.invoke(app, ["reproduce", "--check", "--preset", "vs-S", "-o", str(docs), "--no-progress", *SET])
    assert cli.exit_code == 0 and "trained models differ from those vs-S's figures were built with" in cli.output

    table = docs / "tables" / "vs-S-slopes.csv"  # the toy workload's slope is still compared by value
    head, first, *rest = table.read_text().splitlines()
    cols = first.split(",")
    i = head.split(",").index("slope")
    cols[i] = repr(float(cols[i]) * 1.01)
    table.write_text("\n".join([head, ",".join(cols), *rest]) + "\n")
    page = docs / "generated" / "vs-S.md"
    page.write_text(page.read_text().replace("| toy-xsinx |", "| toy-xsinx (edited) |", 1))
    res = check(docs, ["vs-S"], TINY)
    assert set(res.differ) == {"tables/vs-S-slopes.csv", "generated/vs-S.md"}


def test_diff_csv_takes_two_rounding_level_values_as_equal(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("workload,rel_mse_q10\nxsinx,2.29e-31\n")
    b.write_text("workload,rel_mse_q10\nxsinx,6.67e-30\n")  # an exact decode's rounding on two processors
    assert diff_csv(a, b) is None
    b.write_text("workload,rel_mse_q10\nxsinx,3e-20\n")
    assert diff_csv(a, b) == "row 1, rel_mse_q10: 2.29e-31 committed, 3e-20 rebuilt"
