"""Who holds a Model: a built-in Workload holds its own (`workload.model`), and a service built for your model holds
that Model and your data, with no Workload made up around them."""

from __future__ import annotations

import pickle

import numpy as np

import gencc
from gencc.model import Model


def test_a_workload_holds_its_model():
    from gencc.workloads import load

    w = load("tanh-mlp")
    assert isinstance(w.model, Model) and gencc.as_model(w) is w.model
    assert w.model.in_shape == w.in_shape == (8,) and w.model.out_shape == w.out_shape == (4,)
    assert w.model.identity.startswith("tanh-mlp@sha256:")
    X = w.X_test[:5]
    np.testing.assert_allclose(w.model(X), w.f(X))  # f: the model's own call
    rebuilt = pickle.loads(pickle.dumps(w.model))  # the factory travels, not the weights
    np.testing.assert_allclose(rebuilt(X), w.f(X))
    assert rebuilt.identity == w.model.identity


class Affine:
    """A batch callable gencc never saw: R^3 -> R^2."""

    batched = True

    def __call__(self, X):
        X = np.asarray(X, dtype=float)
        return np.stack([X.sum(axis=1), X[:, 0] - 2 * X[:, 2]], axis=1)


def test_a_service_holds_your_model_and_data_without_a_workload():
    from gencc.serving import Service

    X = np.random.default_rng(0).normal(size=(40, 3))
    svc = Service.build(Affine(), "uncoded", workers=3, data=X, service_ms=0.0)
    try:
        assert svc.workload is None and isinstance(svc.model, Model) and svc.in_shape == (3,)
        answers = [svc.submit(x).result(timeout=30) for x in X[:6]]
    finally:
        svc.close()
    assert [a.status for a in answers] == [200] * 6
    np.testing.assert_allclose(np.stack([a.output for a in answers]), Affine()(X[:6]), rtol=1e-5, atol=1e-5)
