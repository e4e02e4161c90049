"""gencc.model.load_model: a user's model tried once when a command loads it; a model that fails is one short usage
error naming the spec and what failed (exit 2, no traceback), before serving or running starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gencc.errors import GenccError, ModelError
from gencc.model import load_model

torch = pytest.importorskip("torch")

#: a user's module gencc never saw: a model taking 30 features, and a factory that raises (old weights)
USER_MODULE = textwrap.dedent("""
    import torch

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(30, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))

    def broken():
        raise RuntimeError("state_dict from an older version: missing key 'head.weight'")
""")
NAME = "usermodel_load_test"


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / f"{NAME}.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop(NAME, None)


def test_a_model_that_works_is_built_tried_and_given_with_its_data(user_dir):
    X = np.random.default_rng(0).normal(size=(20, 30))
    np.save(user_dir / "x.npy", X)
    model, data = load_model(f"{NAME}:make", "30", user_dir / "x.npy")
    assert model.in_shape == (30,) and model.out_shape == (3,)
    np.testing.assert_array_equal(data, X)
    model, data = load_model(f"{NAME}:make", data=user_dir / "x.npy")  # the input shape read from the data
    assert model.in_shape == (30,) and data.shape == (20, 30)


def test_a_factory_that_raises_is_named_with_the_spec(user_dir):
    with pytest.raises(ModelError) as info:
        load_model(f"{NAME}:broken", "30")
    msg = str(info.value)
    assert msg.startswith(f"model '{NAME}:broken': the factory raised RuntimeError: state_dict from an older")
    assert info.value.source == "model" and isinstance(info.value, ValueError) and isinstance(info.value, GenccError)


def test_an_output_that_fails_for_the_input_shape_is_named(user_dir):
    with pytest.raises(ModelError) as info:
        load_model(f"{NAME}:make", "3,10")
    msg = str(info.value)
    assert msg.startswith(f"model '{NAME}:make': its output for input shape 3,10 failed: RuntimeError: ")
    assert "\n" not in msg and info.value.source == "input_shape"
    np.save(user_dir / "x.npy", np.zeros((4, 3, 10)))
    with pytest.raises(ModelError, match=r"its output for inputs of shape \(3, 10\) from .*x\.npy failed") as info:
        load_model(f"{NAME}:make", data="x.npy")
    assert info.value.source == "data"
    with pytest.raises(ModelError, match="input shape is unknown") as info:
        load_model(f"{NAME}:make")
    assert info.value.source == "input_shape"
    with pytest.raises(ModelError, match="positive integers") as info:
        load_model(f"{NAME}:make", "3,0")
    assert info.value.source == "input_shape"


def _no_serving(monkeypatch):
    """uvicorn and the service refuse to start: a model error must stop `gencc serve` before either."""
    import uvicorn

    from gencc.serving.service import Service

    def never(*a, **k):
        raise AssertionError("serving started although the model failed")

    monkeypatch.setattr(uvicorn, "run", never)
    monkeypatch.setattr(uvicorn.Server, "run", never)
    monkeypatch.setattr(Service, "from_config", classmethod(never))


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize(("attr", "option", "words"), [
    ("broken", "--model", "the factory raised RuntimeError: state_dict from an older version"),
    ("make", "--input-shape", "its output for input shape 3,10 failed: RuntimeError"),
])
def test_serve_and_run_refuse_a_failing_model_in_one_message(user_dir, monkeypatch, command, attr, option, words):
    from typer.testing import CliRunner

    from gencc.cli import app

    _no_serving(monkeypatch)
    argv = [command, "--model", f"{NAME}:{attr}", "--input-shape", "3,10"]
    argv += ["--port", _free_port()] if command == "serve" else ["--jobs", "2", "--no-progress"]
    res = CliRunner().invoke(app, argv)
    flat = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2, res.output
    assert f"model '{NAME}:{attr}'" in flat and words in flat and f"'{option}'" in flat, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 10, res.output


@pytest.mark.slow
def test_the_command_line_says_it_in_a_few_lines_without_a_traceback(user_dir):
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(user_dir)]), "COLUMNS": "120"}
    for attr in ("broken", "make"):
        res = subprocess.run([sys.executable, "-m", "gencc.cli", "run", "--model", f"{NAME}:{attr}",
                              "--input-shape", "3,10", "--no-progress"], capture_output=True, text=True, env=env,
                             cwd=user_dir, timeout=120)
        out = res.stdout + res.stderr
        assert res.returncode == 2, out
        assert "Traceback" not in out and len(out.strip().splitlines()) <= 10, out
        assert f"model '{NAME}:{attr}'" in " ".join(out.replace("│", " ").split()), out
