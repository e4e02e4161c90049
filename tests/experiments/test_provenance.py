"""The record of which trained models a docs folder's figures were built with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gencc.experiments import provenance


def test_record_keeps_one_entry_per_preset_and_model_and_moved_names_what_changed(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setattr(provenance, "fingerprints", lambda w=None: {"digits-cnn": "1" * 64, "mnist1d-cnn": "2" * 64})
    provenance.record(a, "vs-S")
    provenance.record(a, "parm")
    provenance.record(b, "vs-S")
    monkeypatch.setattr(provenance, "fingerprints", lambda w=None: {"digits-cnn": "3" * 64})
    provenance.record(a, "vs-S")  # replaces vs-S's entries, keeps parm's
    assert provenance.read(a, "vs-S") == {"digits-cnn": "3" * 64}
    assert provenance.read(a, "parm") == {"digits-cnn": "1" * 64, "mnist1d-cnn": "2" * 64}
    assert provenance.moved(b, a, "vs-S") == {"digits-cnn": ("1" * 64, "3" * 64)}  # mnist1d-cnn: not in both
    assert provenance.moved(a, a, "vs-S") == {} and provenance.moved(a, b, "rate-worst") == {}
    assert (a / provenance.PATH).read_text().splitlines()[0] == "preset,model,weights_sha256"


def test_an_empty_cache_records_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GENCC_CACHE_DIR", str(tmp_path / "cache"))
    assert provenance.fingerprints() == {}
    provenance.record(tmp_path / "docs", "vs-S")
    assert not (tmp_path / "docs" / provenance.PATH).exists()


def test_fingerprints_read_the_cached_weights_sha256_of_the_current_recipe(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from gencc.workloads import models_dir
    from gencc.workloads._torch import weights_paths

    monkeypatch.setenv("GENCC_CACHE_DIR", str(tmp_path / "cache"))
    models = models_dir()
    models.mkdir(parents=True)
    meta = weights_paths("digits-cnn", models)[1]
    meta.write_text(json.dumps({"weights_sha256": "ab" * 32}))
    (models / "mnist1d-cnn-0000000000.json").write_text(json.dumps({"weights_sha256": "cd" * 32}))  # an old recipe
    assert provenance.fingerprints() == {"digits-cnn": "ab" * 32}
    # a preset's own workloads: an analytic-only preset records no model, a CNN preset its CNN only
    assert provenance.fingerprints(["xsinx", "tanh-mlp"]) == {}
    assert provenance.fingerprints(["xsinx", "digits-cnn", "mnist1d-cnn"]) == {"digits-cnn": "ab" * 32}
    docs = tmp_path / "docs"
    provenance.record(docs, "vs-S", ["xsinx", "digits-cnn"])
    provenance.record(docs, "toys", ["xsinx"])
    assert provenance.read(docs, "vs-S") == {"digits-cnn": "ab" * 32} and provenance.read(docs, "toys") == {}
    provenance.record(docs, "vs-S", ["xsinx"])  # a preset that no longer uses a model drops its entry
    assert provenance.read(docs, "vs-S") == {}
