"""The package as a user meets it: import cost, the README's API example, the CLI's demo and info."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_gencc_pulls_in_no_heavy_dependency():
    # scipy.optimize, scipy.spatial and scipy.special each serve one function: imported there, not here
    code = ("import sys, gencc; heavy = [m for m in ('torch', 'ray', 'typer', 'matplotlib', 'rich', "
            "'scipy.optimize', 'scipy.spatial', 'scipy.special') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_names():
    import gencc

    for name in ("GCC", "BACC", "LCC", "Replication", "order_inputs", "FixedCount", "Bernoulli", "simulate",
                 "metrics", "run", "stream", "LocalExecutor", "RayExecutor"):
        assert hasattr(gencc, name), name
    for name in ("rel_mse", "mse", "rmse", "agreement", "rel_acc"):
        assert callable(getattr(gencc.metrics, name))


def test_readme_api_example_runs():
    pytest.importorskip("torch")
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    assert scope["Yhat"].shape == (10, 10)
    assert scope["res"].outputs.shape == (10, 10)
    import gencc

    # the example's three stragglers are not the worst case: the decode should be close to f(X)
    assert gencc.metrics.rel_mse(scope["Yhat"], scope["w"].f(scope["X"])) < 0.05


def test_cli_info_and_small_demo():
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from gencc.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["info"])
    assert res.exit_code == 0 and "gcc" in res.output
    res = runner.invoke(app, ["demo", "--batches", "2", "--trials", "1", "--jobs", "3"])
    assert res.exit_code == 0, res.output
    for word in ("gcc", "bacc", "replication", "rel_mse", "agreement", "p99"):
        assert word in res.output
