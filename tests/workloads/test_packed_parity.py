"""A packed parity model through the public API on the digits CNN: load_parity(..., packed=True), then ParM and
SystematicGCC sending stacked groups, in the simulator and on the local runtime. A short recipe keeps it cheap."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest

import gencc
from gencc.runtime import LocalExecutor, run

torch = pytest.importorskip("torch")

from gencc.workloads import _parity as P  # noqa: E402
from gencc.workloads import load, load_parity  # noqa: E402


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory):
    """The digits CNN (the shared cache's) and a packed k=2 parity model trained briefly in a fresh cache."""
    w = load("digits-cnn", progress=False)
    cache = tmp_path_factory.mktemp("gencc-packed")
    (cache / "models").mkdir()
    for p in (w.weights_path, w.weights_path.with_suffix(".json")):
        shutil.copy(p, cache / "models" / p.name)
    mp = pytest.MonkeyPatch()
    mp.setitem(P.PARITY_OVERRIDES, "digits-cnn", {"epochs": 15, "per_epoch": 2048})
    F = load_parity("digits-cnn", 2, progress=False, cache_dir=cache, packed=True)
    yield w, F
    mp.undo()


def test_packed_parity_fn(packed) -> None:
    w, F = packed
    assert F.packed is True and F.k == 2 and F.in_shape == (2, *w.in_shape) and F.from_cache is False
    assert "-packed-" in F.weights_path.name and F.info["packed"] is True and "packed=True" in repr(F)
    Z = np.stack([w.X_test[:5], w.X_test[5:10]], axis=1)  # five stacked pairs
    Y = F(Z)
    assert Y.shape == (5, 10) and np.all(np.isfinite(Y))
    np.testing.assert_allclose(pickle.loads(pickle.dumps(F))(Z), Y, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="expected a batch"):
        F(w.X_test[:5])  # a sum-shaped query
    # it estimates the pair's sum of outputs better than f on the sum does (15 short epochs already)
    T = w.f(w.X_test[:5]) + w.f(w.X_test[5:10])
    assert np.sum((Y - T) ** 2) < np.sum((w.f(Z.sum(axis=1)) - T) ** 2)
    with pytest.raises(ValueError, match="packed must be True or False"):
        load_parity("digits-cnn", 2, progress=False, packed="yes")


def test_codes_with_a_packed_parity_on_real_inputs(packed) -> None:
    w, F = packed
    X = w.X_test[:10]
    pm = gencc.ParM(10, 2, parity=F)
    sg = gencc.SystematicGCC(10, 15, rho=1e-3, parity=F)
    T = w.f(X)
    for code in (pm, sg):
        rec = gencc.simulate(w.f, X, code, gencc.FixedCount(1), trials=5, seed=0)
        assert all(np.isfinite(r["rel_mse"]) and r["rel_mse"] < 0.5 for r in rec)
    # a lost data worker is read from its stacked pair's parity result: F_P(pair) - f(other member)
    Y = gencc.simulate.__globals__["apply_workers"](w.f, pm.encode(X), pm)
    ret = np.setdiff1d(np.arange(15), [3])
    np.testing.assert_allclose(pm.decode(Y[ret], ret)[3], F(X[2:4][None])[0] - T[2], rtol=1e-5, atol=1e-5)


def test_run_sends_stacked_groups_to_coded_workers(packed) -> None:
    w, F = packed
    X = w.X_test[20:30]
    code = gencc.SystematicGCC(10, 15, rho=1e-3, parity=F)
    delays = np.zeros(15)
    delays[code.systematic[4]] = np.inf
    with LocalExecutor() as ex:  # threads: worker processes would rebuild the model from the real recipe
        r = run(w.f, X, code, ex, wait_for=14, latency=delays, order=False)
    assert code.systematic[4] in r.stragglers and r.outputs.shape == (10, 10)
    T = w.f(X)
    np.testing.assert_allclose(np.delete(r.outputs, 4, axis=0), np.delete(T, 4, axis=0), atol=1e-4)  # float32 per task
    assert np.sum((r.outputs[4] - T[4]) ** 2) < np.sum(T[4] ** 2)
