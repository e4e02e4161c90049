"""Trust in the model cache (issue 18): weights are verified against the sha256 recorded when they were trained
(a planted or altered file is refused, naming the file and the fix), and a cache folder that is not the user's
own, or that group or others can write, is refused before anything is read from it."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from gencc.workloads import load, load_parity

torch = pytest.importorskip("torch")

from gencc.workloads import _parity, _torch  # noqa: E402
from gencc.workloads._cache import SHA_KEY, check_private_dir  # noqa: E402

NAME = "digits-mlp"  # the quickest trained workload (a few seconds, once per session in `get`)


@pytest.fixture
def private(get, cache: Path, tmp_path: Path) -> Path:
    """A private copy of the session's trained digits-mlp cache entry: (cache root)."""
    get(NAME)
    root = tmp_path / "cache"
    (root / "models").mkdir(parents=True)
    for p in (cache / "models").glob(f"{NAME}-*"):
        shutil.copy(p, root / "models" / p.name)
    return root


def _planted(pt: Path) -> None:
    """Overwrite `pt` with weights of the right architecture that answer class 7 for every input."""
    module = _torch.build_module(_torch.RECIPES[NAME]["arch"])
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
        list(module.parameters())[-1][7] = 10.0  # the last layer's bias
    torch.save(module.state_dict(), pt)


def test_sha256_recorded_at_training_and_matches(get, cache: Path) -> None:
    w = get(NAME)
    recorded = json.loads(w.weights_path.with_suffix(".json").read_text())[SHA_KEY]
    assert recorded == w.info[SHA_KEY] == hashlib.sha256(w.weights_path.read_bytes()).hexdigest()


def test_planted_weights_refused_with_the_fix(private: Path) -> None:
    w = load(NAME, progress=False, cache_dir=private)
    good = w.f(w.X_test)
    assert w.from_cache and np.mean(np.argmax(good, axis=1) == 7) < 0.5
    factory = pickle.loads(pickle.dumps(w.factory))  # as a Ray actor or worker process gets it
    _planted(w.weights_path)
    for build in (lambda: load(NAME, progress=False, cache_dir=private), factory):
        with pytest.raises(ValueError, match="sha256") as err:
            build()
        msg = str(err.value)
        assert str(w.weights_path) in msg and "Delete it" in msg and "retrain=True" in msg
    again = load(NAME, progress=False, cache_dir=private, retrain=True)  # the fix the message names
    assert not again.from_cache
    np.testing.assert_array_equal(again.f(again.X_test), good)  # deterministic training: the same model back


def test_entry_without_a_recorded_sha256_is_trained_again(private: Path) -> None:
    js = next((private / "models").glob(f"{NAME}-*.json"))
    meta = json.loads(js.read_text())
    del meta[SHA_KEY]
    js.write_text(json.dumps(meta))
    _planted(js.with_suffix(".pt"))
    w = load(NAME, progress=False, cache_dir=private)
    assert not w.from_cache and json.loads(js.read_text())[SHA_KEY] == w.info[SHA_KEY]
    assert np.mean(np.argmax(w.f(w.X_test), axis=1) == w.y_test) > 0.9


@pytest.mark.parametrize("where", ["root", "models"])
@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_cache_writable_by_others_refused(private: Path, where: str, mode: int) -> None:
    folder = private if where == "root" else private / "models"
    os.chmod(folder, mode)
    try:
        with pytest.raises(PermissionError, match=rf"{folder}.*writable by group or others.*chmod go-w"):
            load(NAME, progress=False, cache_dir=private)
        with pytest.raises(PermissionError, match="writable by group or others"):
            load_parity("digits-cnn", 2, progress=False, cache_dir=private)  # refused before any training
    finally:
        os.chmod(folder, 0o755)
    assert load(NAME, progress=False, cache_dir=private).from_cache


def test_cache_of_another_user_refused(private: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    with pytest.raises(PermissionError, match=rf"belongs to uid {me}, not to you \(uid {me + 1}\)"):
        load(NAME, progress=False, cache_dir=private)


def test_new_cache_folders_are_private(tmp_path: Path) -> None:
    old = os.umask(0o002)  # a umask that would make group-writable folders
    try:
        made = check_private_dir(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert made.is_dir() and not os.stat(made).st_mode & 0o022


def test_parity_weights_verified(tmp_path: Path) -> None:
    m = _parity.build_parity("digits-cnn", 2, _parity.settings("digits-cnn"))
    torch.save(m.state_dict(), tmp_path / "p.pt")
    sha = hashlib.sha256((tmp_path / "p.pt").read_bytes()).hexdigest()
    _parity.load_parity_module("digits-cnn", 2, tmp_path / "p.pt", sha256=sha)
    with pytest.raises(ValueError, match=r"p\.pt: the weights' sha256 is .* not the"):
        _parity.load_parity_module("digits-cnn", 2, tmp_path / "p.pt", sha256="0" * 64)
