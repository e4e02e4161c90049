"""Re-execute the Ray tests inside a loopback-only network namespace, so Ray never binds a routable address."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gencc.testing.isolation import can_unshare, in_loopback_namespace, run_in_loopback

HERE = Path(__file__).parent


def test_ray_suite_in_loopback_namespace():
    pytest.importorskip("ray")
    if in_loopback_namespace():
        pytest.skip("already inside the namespace: the Ray tests run directly")
    ok, why = can_unshare()
    if not ok:
        pytest.skip(f"Ray tests not run: cannot create a loopback-only network namespace here ({why})")
    files = [str(HERE / "test_ray.py"), str(HERE / "test_ray_cluster.py")]
    p = run_in_loopback([sys.executable, "-m", "pytest", "-m", "ray", "-q", "-p", "no:cacheprovider", *files],
                        timeout=400, capture_output=True, text=True, cwd=HERE.parent.parent)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert " passed" in p.stdout and "skipped" not in p.stdout.splitlines()[-1], p.stdout[-2000:]
