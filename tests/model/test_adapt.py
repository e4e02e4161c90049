"""gencc.as_model on models gencc never saw (defined here): torch modules, callables, import paths, saved files;
the entry points (run, simulate, Service) taking them directly."""

from __future__ import annotations

import pickle
import re
import sys
import textwrap

import numpy as np
import pytest

import gencc

torch = pytest.importorskip("torch")

K, N = 8, 12


class Tiny(torch.nn.Module):
    """A model gencc never saw: conv, pool, linear on 1x6x6 images, 5 outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.head = torch.nn.Linear(4 * 9, 5)

    def forward(self, x):
        return self.head(torch.nn.functional.max_pool2d(torch.tanh(self.conv(x)), 2).flatten(1))


def tiny(seed: int = 0) -> Tiny:
    torch.manual_seed(seed)
    return Tiny().eval()


def reference(module, X: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.as_tensor(X, dtype=torch.float32)).double().numpy()


X = np.random.default_rng(0).normal(size=(K, 1, 6, 6))


def test_a_module_runs_numpy_in_numpy_out_and_torch_in_torch_out():
    net = tiny()
    m = gencc.as_model(net)
    assert m.batched and m.in_shape is None
    Y = m(X)
    assert Y.dtype == np.float64 and m.in_shape == (1, 6, 6) and m.out_shape == (5,)
    np.testing.assert_allclose(Y, reference(net, X), rtol=1e-6, atol=1e-6)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    Yt = m(Xt)
    assert isinstance(Yt, torch.Tensor) and Yt.dtype == torch.float64 and not Yt.requires_grad
    np.testing.assert_allclose(Yt.numpy(), Y, rtol=1e-6)
    with pytest.raises(ValueError, match=r"expected a batch of shape \(B, 1, 6, 6\)"):
        m(np.zeros((2, 1, 5, 5)))
    assert not net.training


def test_a_float64_module_keeps_its_dtype_and_the_callers_dtype_comes_back():
    net = tiny().double()
    m = gencc.as_model(net)
    Xt = torch.as_tensor(X, dtype=torch.float32)
    out = m(Xt)
    assert out.dtype == torch.float32
    with torch.no_grad():
        np.testing.assert_allclose(out.numpy(), net(Xt.double()).float().numpy(), rtol=1e-6)


def test_gencc_run_and_simulate_take_a_module_directly():
    net = tiny()
    code = gencc.GCC(K=K, N=N)
    Xt = torch.as_tensor(X, dtype=torch.float32)
    res = gencc.run(net, Xt, code)  # every worker: the decode interpolates f exactly at the inputs' points
    assert isinstance(res.outputs, torch.Tensor) and res.outputs.dtype == torch.float32
    assert res.outputs.shape == (K, 5)
    res_np = gencc.run(net, X, code)
    assert isinstance(res_np.outputs, np.ndarray) and res_np.outputs.dtype == np.float64
    exact = reference(net, X)
    assert gencc.metrics.rel_mse(res_np.outputs, exact) < 0.5
    recs = gencc.simulate(net, X, code, gencc.FixedCount(2), trials=3)
    assert all(r["decodable"] for r in recs) and np.isfinite([r["rel_mse"] for r in recs]).all()


def test_the_factory_pickles_and_builds_an_equal_model():
    m = gencc.as_model(tiny(), input_shape=(1, 6, 6))
    m2 = pickle.loads(pickle.dumps(m.factory))()
    np.testing.assert_array_equal(m2(X), m(X))
    assert m2.identity == m.identity and m.identity.startswith(f"{Tiny.__module__}.Tiny@sha256:")
    assert pickle.loads(pickle.dumps(m))(X).shape == (K, 5)
    assert gencc.as_model(tiny(1)).identity != m.identity  # other weights, other identity


def test_callables_batched_and_per_row():
    W = np.linspace(-1, 1, 36 * 3).reshape(36, 3)
    seen = []

    def batch(A):
        seen.append(len(A))
        return np.tanh(np.asarray(A).reshape(len(A), -1) @ W)

    def row(x):
        return np.tanh(np.asarray(x).reshape(-1) @ W)

    row.batched = False
    mb, mr = gencc.as_model(batch), gencc.as_model(row)
    np.testing.assert_allclose(mb(X), mr(X))
    assert seen == [K] and mr.out_shape == (3,)
    with pytest.raises(ValueError, match="non-finite"):
        gencc.as_model(lambda A: np.full((len(A), 2), np.nan))(X)
    with pytest.raises(ValueError, match="one row per input"):
        gencc.as_model(lambda A: np.zeros((1, 2)))(X)


MODEL_FILE = textwrap.dedent('''
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    def make():
        torch.manual_seed(0)
        return Net().eval()

    net = make()

    def unseeded():
        return Net()

    def double(X):
        return X * 2.0
''')


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    pkg = tmp_path / "usermodels_adapter_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(MODEL_FILE)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("usermodels_adapter_test")]:
        del sys.modules[name]


def test_import_paths_from_the_current_directory(user_dir):
    Z = np.random.default_rng(1).normal(size=(5, 4))
    a = gencc.as_model("usermodels_adapter_test.mod:net")
    b = gencc.as_model("usermodels_adapter_test.mod:make")
    c = gencc.as_model("usermodels_adapter_test.mod:Net")  # a class: a zero-argument factory
    np.testing.assert_array_equal(a(Z), b(Z))
    assert a.identity.startswith("usermodels_adapter_test.mod:net@sha256:") and a.sha256 == b.sha256
    assert c(Z).shape == (5, 3)
    d = gencc.as_model("usermodels_adapter_test.mod:double")
    np.testing.assert_allclose(d(Z), 2 * Z)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(b.factory))()(Z), b(Z))
    with pytest.raises(RuntimeError, match="seed the factory"):
        gencc.as_model("usermodels_adapter_test.mod:unseeded").factory()


def test_bad_specs_say_what_is_wrong(user_dir):
    with pytest.raises(ValueError, match=r"no module 'nosuchpkg_x' in the current folder, .*, or on PYTHONPATH; "
                                         r"run from the folder holding the package nosuchpkg_x") as err:
        gencc.as_model("nosuchpkg_x.mod:net")
    assert "sys.path" not in str(err.value)  # the folder searched, in one line, not a dump of sys.path
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        gencc.as_model("usermodels_adapter_test.mod:nope")
    with pytest.raises(ValueError, match="does not exist"):
        gencc.as_model("missing/model.pt2")
    (user_dir / "junk.pt").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a TorchScript file"):
        gencc.as_model("junk.pt")
    with pytest.raises(ValueError, match="cannot make a model"):
        gencc.as_model(42)
    with pytest.raises(ValueError, match="input_shape"):
        gencc.as_model(tiny(), input_shape=(0, 3))


@pytest.mark.slow
def test_torchscript_and_exported_files(tmp_path):
    net = tiny()
    ts = tmp_path / "tiny.ts"
    torch.jit.save(torch.jit.script(net), str(ts))
    m = gencc.as_model(str(ts))
    np.testing.assert_allclose(m(X), reference(net, X), rtol=1e-6, atol=1e-6)
    assert m.identity.startswith("tiny.ts@sha256:")
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(m.factory))()(X), m(X))
    pt2 = tmp_path / "tiny.pt2"
    ex = torch.export.export(net, (torch.zeros(4, 1, 6, 6),))  # a fixed batch of 4: run in padded chunks
    torch.export.save(ex, str(pt2))
    e = gencc.as_model(pt2)
    assert e.in_shape == (1, 6, 6) and e.fixed_batch == 4
    np.testing.assert_allclose(e(X[:7]), reference(net, X[:7]), rtol=1e-5, atol=1e-6)
    from gencc.workloads.parity_training import load_parity_file, train_parity_model

    data = np.random.default_rng(3).normal(size=(60, 1, 6, 6))
    with pytest.raises(ValueError, match="dynamic batch axis"):
        train_parity_model(e, data, 2, tmp_path / "x.pt", epochs=1, progress=False)
    batch = torch.export.Dim("batch", min=1)
    dyn = torch.export.export(net, (torch.zeros(2, 1, 6, 6),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(dyn, str(tmp_path / "dyn.pt2"))
    d = gencc.as_model(tmp_path / "dyn.pt2")
    assert d.fixed_batch is None and d.in_shape == (1, 6, 6)
    for model, out in ((m, tmp_path / "ts-parity.pt"), (d, tmp_path / "pt2-parity.pt")):
        train_parity_model(model, data, 2, out, epochs=1, per_epoch=128, progress=False)
        assert load_parity_file(out, model, k=2)(data[:3]).shape == (3, 5)
    with pytest.raises(ValueError, match="not a TorchScript module"):
        train_parity_model(m, data, 2, tmp_path / "x.pt", packed=True, epochs=1, progress=False)


def test_gencc_run_takes_your_model(user_dir):
    from typer.testing import CliRunner

    from gencc.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["run", "--model", "usermodels_adapter_test.mod:make", "--input-shape", "4", "--jobs",
                              "2", "--service-ms", "0", "--no-progress"])
    assert res.exit_code == 0, res.output
    # which 12 of the 16 coded results come first is up to the threads: the decode is close, not exact
    agreement = float(re.search(r"agreement with f: ([0-9.]+)", res.output).group(1))
    assert agreement >= 0.75, res.output  # a wrong decode agrees on about 1/3 of the inputs (3 classes)
    res = runner.invoke(app, ["run", "--model", "usermodels_adapter_test.mod:make", "--input-shape", "4", "--jobs",
                              "2", "--service-ms", "0", "--scheme", "uncoded", "--no-progress"])
    assert res.exit_code == 0 and "agreement with f: 1.000" in res.output, res.output  # exact answers
    res = runner.invoke(app, ["run", "--data", "x.npy"])
    assert res.exit_code == 2 and "goes with --model" in res.output
    res = runner.invoke(app, ["run", "--model", "usermodels_adapter_test.mod:make", "--scheme", "parm",
                              "--input-shape", "4"])
    assert res.exit_code == 2 and "gencc parity train" in " ".join(res.output.replace("│", " ").split())
