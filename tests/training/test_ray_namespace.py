"""Re-execute the training Ray test inside a loopback-only network namespace (Ray never binds a routable address)."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.slow
@pytest.mark.ray_suite(HERE / "test_ray.py")
def test_training_ray_suite_in_loopback_namespace(run_ray_tests_in_namespace):
    run_ray_tests_in_namespace()



def test_train_cli_on_ray_reruns_itself_in_the_loopback_namespace(tmp_path, monkeypatch):
    """`gencc train --backend ray` re-runs itself (its typed options and --no-isolate) inside a loopback-only
    namespace, like `gencc run`, and exits with the inner run's status; bad options are refused before that.
    The re-run itself is tested in tests/runtime/test_ray_namespace.py, and end to end (serve) in test_ray_serve.py."""
    from typer.testing import CliRunner

    from gencc.cli import app, isolate

    seen = []
    monkeypatch.setattr(isolate, "in_loopback_namespace", lambda: False)
    monkeypatch.setattr(isolate, "can_unshare", lambda: (True, "a test"))
    monkeypatch.setattr(isolate, "run_forwarding", lambda argv, **kw: seen.append(argv[:-1]) or 5)
    out = tmp_path / "h.csv"
    args = ["train", "--workload", "digits-logreg", "--workers", "3", "--steps", "2", "--backend", "ray"]
    r = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 5, r.output
    assert seen[0][1:] == ["-m", "gencc.cli", *args, "--out", str(out)] and not out.exists()
    assert CliRunner().invoke(app, [*args, "--steps", "0"]).exit_code == 2 and len(seen) == 1
    r = CliRunner().invoke(app, [*args, "--address", "127.0.0.1:6379", "--steps", "0"])
    assert r.exit_code == 2 and len(seen) == 1
