"""Re-execute the training Ray test inside a loopback-only network namespace (Ray never binds a routable address)."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
def test_training_ray_suite_in_loopback_namespace(run_ray_tests_in_namespace):
    run_ray_tests_in_namespace(HERE / "test_ray.py")


@pytest.mark.slow
def test_train_cli_on_ray_runs_in_the_loopback_namespace(tmp_path):
    """`gencc train --backend ray` re-runs itself inside a loopback-only namespace, like `gencc run`: the same
    history comes back, and its temp folders are gone afterwards."""
    import csv
    import os
    import subprocess
    import sys

    from gencc.testing.isolation import can_unshare, in_loopback_namespace

    pytest.importorskip("ray")
    ok, why = can_unshare()
    if not ok or in_loopback_namespace():
        pytest.skip(f"needs a loopback-only namespace made from outside one ({why})")
    out, tmp = tmp_path / "hist.csv", tmp_path / "t"
    tmp.mkdir()
    p = subprocess.run([sys.executable, "-m", "gencc.cli", "train", "--workload", "digits-logreg", "--scheme", "gc",
                        "--workers", "3", "--stragglers", "1", "--steps", "3", "--track-grad-error", "--backend",
                        "ray", "--out", str(out)], env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "training inside a loopback-only network namespace" in p.stderr
    assert "digits-logreg gc: N=3" in p.stdout
    rows = list(csv.DictReader(out.open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3] and all(float(r["grad_rel_err"]) < 1e-8 for r in rows)
    assert list(tmp.iterdir()) == []
