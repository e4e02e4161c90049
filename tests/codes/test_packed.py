"""Packed parity queries: coded workers that receive their group's inputs stacked (ParM, SystematicGCC)."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc import FixedCount, ParM, SystematicGCC, simulate, take_rows
from gencc.simulate import apply_workers

A = np.random.default_rng(5).normal(size=(3, 6))


def f(X):
    """Batched, far from linear: R^6 -> R^3."""
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    return np.tanh(X @ A.T) + 0.2 * (X**2) @ A.T


f.batched = True


class Oracle:
    """An exact packed parity model: the sum of f over the stacked members (B, k, 6) -> (B, 3)."""

    packed, batched = True, True

    def __init__(self, k: int):
        self.k = k
        self.shapes: list[tuple] = []

    def __call__(self, Z):
        Z = np.asarray(Z, dtype=float)
        self.shapes.append(Z.shape)
        return f(Z.reshape(-1, *Z.shape[2:])).reshape(Z.shape[0], Z.shape[1], -1).sum(axis=1)


X8 = np.random.default_rng(0).normal(size=(8, 6))


def test_sgcc_packed_encode_hands_each_coded_worker_its_group():
    code = SystematicGCC(8, 10, parity=Oracle(4))
    Z = code.encode(X8)
    assert isinstance(Z, list) and len(Z) == 10
    for n, g in code.packed_groups().items():
        np.testing.assert_array_equal(Z[n], X8[g])
    for k, n in enumerate(code.systematic):
        np.testing.assert_array_equal(Z[n], X8[k])
    # the decoder's model is the same group mean as the plain code's
    np.testing.assert_array_equal(code.encoding_matrix, SystematicGCC(8, 10).encoding_matrix)
    assert SystematicGCC(8, 10).packed_groups() == {}


def test_sgcc_packed_recovers_one_loss_per_group_exactly():
    """With an exact packed parity and rho -> 0 a lost systematic worker is read from its group's result."""
    parity = Oracle(4)
    code = SystematicGCC(8, 10, rho=1e-10, parity=parity)
    Y = apply_workers(f, code.encode(X8), code)
    assert parity.shapes == [(2, 4, 6)]  # both coded workers in one batch, (k, 6) each
    T = f(X8)
    for lost in [(code.systematic[1],), (code.systematic[2], code.systematic[6])]:
        ret = np.setdiff1d(np.arange(10), lost)
        np.testing.assert_allclose(code.decode(Y[ret], ret), T, atol=1e-6)
    # against the plain (mean-query) code with f as its parity: same decoder, worse coded results
    plain = SystematicGCC(8, 10, rho=1e-10, parity=f)
    Yp = apply_workers(f, plain.encode(X8), plain)
    ret = np.setdiff1d(np.arange(10), [plain.systematic[1]])
    assert np.abs(plain.decode(Yp[ret], ret) - T).max() > 1e-3


def test_parm_packed_recovers_like_an_exact_parity():
    code = ParM(8, 4, parity=Oracle(4))
    Z = code.encode(X8)
    np.testing.assert_array_equal(Z[8], X8[:4])
    np.testing.assert_array_equal(Z[9], X8[4:])
    Y = apply_workers(f, Z, code)
    for lost in range(8):
        ret = np.setdiff1d(np.arange(10), [lost])
        np.testing.assert_allclose(code.decode(Y[ret], ret), f(X8), atol=1e-9)


def test_simulate_runs_packed_codes_end_to_end():
    code = SystematicGCC(8, 10, rho=1e-10, parity=Oracle(4))
    recs = simulate(f, X8, code, FixedCount(1), trials=6, seed=1)
    assert len(recs) == 6 and max(r["rel_mse"] for r in recs) < 1e-10


def test_packed_needs_groups_of_exactly_k():
    with pytest.raises(ValueError, match="exactly 4 inputs.*groups of \\[3, 4\\]"):
        SystematicGCC(10, 13, parity=Oracle(4))
    with pytest.raises(ValueError, match="k=2"):
        ParM(8, 4, parity=Oracle(2))
    with pytest.raises(ValueError, match="multiple"):
        ParM(9, 4, parity=Oracle(4))


def test_packed_encode_keeps_the_array_kind():
    torch = pytest.importorskip("torch")
    code = SystematicGCC(8, 10, parity=Oracle(4))
    Xt = torch.as_tensor(X8, dtype=torch.float32)
    Z = code.encode(Xt)
    assert all(isinstance(z, torch.Tensor) and z.dtype == torch.float32 for z in Z)
    n = next(iter(code.packed_groups()))
    np.testing.assert_allclose(Z[n].numpy(), X8[code.packed_groups()[n]], rtol=1e-6)
    with pytest.raises(ValueError, match="non-finite"):
        code.encode(np.where(np.arange(48).reshape(8, 6) == 3, np.nan, X8))


def test_take_rows_stacks_arrays_and_lists():
    Z = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(take_rows(Z, [2, 0]), Z[[2, 0]])
    np.testing.assert_array_equal(take_rows(list(Z), np.array([1, 3])), Z[[1, 3]])
    with pytest.raises(ValueError, match="different shapes"):
        take_rows([Z[0], Z[:2]], [0, 1])
    assert gencc.take_rows is take_rows
