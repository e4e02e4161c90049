"""Re-execute the Ray tests inside a loopback-only network namespace, so Ray never binds a routable address."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
def test_ray_suite_in_loopback_namespace(run_ray_tests_in_namespace):
    run_ray_tests_in_namespace(HERE / "test_ray.py", HERE / "test_ray_cluster.py")
