"""`gencc train`: a short run writes its history and plot; bad options exit 2 naming the option, before any work."""

import csv
import re

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


# (arguments, the option named, a fragment of the message): refused with exit 2 before the workload loads
BAD = [
    (["--scheme", "fastest"], "--scheme", "unknown scheme 'fastest'; choose one of"),
    (["--workload", "imagenet"], "--workload", "unknown training workload 'imagenet'"),
    (["--workers", "0"], "--workers", "must be an integer >= 1, got 0"),
    (["--steps", "0"], "--steps", "must be an integer >= 1, got 0"),
    (["--stragglers", "slow"], "--stragglers", "unknown part 'slow'"),
    (["--stragglers", "bernoulli:p=2"], "--stragglers", "bernoulli: p must be a probability"),
    (["--stragglers", "9"], "--stragglers", "stragglers as a count must lie in [0, N - 1 = 7]"),
    (["--optimizer", "lbfgs"], "--optimizer", "unknown optimizer 'lbfgs'"),
    (["--gc-kind", "mds"], "--gc-kind", "unknown gradient code 'mds'"),
    (["--placement", "random"], "--placement", "unknown placement 'random'"),
    (["--tolerate", "8"], "--tolerate", "tolerate must be an integer in [0, N - 1 = 7]"),
    (["--scheme", "gcc", "--K", "99"], "--K", "partitions must be an integer in [1, N = 8]"),
    (["--scheme", "gc", "--gc-kind", "frc", "--workers", "5"], "--gc-kind", "needs s + 1 to divide N"),
    (["--scheme", "agc", "--workers", "5"], "--workers", "which must divide N = 5"),
    (["--address", "127.0.0.1:6379"], "--address", "address needs backend ray"),
    (["--slow-fraction", "1"], "--slow-fraction", "must be a probability in [0, 1)"),
    (["--slow-factor", "3"], "--slow-factor", "applies with --slow-fraction > 0"),
    (["--stragglers", "persistent:fraction=0.2", "--slow-fraction", "0.1"], "--slow-fraction",
     "stragglers already holds a PersistentStragglers"),
    (["--lr", "-1"], "--lr", "must be a finite number > 0, got -1"),
    (["--backend", "mpi"], "--backend", "unknown backend 'mpi'"),
    (["--scheme", "sync", "--opt", "gcc.colluders=1"], "--opt", "sync is a baseline and runs no code"),
    (["--scheme", "gcc", "--opt", "gcc.colluders=x"], "--opt", "gcc.colluders takes an integer >= 0; got 'x'"),
    (["--scheme", "gcc", "--opt", "gcc.nosuch=1"], "--opt", "nosuch"),
]


@pytest.mark.parametrize("args,option,fragment", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_options_exit_2_naming_the_option(tmp_path, monkeypatch, args, option, fragment):
    import gencc.training.workloads

    def slow(*a, **k):
        raise AssertionError("the workload loaded before the options were checked")

    monkeypatch.setattr(gencc.training.workloads, "train_workload", slow)
    out = tmp_path / "hist.csv"
    r = runner.invoke(app, ["train", *args, "--out", str(out)], terminal_width=200)
    assert r.exit_code == 2, r.output
    flat = " ".join(" ".join(ln.strip(" │╭╮╰╯─") for ln in r.output.splitlines()).split())
    assert f"Invalid value for '{option}'" in flat, r.output
    assert fragment in flat, r.output
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
                                "--slow-fraction", "0.5", "--slow-factor", "2", "--sample-ms", "0.1"])
        assert r.exit_code == 0, r.output
        assert "digits-logreg ignore: N=4" in r.output
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "gencc.cli"]
    assert warned == ["--K is not used by --scheme ignore (only gcc and bacc code K partitions of the data); running "
                      "without it"] * 2


#: a model of the user's own, written by the test into a module of its own, importable by path from the folder
USER_MODEL = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.body(x)


def make():
    return TinyNet()
'''


def _user_files(tmp_path, monkeypatch, n=90):
    """The module gencc_user_tinynet (TinyNet, make) in tmp_path (the current directory: --model imports from it),
    and 3-class data X.npy (n, 4) / y.npy (n,) whose class is the argmax of the first three features."""
    import numpy as np

    (tmp_path / "gencc_user_tinynet.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    X = np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", np.argmax(X[:, :3], axis=1))
    return tmp_path / "X.npy", tmp_path / "y.npy"


def test_train_trains_a_model_of_the_users_own(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    X, y = _user_files(tmp_path, monkeypatch)
    out = tmp_path / "hist.csv"
    r = runner.invoke(app, ["train", "--model", "gencc_user_tinynet:make", "--data", str(X), "--labels", str(y),
                            "--scheme", "gcc", "--workers", "4", "--stragglers", "1", "--delay-ms", "1",
                            "--steps", "6", "--eval-every", "3", "--lr", "0.5", "--out", str(out),
                            "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "TinyNet gcc: N=4 K=2 tolerate=1" in r.output and "final test accuracy" in r.output, r.output
    assert "time to" not in r.output  # no target accuracy for a model of the user's own
    assert out.read_text().splitlines()[0].startswith("step,wall_s")
    assert len(out.read_text().splitlines()) == 1 + 6


def test_train_places_private_shards_of_the_users_own_data(tmp_path, monkeypatch):
    """--opt gcc.colluders=1: the shards carry masks, and the summary says what a colluding worker learns."""
    pytest.importorskip("torch")
    X, y = _user_files(tmp_path, monkeypatch)
    r = runner.invoke(app, ["train", "--model", "gencc_user_tinynet:make", "--data", str(X), "--labels", str(y),
                            "--scheme", "gcc", "--workers", "6", "--stragglers", "1", "--delay-ms", "1",
                            "--steps", "3", "--opt", "gcc.colluders=1", "--opt", "gcc.mask_scale=4",
                            "--no-progress"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    m = re.search(r"private shards: 1 colluding worker\(s\) learn at most ([0-9.e+-]+) bits per input coordinate "
                  r"\(mask_scale 4\)", flat)
    assert m and 0 < float(m.group(1)) < 20, flat


@pytest.mark.parametrize(("args", "option", "message"), [
    (["--workload", "digits-cnn"], "--workload", "give --workload (a built-in workload) or --model (your own torch "
                                                 "module), not both"),
    (["--labels", "missing.npy"], "--labels", "labels file missing.npy does not exist"),
    (["--labels", "X.npy"], "--labels", "need one label per input of --data (90 inputs), got an array of shape "
                                        "(90, 4)"),
    (["--data", "missing.npy"], "--data", "missing.npy does not exist"),
    (["--model", "gencc_user_tinynet:nope"], "--model", "nope"),
    (["--model", "tiny.pt2"], "--model", "gencc train trains a torch module you define"),
])
def test_train_refuses_a_bad_model_of_the_users_own(tmp_path, monkeypatch, args, option, message):
    pytest.importorskip("torch")
    X, y = _user_files(tmp_path, monkeypatch)
    base = {"--model": "gencc_user_tinynet:make", "--data": str(X), "--labels": str(y)}
    given = dict(zip(args[::2], args[1::2], strict=True))
    argv = [x for k, v in {**base, **given}.items() if k != "--workload" for x in (k, v)]
    if "--workload" in given:
        argv += ["--workload", given["--workload"]]
    r = runner.invoke(app, ["train", *argv, "--steps", "1", "--no-progress"])
    flat = " ".join(r.output.split())
    assert r.exit_code == 2 and f"'{option}'" in flat and message in flat, r.output


@pytest.mark.parametrize("option", ["--data", "--labels"])
def test_data_and_labels_go_with_model(option):
    r = runner.invoke(app, ["train", option, "x.npy", "--no-progress"])
    assert r.exit_code == 2 and f"{option} goes with --model" in " ".join(r.output.split()), r.output
