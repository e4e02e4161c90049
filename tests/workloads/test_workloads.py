"""Tests of gencc.workloads: loading, shapes, array kinds, factories, caching, accuracy, offline data."""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gencc.workloads import WORKLOADS, load, models_dir

torch = pytest.importorskip("torch")

NAMES = list(WORKLOADS)
#: mnist1d-cnn trains for about a minute in a fresh cache: its cases are slow (`-m "not slow"` skips them)
PARAMS = [pytest.param(n, marks=pytest.mark.slow) if n == "mnist1d-cnn" else n for n in NAMES]
TRAINED = [p for p, n in zip(PARAMS, NAMES, strict=True) if WORKLOADS[n].trained]
MIN_ACCURACY = {"digits-cnn": 0.95, "digits-mlp": 0.93, "mnist1d-cnn": 0.85}


def test_import_does_not_import_torch() -> None:
    code = "import sys, gencc, gencc.workloads; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError, match="unknown workload 'nope'") as err:
        load("nope")
    for name in NAMES:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="string"):
        load(3)  # type: ignore[arg-type]


def test_registry_names() -> None:
    assert set(NAMES) == {"digits-cnn", "digits-mlp", "mnist1d-cnn", "xsinx", "tanh-mlp", "poly"}


@pytest.mark.parametrize("name", PARAMS)
def test_shapes_and_metadata(get, name: str) -> None:
    w = get(name)
    spec = WORKLOADS[name]
    assert w.name == name
    assert w.in_shape == spec.in_shape and w.out_shape == spec.out_shape
    assert w.X_test.shape[1:] == w.in_shape and w.X_train.shape[1:] == w.in_shape
    assert w.X_test.dtype == np.float64 and w.X_train.dtype == np.float64
    assert w.f.batched is True
    assert w.classifier == spec.classifier
    if w.classifier:
        assert w.y_test.shape == (len(w.X_test),) and w.y_train.shape == (len(w.X_train),)
        assert np.issubdtype(w.y_test.dtype, np.integer)
        assert set(np.unique(w.y_test)) == set(range(10))
        assert 0.0 <= w.test_accuracy <= 1.0
    else:
        assert w.y_test is None and w.y_train is None and w.test_accuracy is None
    Y = w.f(w.X_test[:7])
    assert isinstance(Y, np.ndarray) and Y.dtype == np.float64 and Y.shape == (7, *w.out_shape)
    assert np.all(np.isfinite(Y))


@pytest.mark.parametrize("name", PARAMS)
def test_f_deterministic_and_factory_equal(get, name: str) -> None:
    w = get(name)
    X = w.X_test[:50]
    Y = w.f(X)
    np.testing.assert_array_equal(Y, w.f(X.copy()))
    f2 = w.factory()
    assert f2 is not w.f and f2.batched is True
    np.testing.assert_array_equal(f2(X), Y)
    # the factory and f itself pickle small and rebuild an equivalent f
    fac = pickle.loads(pickle.dumps(w.factory))
    np.testing.assert_array_equal(fac()(X), Y)
    blob = pickle.dumps(w.f)
    assert len(blob) < 20_000
    np.testing.assert_array_equal(pickle.loads(blob)(X), Y)


@pytest.mark.parametrize("name", PARAMS)
def test_torch_in_torch_out(get, name: str) -> None:
    w = get(name)
    X = w.X_test[:20]
    Y = w.f(X)
    out64 = w.f(torch.as_tensor(X))
    assert isinstance(out64, torch.Tensor) and out64.dtype == torch.float64 and out64.shape == Y.shape
    np.testing.assert_allclose(out64.numpy(), Y, rtol=0, atol=0)
    out32 = w.f(torch.as_tensor(X, dtype=torch.float32))
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.numpy(), Y, rtol=1e-5, atol=1e-5)
    # float32 numpy input gives float64 output as well
    assert w.f(X.astype(np.float32)).dtype == np.float64


@pytest.mark.parametrize("name", PARAMS)
def test_bad_inputs_and_empty_batch(get, name: str) -> None:
    w = get(name)
    with pytest.raises(ValueError, match="expected a batch of shape"):
        w.f(w.X_test[0])  # missing batch axis
    with pytest.raises(ValueError, match="expected a batch of shape"):
        w.f(np.zeros((3, 99)))
    with pytest.raises(ValueError, match="numeric"):
        w.f(np.array([["a"] * int(np.prod(w.in_shape))], dtype=object).reshape(1, *w.in_shape))
    empty = w.f(np.zeros((0, *w.in_shape)))
    assert empty.shape == (0, *w.out_shape) and empty.dtype == np.float64


@pytest.mark.parametrize("name", TRAINED)
def test_recorded_accuracy_is_real(get, name: str) -> None:
    w = get(name)
    acc = float(np.mean(w.f(w.X_test).argmax(axis=1) == w.y_test))
    assert acc == pytest.approx(w.test_accuracy, abs=1e-9)
    assert acc >= MIN_ACCURACY[name], f"{name} test accuracy {acc:.3f}"
    meta = json.loads(w.weights_path.with_suffix(".json").read_text())
    assert meta["test_accuracy"] == w.test_accuracy and meta["train_seconds"] > 0
    assert w.train_seconds == meta["train_seconds"]


def test_digits_cnn_accuracy(get) -> None:
    w = get("digits-cnn")
    assert w.test_accuracy >= 0.95
    assert len(w.X_test) == 360 and len(w.X_train) == 1437
    assert w.X_test.min() >= 0.0 and w.X_test.max() <= 1.0


def test_digits_split_is_stratified(get) -> None:
    w = get("digits-mlp")
    counts = np.bincount(w.y_test, minlength=10)
    assert counts.max() - counts.min() <= 2
    np.testing.assert_array_equal(get("digits-cnn").X_test.reshape(-1, 64), w.X_test)


def test_cache_reused(get, cache: Path, first_load) -> None:
    w1 = get("digits-cnn")
    t0 = time.perf_counter()
    w2 = load("digits-cnn", progress=False, cache_dir=cache)
    assert w2.from_cache is True
    assert w2.weights_path == w1.weights_path
    assert w2.test_accuracy == w1.test_accuracy and w2.train_seconds == w1.train_seconds
    np.testing.assert_array_equal(w2.f(w1.X_test), w1.f(w1.X_test))
    assert time.perf_counter() - t0 < 5.0
    assert sorted(p.name for p in (cache / "models").glob("digits-cnn-*")) == sorted(
        [w1.weights_path.name, w1.weights_path.with_suffix(".json").name])
    assert not list((cache / "models").glob(".*.tmp"))


def test_env_var_sets_cache_root(get, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w1 = get("digits-mlp")
    monkeypatch.setenv("GENCC_CACHE_DIR", str(cache))
    assert models_dir() == cache / "models"
    w2 = load("digits-mlp", progress=False)
    assert w2.from_cache and w2.weights_path == w1.weights_path


def test_changed_recipe_trains_new_file(get, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gencc.workloads import _torch

    w1 = get("digits-mlp")
    recipe = dict(_torch.RECIPES["digits-mlp"])
    recipe["train"] = {**recipe["train"], "epochs": 2}
    monkeypatch.setitem(_torch.RECIPES, "digits-mlp", recipe)
    w2 = load("digits-mlp", progress=False, cache_dir=cache)
    assert w2.from_cache is False
    assert w2.weights_path != w1.weights_path
    assert w1.weights_path.exists() and w2.weights_path.exists()
    assert w2.info["recipe"]["train"]["epochs"] == 2
    # a factory made for the old recipe refuses to build a different model
    with pytest.raises(RuntimeError, match="recipe hash"):
        w1.factory()


def test_training_is_deterministic(get, tmp_path: Path) -> None:
    w1 = get("digits-mlp")
    w2 = load("digits-mlp", progress=True, cache_dir=tmp_path)  # exercises the progress bar too
    assert w2.from_cache is False and w2.weights_path.name == w1.weights_path.name
    a = torch.load(w1.weights_path, weights_only=True)
    b = torch.load(w2.weights_path, weights_only=True)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_mnist1d_generated_offline(get, monkeypatch: pytest.MonkeyPatch) -> None:
    import mnist1d.data

    from gencc.workloads import _data

    def no_network(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(mnist1d.data, "get_dataset", no_network)
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    data = _data.generate_mnist1d(**_data.MNIST1D_ARGS)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002
    assert data["x"].shape == (4000, 40) and data["x_test"].shape == (1000, 40)
    w = get("mnist1d-cnn")
    np.testing.assert_array_equal(w.X_test.reshape(-1, 40), data["x_test"])
    np.testing.assert_array_equal(w.y_test, data["y_test"])


def test_sample(get) -> None:
    w = get("digits-cnn")
    X, y = w.sample(12, np.random.default_rng(3))
    X2, y2 = w.sample(12, np.random.default_rng(3))
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert X.shape == (12, 1, 8, 8) and y.shape == (12,)
    assert len({x.tobytes() for x in X}) == 12
    for x, label in zip(X, y, strict=True):
        hits = np.flatnonzero((w.X_test == x).all(axis=(1, 2, 3)))
        assert label in w.y_test[hits]
    Xr, yr = get("xsinx").sample(5, 0)
    assert Xr.shape == (5, 1) and yr is None
    with pytest.raises(ValueError, match="exceeds"):
        w.sample(len(w.X_test) + 1, 0)
    with pytest.raises(ValueError, match="positive integer"):
        w.sample(0, 0)


def test_analytic_values(get) -> None:
    w = get("xsinx")
    x = w.X_test
    assert x.min() >= -3 and x.max() <= 3
    np.testing.assert_allclose(w.f(x), x * np.sin(x), rtol=0, atol=0)
    t = get("tanh-mlp")
    assert t.X_test.shape == (1000, 8) and t.f(t.X_test).shape == (1000, 4)
    assert abs(t.X_test.mean()) < 0.1 and abs(t.X_test.std() - 1) < 0.1
    assert t.f(t.X_test).std() > 0.1  # not a degenerate function


def test_poly_is_degree_two(get) -> None:
    w = get("poly")
    assert w.degree == 2 and w.in_shape == (4,) and w.out_shape == (3,)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 4))
    ts = np.arange(5.0)
    Y = w.f(a + ts[:, None] * b)  # along a line, f is a quadratic in t
    np.testing.assert_allclose(np.diff(Y, n=3, axis=0), 0, atol=1e-9)
    assert np.abs(np.diff(Y, n=2, axis=0)).max() > 1e-3  # and really of degree 2


def test_atomic_write_cleans_up(tmp_path: Path) -> None:
    from gencc.workloads._cache import atomic_write

    target = tmp_path / "x.bin"

    def boom(tmp: str) -> None:
        Path(tmp).write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(target, boom)
    assert not target.exists() and not list(tmp_path.iterdir())


def test_workload_spec_training_data_and_untrained_module(get, cache: Path) -> None:
    """The public faces of a trained workload that training and the experiments' provenance read."""
    import hashlib

    import torch

    from gencc.workloads import cached_weights_sha256, training_data, untrained_module, workload_spec

    assert workload_spec("digits-cnn").trained and not workload_spec("xsinx").trained
    with pytest.raises(ValueError, match="unknown workload 'nope'; choose one of digits-cnn"):
        workload_spec("nope")
    w = get("digits-cnn")
    Xtr, ytr, Xte, yte = training_data("digits-cnn")
    np.testing.assert_array_equal(Xtr, w.X_train)
    np.testing.assert_array_equal(yte, w.y_test)
    assert len(Xtr) + len(Xte) == 1797  # scikit-learn's digits
    torch.manual_seed(0)
    m = untrained_module("digits-cnn")
    assert tuple(m(torch.as_tensor(Xte[:3], dtype=torch.float32)).shape) == (3, 10)
    with pytest.raises(ValueError, match="has no trained model"):
        untrained_module("xsinx")
    assert cached_weights_sha256("digits-cnn", cache) == hashlib.sha256(w.weights_path.read_bytes()).hexdigest()
    assert cached_weights_sha256("digits-cnn", cache / "empty") is None
    assert cached_weights_sha256("xsinx", cache) is None
