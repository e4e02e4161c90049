"""Parity models for a model gencc never saw: `gencc parity train` (metadata, resume, --packed-parity), and
`gencc serve` / Service refusing a parity file made for another model, another k or with changed weights."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from gencc.cli import app  # noqa: E402
from gencc.serving import Service  # noqa: E402
from gencc.workloads import parity_training as pt  # noqa: E402

runner = CliRunner()


def _out(res) -> str:
    """The command's output with the usage box's borders and line breaks gone."""
    return " ".join(res.output.replace("│", " ").split())


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])

USER = textwrap.dedent('''
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
            self.head = torch.nn.Linear(4 * 9, 5)

        def forward(self, x):
            return self.head(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).flatten(1))

    def make():
        torch.manual_seed(0)
        return Net().eval()

    def other():
        torch.manual_seed(1)
        return Net().eval()

    def plain(X):
        return X.reshape(len(X), -1)[:, :3]
''')


@pytest.fixture
def work(tmp_path, monkeypatch):
    (tmp_path / "parity_user_model.py").write_text(USER)
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(200, 1, 6, 6)))
    return tmp_path


def _train(*extra: str):
    return runner.invoke(app, ["parity", "train", "--model", "parity_user_model:make", "--data", "x.npy", "--K", "2",
                               "--out", "p.pt", "--epochs", "2", "--per-epoch", "1024", "--no-progress", *extra])


def test_train_writes_weights_and_checked_metadata(work):
    res = _train()
    assert res.exit_code == 0, res.output
    meta = json.loads((work / "p.json").read_text())
    assert meta["k"] == 2 and meta["packed"] is False and meta["model"].startswith("parity_user_model:make@sha256:")
    assert meta["weights_sha256"] == pt.file_sha256(work / "p.pt")
    assert set(meta["held_out"]) == {"parity_mse", "rel_mse", "agreement"} and meta["n_held_out"] == 20
    assert not (work / "p.ckpt").exists()
    # the parity model approximates the sum of f on held-out pairs better than f of the sum (its start)
    from gencc import as_model

    f = as_model("parity_user_model:make")
    parity = pt.load_parity_file(work / "p.pt", f, k=2)
    X = np.load(work / "x.npy")
    import pickle

    np.testing.assert_array_equal(pickle.loads(pickle.dumps(parity.factory))()(X[:4]), parity(X[:4]))
    pairs = np.random.default_rng(5).integers(0, len(X), size=(200, 2))
    target = f(X[pairs[:, 0]]) + f(X[pairs[:, 1]])
    S = X[pairs[:, 0]] + X[pairs[:, 1]]
    assert np.mean((parity(S) - target) ** 2) < np.mean((f(S) - target) ** 2)


def test_serve_refuses_another_models_or_ks_parity_file_and_changed_weights(work):
    assert _train().exit_code == 0
    base = ["serve", "--data", "x.npy", "--parity", "p.pt", "--port", _free_port()]
    res = runner.invoke(app, [*base, "--model", "parity_user_model:other", "--scheme", "sgcc-parity"])
    assert res.exit_code == 2 and "trained for model parity_user_model:make" in _out(res)
    res = runner.invoke(app, [*base, "--model", "parity_user_model:make", "--scheme", "parm", "--K", "3"])
    assert res.exit_code == 2 and "k=2" in _out(res) and "k=3" in _out(res)
    res = runner.invoke(app, ["serve", "--model", "parity_user_model:make", "--data", "x.npy", "--scheme",
                              "sgcc-parity", "--port", _free_port()])
    assert res.exit_code == 2 and "gencc parity train" in _out(res)
    state = torch.load(work / "p.pt")
    state[next(iter(state))] += 1
    torch.save(state, work / "p.pt")
    res = runner.invoke(app, [*base, "--model", "parity_user_model:make", "--scheme", "sgcc-parity"])
    assert res.exit_code == 2 and "sha256" in _out(res)
    assert "Traceback" not in _out(res)


def test_bad_input_exit_2_before_training(work):
    for args, words in ((["--model", "parity_user_model:nope"], "no attribute"),
                        (["--model", "parity_user_model:plain"], "torch model"),
                        (["--model", "parity_user_model:make", "--out", "p.json"], "weights file")):
        argv = ["parity", "train", "--data", "x.npy", "--out", "p.pt", *args]
        res = runner.invoke(app, argv)
        assert res.exit_code == 2 and words in _out(res), res.output
    np.save(work / "bad.npy", np.zeros((50, 2, 2)))
    res = runner.invoke(app, ["parity", "train", "--model", "parity_user_model:make", "--data", "bad.npy", "--out",
                              "p.pt"])
    assert res.exit_code == 2 and not (work / "p.pt").exists()


def test_an_interrupted_run_resumes_to_the_same_weights(work, monkeypatch):
    from gencc import as_model

    f = as_model("parity_user_model:make")
    X = np.load(work / "x.npy")
    full = pt.train_parity_model(f, X, 2, work / "a.pt", epochs=3, per_epoch=512, progress=False)
    real = pt.train_loop

    def interrupted(*args, save=None, **kw):
        calls = []

        def stop(state):
            save(state)
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt

        return real(*args, save=stop, **kw)

    monkeypatch.setattr(pt, "train_loop", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pt.train_parity_model(f, X, 2, work / "b.pt", epochs=3, per_epoch=512, progress=False)
    assert (work / "b.ckpt").exists() and not (work / "b.pt").exists()
    monkeypatch.setattr(pt, "train_loop", real)
    resumed = pt.train_parity_model(f, X, 2, work / "b.pt", epochs=3, per_epoch=512, progress=False)
    assert resumed["resumed"] and not full["resumed"]
    a, b = torch.load(work / "a.pt"), torch.load(work / "b.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # as if never interrupted


def test_packed_widens_the_first_layer_and_serves(work):
    from gencc import as_model

    f = as_model("parity_user_model:make")
    X = np.load(work / "x.npy")
    meta = pt.train_parity_model(f, X, 2, work / "k.pt", packed=True, epochs=1, per_epoch=256, progress=False)
    parity = pt.load_parity_file(work / "k.pt", f, k=2, packed=True)
    assert meta["packed"] and parity.in_shape == (2, 1, 6, 6) and parity.module.inner.conv.in_channels == 2
    svc = Service.build("parity_user_model:make", "sgcc-parity", workers=12, K=8, data=X, parity=parity,
                        packed_parity=True)
    try:
        answers = [svc.submit(x).result(timeout=30) for x in X[:8]]
    finally:
        svc.close()
    assert [a.status for a in answers] == [200] * 8
    for a, x in zip(answers, X[:8], strict=True):
        if not a.degraded:
            np.testing.assert_allclose(a.output, f(x[None])[0], rtol=1e-4, atol=1e-5)

    class Sliced(torch.nn.Module):  # its first layer sees part of the input: packing is not defined
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x[:, :2])

    with pytest.raises(ValueError, match="--packed-parity needs a model whose first layer"):
        pt.parity_module(as_model(Sliced(), input_shape=(3,)), 2, True)


def test_sgcc_calibration_takes_your_model_data_and_parity_file(work):
    from gencc.serving.parity import calibrate_sgcc

    assert _train().exit_code == 0
    X = np.load(work / "x.npy")
    cal = calibrate_sgcc("parity_user_model:make", 8, 12, work / "p.pt", n_sets=20, data=X)
    assert set(cal) == {"length_scale", "rho"} and all(np.isfinite(v) and v > 0 for v in cal.values())
    with pytest.raises(ValueError, match="trained for model"):
        calibrate_sgcc("parity_user_model:other", 8, 12, work / "p.pt", n_sets=20, data=X)
