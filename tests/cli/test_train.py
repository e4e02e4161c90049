"""`gencc train`: a short run writes its history and plot; bad options exit 2 naming the option, before any work."""

import csv

import pytest
from typer.testing import CliRunner

from gencc.cli import app

runner = CliRunner()


def test_train_writes_history_and_plot(tmp_path):
    out, fig = tmp_path / "hist.csv", tmp_path / "figs"
    r = runner.invoke(app, ["train", "--workload", "digits-logreg", "--scheme", "gc", "--workers", "4",
                            "--stragglers", "1", "--steps", "6", "--eval-every", "3", "--track-grad-error",
                            "--out", str(out), "--plot", str(fig)])
    assert r.exit_code == 0, r.output
    assert "digits-logreg gc: N=4 K=4 tolerate=1 wait_for=3" in r.output
    rows = list(csv.DictReader(out.open()))
    assert [int(x["step"]) for x in rows] == list(range(1, 7))
    assert all(float(x["grad_rel_err"]) < 1e-8 for x in rows)  # float32: exact up to rounding
    assert rows[2]["eval_acc"] and not rows[0]["eval_acc"] and len(rows[0]["returned"].split()) >= 3
    assert (fig / "train-digits-logreg-gc.png").stat().st_size > 1000


@pytest.mark.parametrize("args,option", [
    (["--scheme", "fastest"], "--scheme"),
    (["--workload", "imagenet"], "--workload"),
    (["--workers", "0"], "--workers"),
    (["--steps", "0"], "--steps"),
    (["--stragglers", "slow"], "--stragglers"),
    (["--stragglers", "9"], "--stragglers"),
    (["--optimizer", "lbfgs"], "--optimizer"),
    (["--scheme", "gcc", "--K", "99"], "--K"),
    (["--address", "127.0.0.1:6379"], "--address"),
    (["--slow-fraction", "1"], "--slow-fraction"),
    (["--lr", "-1"], "--lr"),
    (["--backend", "mpi"], "--backend"),
])
def test_bad_options_exit_2_naming_the_option(tmp_path, args, option):
    out = tmp_path / "hist.csv"
    r = runner.invoke(app, ["train", *args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert option in r.output
    assert not out.exists()


def test_missing_output_folder_is_refused(tmp_path):
    r = runner.invoke(app, ["train", "--out", str(tmp_path / "nope" / "h.csv")])
    assert r.exit_code == 2 and "--out" in r.output


def test_the_shared_vocabulary_runs_every_scheme(tmp_path, caplog):
    """`--backend local` (and its alias threads), --K for a scheme without partitions (said in one warning line),
    and the injected slowness --slow-fraction / --slow-factor all run."""
    import logging

    caplog.set_level(logging.WARNING, logger="gencc.cli")
    for backend in ("local", "threads"):
        r = runner.invoke(app, ["train", "--workload", "digits-logreg", "--scheme", "ignore", "--workers", "4",
                                "--K", "2", "--steps", "3", "--eval-every", "3", "--backend", backend,
                                "--slow-fraction", "0.5", "--slow-factor", "2", "--sample-s", "0.0001"])
        assert r.exit_code == 0, r.output
        assert "digits-logreg ignore: N=4" in r.output
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "gencc.cli"]
    assert warned == ["--K is not used by --scheme ignore (only gcc and bacc code K partitions of the data); running "
                      "without it"] * 2
