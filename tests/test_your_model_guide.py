"""docs/guides/your_model.md, followed as a newcomer would: its mymodel.py saved in an empty folder, its shell
steps run there in order (the parity training with a short budget), the server started from the page's own
command line (on a free port), and the page's request sent (with httpx instead of curl) and checked against the
model's own output."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guides" / "your_model.md"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def _blocks() -> list[tuple[str, str]]:
    return FENCE.findall(PAGE.read_text())


def _lines(body: str) -> list[list[str]]:
    return [shlex.split(c) for c in body.replace("\\\n", " ").splitlines() if shlex.split(c, comments=True)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    # one intra-op thread: on a loaded 2-core machine the page's training loop runs about 6x faster (two spin)
    env.update(NO_COLOR="1", COLUMNS="120", OMP_NUM_THREADS="1")
    return env


def _argv(words: list[str]) -> list[str]:
    return [sys.executable, "-m", "gencc.cli", *words[1:]] if words[0] == "gencc" else [sys.executable, *words[1:]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_page_has_the_steps_this_test_follows() -> None:
    blocks = _blocks()
    assert blocks[0][0] == "python" and blocks[0][1].startswith("# mymodel.py")
    steps = [_lines(b) for lang, b in blocks if lang == "bash"]
    assert [w[:2] for w in steps[0]] == [["python", "mymodel.py"], ["gencc", "parity"], ["gencc", "serve"]]
    assert steps[1][1][0] == "curl" and "/predict" in " ".join(steps[1][1])
    assert "gencc." not in blocks[0][1]  # the user's file knows nothing of gencc


@pytest.mark.slow
def test_a_newcomer_serves_their_own_model(tmp_path: Path, wait_healthy) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("uvicorn")
    import httpx
    import numpy as np

    blocks = _blocks()
    (tmp_path / "mymodel.py").write_text(blocks[0][1])
    train_serve, query = [_lines(b) for lang, b in blocks if lang == "bash"][:2]
    run = {"cwd": tmp_path, "env": _env(), "capture_output": True, "text": True, "timeout": 300}
    for words in train_serve[:2]:
        if words[:3] == ["gencc", "parity", "train"]:
            words = [*words, "--epochs", "3", "--no-progress"]  # the page's default budget, shortened for CI
        p = subprocess.run(_argv(words), **run)
        assert p.returncode == 0, f"{words}: {p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    meta = json.loads((tmp_path / "parity.json").read_text())
    assert meta["k"] == 2 and meta["model"].startswith("mymodel:make@sha256:")
    serve = train_serve[2]
    port = _free_port()
    serve[serve.index("--port") + 1] = str(port)
    server = subprocess.Popen(_argv(serve), cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(server, url, 240)
        p = subprocess.run(_argv(query[0]), **run)
        assert p.returncode == 0, p.stderr
        body = json.loads((tmp_path / "one.json").read_text())
        answer = httpx.post(url + "/predict", json=body, timeout=30).json()
        assert answer["scheme"] == "sgcc-parity" and isinstance(answer["degraded"], bool)
        probe = ("import json, sys, numpy; sys.path.insert(0, '.'); import mymodel, torch; "
                 "x = torch.as_tensor(numpy.load('inputs.npy')[:1]); "
                 "print(json.dumps(mymodel.make()(x).detach().double().numpy()[0].tolist()))")
        own = json.loads(subprocess.run([sys.executable, "-c", probe], **run).stdout)
        if not answer["degraded"]:
            np.testing.assert_allclose(answer["output"], own, rtol=1e-4, atol=1e-4)
        else:
            assert int(np.argmax(answer["output"])) == int(np.argmax(own))
    finally:
        server.terminate()
        server.wait(timeout=60)
