"""gencc.model.call: the one function that applies f to inputs (the batch calling convention)."""

import numpy as np
import pytest

from gencc.model import apply_batch, apply_one

K = 6


def inputs():
    return np.random.default_rng(0).normal(size=(K, 3))


def test_apply_batch_batched_and_errors():
    X = inputs()

    def fb(A):
        return A.reshape(len(A), -1).sum(axis=1, keepdims=True)

    fb.batched = True
    np.testing.assert_allclose(apply_batch(fb, X), X.reshape(K, -1).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(apply_batch(lambda x: x.sum(keepdims=True).ravel(), X), apply_batch(fb, X))
    with pytest.raises(ValueError, match="outputs for"):
        apply_batch(lambda A: A[:2], X, batched=True)


def test_apply_one_gives_a_batch_of_one_to_a_batched_f():
    seen = []

    def fb(A):
        seen.append(np.shape(A))
        return np.asarray(A).sum(axis=1, keepdims=True)

    fb.batched = True
    x = np.arange(3.0)
    assert apply_one(fb, x).tolist() == [3.0] and seen == [(1, 3)]
    assert apply_one(lambda v: np.asarray(v) * 2, x).tolist() == [0.0, 2.0, 4.0]
    assert apply_one(lambda A: np.asarray(A) * 2, x, batched=True).dtype == np.float64
