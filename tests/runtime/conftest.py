"""Runtime tests' fixtures (Ray-marked tests run only inside a loopback-only network namespace: tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gencc.runtime import LocalExecutor


@pytest.fixture(scope="module")
def ex():
    """A local executor per test module (test_ray.py overrides it with a RayExecutor)."""
    e = LocalExecutor()
    yield e
    e.close()


@pytest.fixture
def X():
    """Six 4-dimensional inputs, the same in every runtime test."""
    return np.random.default_rng(0).normal(size=(6, 4))
