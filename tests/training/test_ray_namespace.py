"""Re-execute the training Ray test inside a loopback-only network namespace (Ray never binds a routable address)."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
def test_training_ray_suite_in_loopback_namespace(run_ray_tests_in_namespace):
    run_ray_tests_in_namespace(HERE / "test_ray.py")
