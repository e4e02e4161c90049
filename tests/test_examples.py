"""examples/: every script runs to completion, in a subprocess in a temporary folder, with a timeout, and uses
gencc's public API only."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TIMEOUT = 400  # seconds per script; generous for a loaded 2-core machine (Ray's start-up included)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env["MPLBACKEND"] = "Agg"
    return env


def _check(p: subprocess.CompletedProcess, *expected: str) -> str:
    assert p.returncode == 0, f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-4000:]}"
    missing = [e for e in expected if e not in p.stdout]
    assert not missing, f"missing {missing} in\n{p.stdout[-3000:]}"
    return p.stdout


def _run(name: str, tmp_path: Path, *expected: str) -> str:
    p = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=TIMEOUT)
    return _check(p, *expected)


def test_every_example_is_tested_and_uses_the_public_api() -> None:
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts == ["own_model.py", "ray_job.py", "serve_http.py"]  # a new example gets a test below
    for name in scripts:
        tree = ast.parse((EXAMPLES / name).read_text())
        private = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gencc"):
                private += [node.module] if any(p.startswith("_") for p in node.module.split(".")) else []
                private += [a.name for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Import):
                private += [a.name for a in node.names if a.name.startswith("gencc")
                            and any(p.startswith("_") for p in a.name.split("."))]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                private.append(node.attr)
        assert not private, f"examples/{name} uses private names: {private}"
        assert ast.get_docstring(tree), f"examples/{name} has no docstring saying what it shows"


def test_own_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = _run("own_model.py", tmp_path, "simulate  gcc", "simulate bacc", "run 2:",
               "run on a tensor: outputs Tensor torch.float32")
    assert "held-out accuracy" in out
    assert list(tmp_path.iterdir()) == []  # writes nothing


@pytest.mark.slow
def test_serve_http(tmp_path: Path) -> None:
    for module in ("torch", "fastapi", "uvicorn", "httpx"):
        pytest.importorskip(module)
    _run("serve_http.py", tmp_path, "parity model: held-out", "/predict: 8 answers", "/predict/batch: 16 answers",
         "a malformed input: 422",
         'gencc_requests_total{status="200"}')


@pytest.mark.slow
@pytest.mark.ray
def test_ray_job(tmp_path: Path) -> None:
    """On a private local Ray cluster, inside a loopback-only network namespace (skipped, with the reason, where
    none can be made), as the runtime's Ray tests run."""
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    from gencc.engine.ray.namespace import can_unshare, in_loopback_namespace, run_in_loopback

    argv = [sys.executable, str(EXAMPLES / "ray_job.py")]
    expected = ("one job: workers used", "job 5: 12 results")
    if in_loopback_namespace():
        _run("ray_job.py", tmp_path, *expected)
        return
    ok, why = can_unshare()
    if not ok:
        pytest.skip(f"examples/ray_job.py not run: cannot create a loopback-only network namespace here ({why})")
    _check(run_in_loopback(argv, timeout=TIMEOUT, cwd=tmp_path, env=_env(), capture_output=True, text=True),
           *expected)
