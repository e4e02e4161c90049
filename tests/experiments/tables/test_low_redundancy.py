"""The low-redundancy table: exact expectation over straggler sets, worst adjacent pair, the preset's plumbing."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import gencc
from gencc.cli import app
from gencc.experiments.analysis import write_csv
from gencc.experiments.tables import low_redundancy as lowred

W = np.random.default_rng(5).normal(size=(3, 4))


def f(X):
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    return np.tanh(X @ W.T) * 3


f.batched = True


@pytest.mark.parametrize("code", [gencc.GCC(4, 6), gencc.SystematicGCC(4, 6), gencc.ParM(4, 2)])
def test_evaluate_matches_decoding_every_straggler_set(code):
    rng = np.random.default_rng(0)
    sets = [rng.normal(size=(4, 4)) for _ in range(3)]
    res = lowred.evaluate(code, f, sets, Ss=(1, 2))
    for b, X in enumerate(sets):
        Y, truth = f(code.encode(X)), f(X)
        for S in (1, 2):
            vals = []
            for lost in combinations(range(code.N), S):
                ret = np.setdiff1d(np.arange(code.N), lost)
                vals.append(gencc.metrics.rel_mse(code.decode(Y[ret], ret), truth))
            assert res[f"S={S}"][0][b] == pytest.approx(np.mean(vals), rel=1e-9)
        pairs = []
        for n in range(code.N - 1):
            ret = np.setdiff1d(np.arange(code.N), [n, n + 1])
            pairs.append(gencc.metrics.rel_mse(code.decode(Y[ret], ret), truth))
        assert res["adjacent"][0][b] == pytest.approx(max(pairs), rel=1e-9)


def test_ordered_sets_are_distinct_inputs_in_chain_order():
    pool = np.random.default_rng(1).normal(size=(50, 6))
    sets = lowred.ordered_sets(pool, 7, 3, seed=4)
    assert len(sets) == 3
    for X in sets:
        assert X.shape == (7, 6) and np.unique(X, axis=0).shape[0] == 7
        np.testing.assert_array_equal(gencc.order_inputs(X), np.arange(7))


def test_section_renders_the_table(tmp_path: Path):
    row = {"workload": "digits-cnn", "K": 10, "N": 15, "scheme": "BACC", "sets": 3}
    for c in lowred.COLUMNS:
        row.update({f"{c} rel_mse": 0.01, f"{c} rel_mse_ci": 0.002, f"{c} agreement": 0.99})
    write_csv(tmp_path / "tables" / "low-redundancy.csv",
              [row, {**row, "scheme": "SystematicGCC", "rho": 0.01, "ell": 0.15}])
    lines = lowred.section(tmp_path)
    assert lines[0] == lowred.DESCRIPTION and "3 sets" in lines[2]
    assert any(line.startswith("| digits-cnn | 10, 15 | SystematicGCC | 0.0100 ± 0.0020 (0.990)") for line in lines)
    assert lowred.section(tmp_path / "nothing") == []


@pytest.mark.parametrize("args, match", [
    (["--set", "colour=red"], "cannot override"),
    (["--set", "sets=1"], "at least 2"),
    (["--set", "workloads=xsinx"], "runs on"),
])
def test_preset_bad_overrides_exit_2(tmp_path: Path, args, match):
    res = CliRunner().invoke(app, ["reproduce", "--preset", "low-redundancy", "-o", str(tmp_path), *args])
    assert res.exit_code == 2 and match in res.output


def test_table_on_the_digits_cnn():
    """A small real run: the schemes at N/K = 1.5 on three input sets, rho calibrated on training inputs."""
    pytest.importorskip("torch")
    rows = lowred.run_table(sets=3, workloads=["digits-cnn"], settings=[(10, 15)])
    by = {r["scheme"]: r for r in rows}
    old = "GCC, interpolating decoder (the default before)"
    assert set(by) == {"GCC (default)", old, "BACC", "replication", "ParM k=2 (trained parity)",
                       "ParM k=2, packed parity (k inputs per query)", "SystematicGCC (untrained)",
                       "SystematicGCC + parity", "SystematicGCC + packed parity"}
    for r in rows:
        for c in lowred.COLUMNS:
            assert 0 <= r[f"{c} rel_mse"] < 2 and r[f"{c} rel_mse_ci"] >= 0 and 0 <= r[f"{c} agreement"] <= 1
    assert 0 < by["SystematicGCC (untrained)"]["rho"] < 1
    assert by["SystematicGCC (untrained)"]["S=1 rel_mse"] < by[old]["S=1 rel_mse"]
    assert by["GCC (default)"]["S=1 rel_mse"] < by[old]["S=1 rel_mse"]
    assert by["SystematicGCC + parity"]["S=2 rel_mse"] < by["ParM k=2 (trained parity)"]["S=2 rel_mse"]
    packed = by["SystematicGCC + packed parity"]
    assert packed["S=2 rel_mse"] < by["ParM k=2, packed parity (k inputs per query)"]["S=2 rel_mse"]
    assert packed["train_s"] > 0 and 0 < packed["rho"] < 1
    md = lowred.markdown(rows)
    assert len(md) == 2 + len(rows)


def test_sweep_runs_sgcc(tmp_path: Path):
    out = tmp_path / "s.csv"
    res = CliRunner().invoke(app, ["sweep", "-w", "xsinx", "--scheme", "sgcc,gcc", "--K", "4", "--workers", "6",
                                   "--stragglers", "random:1", "--trials", "3", "-o", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    from gencc.experiments.sweep import read_rows

    rows = read_rows(out)
    assert {r["scheme"] for r in rows} == {"sgcc", "gcc"} and len(rows) == 6
    assert all(r["decodable"] and np.isfinite(r["rel_mse"]) for r in rows)
    assert rows[0]["code"].startswith("SystematicGCC(K=4, N=6")


@pytest.mark.parametrize("K, N, ok", [(8, 10, True), (10, 15, True), (8, 16, True), (8, 8, False), (8, 17, False),
                                      (1, 2, False), (10, 5, False)])
def test_check_setting(K, N, ok):
    if ok:
        assert lowred.check_setting(K, N) == (K, N)
    else:
        with pytest.raises(ValueError, match="2 <= K < N <= 2K"):
            lowred.check_setting(K, N)
