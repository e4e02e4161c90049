"""Codes by scheme name: the math layer's defaults flow through; ParM gets the workload's parity model."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.experiments import sweep_code
from gencc.experiments.schemes import scheme_label


def test_sweep_code_keeps_math_layer_defaults() -> None:
    assert repr(sweep_code("gcc", 10, 40)) == repr(gencc.GCC(10, 40))
    assert np.array_equal(sweep_code("gcc", 10, 40).encoding_matrix, gencc.GCC(10, 40).encoding_matrix)
    assert sweep_code("gcc", 10, 40, lam_dec=0.0).lam_dec == 0.0
    assert isinstance(sweep_code("replication", 4, 8), gencc.Replication)
    with pytest.raises(ValueError, match="degree"):
        sweep_code("lcc", 4, 8)
    with pytest.raises(ValueError, match="unknown scheme 'mds'; choose one of replication, parm, bacc, gcc, sgcc, lcc"):
        sweep_code("mds", 4, 8)


def test_sweep_code_builds_parm_with_the_workloads_parity_model(monkeypatch) -> None:
    import gencc.workloads

    calls = []

    def fake_parity(name, k, progress=True):
        calls.append((name, k, progress))
        return np.tanh

    monkeypatch.setattr(gencc.workloads, "load_parity", fake_parity)
    code = sweep_code("parm", 6, 8, "digits-cnn", k=3)
    assert isinstance(code, gencc.ParM) and code.parity is np.tanh and calls == [("digits-cnn", 3, False)]
    toy = sweep_code("parm", 6, 9, "toy-xsinx")  # no parity model for the analytic stand-ins: f itself
    assert toy.parity is None and calls == [("digits-cnn", 3, False)]
    with pytest.raises(ValueError, match="runs on N=9 workers, got N=12"):
        sweep_code("parm", 6, 12, "toy-xsinx")


def test_scheme_label_names_options_in_sorted_order() -> None:
    assert scheme_label("gcc") == "gcc"
    assert scheme_label("gcc", {"lam_dec": 0, "kernel": "cubic"}) == "gcc[kernel=cubic,lam_dec=0]"
