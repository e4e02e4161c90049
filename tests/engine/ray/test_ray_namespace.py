"""Re-execute this package's Ray tests inside a loopback-only network namespace, so Ray never binds a routable
address."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
@pytest.mark.ray_suite(HERE / "test_ray_reliability.py", HERE / "test_ray_churn.py")
def test_ray_reliability_in_loopback_namespace(run_ray_tests_in_namespace):
    pytest.importorskip("fastapi")
    run_ray_tests_in_namespace()
