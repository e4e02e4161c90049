"""The serving-sweep suite (benchmarks/serving_sweep.py): its simulator path and report on a few seconds of
virtual time (the sweep itself is a benchmark, never run in CI)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def sweep(load_benchmark):
    return load_benchmark("serving_sweep")


def test_sim_and_report(sweep, tmp_path, capsys):
    out = tmp_path / "sim.json"
    sweep.main(["sim", "--out", str(out), "--loads", "0.5", "--duration", "3", "--seeds", "1",
                "--schemes", "uncoded", "gcc-full", "gcc"])
    rows = json.loads(out.read_text())
    assert [r["scheme"] for r in rows] == ["uncoded", "gcc-full", "gcc"]
    for r in rows:
        assert r["p50"] <= r["p99"] <= r["p999"] and r["gap"] == pytest.approx(r["p999"] - r["p50"])
    assert rows[0]["tasks"] == 1.0 and rows[1]["tasks"] > 1.2  # uncoded: one task per request; coding adds
    md, png = tmp_path / "t.md", tmp_path / "f.png"
    sweep.main(["report", "--inputs", str(out), "--md", str(md), "--png", str(png)])
    assert "| 0.5 | gcc-full |" in md.read_text() and png.stat().st_size > 0


@pytest.mark.parametrize("argv", [["sim", "--out", "x.json", "--loads", "3.5"],
                                  ["sim", "--out", "x.json", "--schemes", "gcc-ful"],
                                  ["real", "--out", "x.json", "--schemes", "gcc-full"],
                                  ["sim", "--out", "x.json", "--gate", "on"],
                                  ["report", "--inputs", "x.json"]])
def test_bad_options_exit_2(sweep, argv, capsys):
    with pytest.raises(SystemExit) as e:
        sweep.main(argv)
    assert e.value.code == 2
