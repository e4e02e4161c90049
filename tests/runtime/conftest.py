"""Runtime tests: Ray-marked tests only run inside a loopback-only network namespace.

The normal run re-executes them there (test_ray_namespace.py, with `unshare -n` as root or `unshare -rn` as
an ordinary user), so Ray never binds a routable address; the skip reason outside says which way.
"""

from __future__ import annotations

import numpy as np
import pytest

from gencc.runtime import LocalExecutor
from gencc.testing.isolation import can_unshare, in_loopback_namespace


def pytest_collection_modifyitems(config, items):
    if in_loopback_namespace():
        return
    ray_items = [item for item in items if "ray" in item.keywords]
    if not ray_items:
        return
    ok, how = can_unshare()
    reason = (f"run by test_ray_namespace.py in a loopback-only namespace made with {how}" if ok else
              f"not run: no loopback-only network namespace can be made here ({how})")
    for item in ray_items:
        item.add_marker(pytest.mark.skip(reason=reason))


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
