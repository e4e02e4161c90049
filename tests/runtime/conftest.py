"""Runtime tests: Ray-marked tests only run inside a loopback-only network namespace.

The normal run re-executes them there (test_ray_namespace.py), so Ray never binds a routable address.
"""

from __future__ import annotations

import numpy as np
import pytest

from gencc.runtime import LocalExecutor
from gencc.runtime.isolation import in_loopback_namespace


def pytest_collection_modifyitems(config, items):
    if in_loopback_namespace():
        return
    skip = pytest.mark.skip(reason="Ray tests run inside `unshare -n` (see test_ray_namespace.py)")
    for item in items:
        if "ray" in item.keywords:
            item.add_marker(skip)


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
