"""Noisy results: the relative noise of every worker against a direct computation, on a model this test defines."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc import metrics as M
from gencc.experiments.noise import noisy_results, noisy_trials


def _model(X: np.ndarray) -> np.ndarray:
    """A tiny two-layer tanh network with fixed weights (3 inputs, 4 logits), defined here."""
    W1 = np.array([[0.5, -1.0, 0.3], [0.2, 0.4, -0.7], [1.1, 0.1, 0.2]])
    W2 = np.array([[1.0, -0.5, 0.2, 0.3], [0.1, 0.9, -0.4, 0.2], [-0.6, 0.3, 0.8, -0.1]])
    return np.tanh(np.asarray(X, float).reshape(len(X), -1) @ W1) @ W2 + 0.1


_model.batched = True


def test_noise_is_relative_to_each_workers_rms() -> None:
    Y = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, -1.0]])
    got = noisy_results(Y, 0.1, np.random.default_rng(7))
    z = np.random.default_rng(7).standard_normal((3, 2))  # one draw per row, in row order
    rms = np.array([np.sqrt(12.5), 1.0, 1.0])  # an all-zero result counts rms 1
    np.testing.assert_allclose(got, Y + 0.1 * rms[:, None] * z)
    np.testing.assert_array_equal(noisy_results(Y, 0.0, np.random.default_rng(1)), Y)
    # the empirical noise sd over many draws is level x rms
    big = np.tile(np.array([[2.0, -2.0, 2.0, -2.0]]), (20000, 1))
    d = noisy_results(big, 0.05, np.random.default_rng(3)) - big
    assert abs(d.std() / (0.05 * 2.0) - 1) < 0.02


def test_noisy_trials_match_a_direct_decode() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 3))
    code = gencc.GCC(6, 16)
    level, S = 0.05, 3
    recs = noisy_trials(_model, X, code, gencc.FixedCount(S, "random"), level, trials=3, seed=11)
    assert [r["trial"] for r in recs] == [0, 1, 2] and all(r["level"] == level for r in recs)
    # the same computation written out: order, encode, every worker's noisy result, draw stragglers, decode
    perm = gencc.order_inputs(X)
    Y_all = _model(code.encode(X[perm]))
    draws = np.random.default_rng(11)
    for r in recs:
        Yn = Y_all + level * np.sqrt(np.mean(Y_all**2, axis=1))[:, None] * draws.standard_normal(Y_all.shape)
        returned = gencc.FixedCount(S, "random").draw(code.N, draws)
        Yhat = np.empty((6, 4))
        Yhat[perm] = code.decode(Yn[returned], returned)
        assert r["n_returned"] == code.N - S
        assert r["rel_mse"] == pytest.approx(M.rel_mse(Yhat, _model(X)), rel=1e-12)
    # noiseless: the same as simulate's random draws of the clean results
    clean = noisy_trials(_model, X, code, gencc.FixedCount(S, "random"), 0.0, trials=2, seed=5)
    assert all(r["rel_mse"] < 0.05 for r in clean)
    noisy = noisy_trials(_model, X, code, gencc.FixedCount(S, "random"), 0.3, trials=2, seed=5)
    assert np.mean([r["rel_mse"] for r in noisy]) > np.mean([r["rel_mse"] for r in clean])


def test_noisy_trials_refuse_bad_input() -> None:
    X = np.zeros((4, 3))
    code = gencc.GCC(4, 8)
    with pytest.raises(ValueError, match="worst-case search is not supported"):
        noisy_trials(_model, X, code, gencc.FixedCount(2, "worst"), 0.1)
    with pytest.raises(ValueError, match="noise level must be a finite number"):
        noisy_trials(_model, X, code, gencc.FixedCount(2, "random"), -0.1)
    with pytest.raises(ValueError, match="first dimension K=4"):
        noisy_trials(_model, np.zeros((5, 3)), code, gencc.FixedCount(2, "random"), 0.1)
