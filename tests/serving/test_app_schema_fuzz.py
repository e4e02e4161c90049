"""A bounded schemathesis run against the app on 127.0.0.1: the OpenAPI schema declares the request bodies
(shape and float32 limits), so generated cases reach the model, and no case may get a 5xx or break the
documented responses."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")
from gencc.serving import Limits, create_app  # noqa: E402

from .serving_helpers import start_server  # noqa: E402
from .test_app_limits import SHAPE, tiny_service  # noqa: E402

ST = "from schemathesis.cli import schemathesis; schemathesis()"


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_reaches_the_model(tmp_path):
    app = create_app(tiny_service(), limits=Limits(read_timeout_s=2.0, max_batch=8), in_shape=SHAPE)
    server, th, port = start_server(app)
    try:
        r = subprocess.run([sys.executable, "-c", ST, "run", f"http://127.0.0.1:{port}/openapi.json",
                            "--max-examples", "40", "--seed", "7", "--workers", "1", "--request-timeout", "5",
                            "--generation-database", "none", "--no-color"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=90)
        answered = app.state.metrics.requests.labels("200")._value.get()
    finally:
        server.should_exit = True
        th.join(20)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "No issues found" in r.stdout
    assert answered > 20  # generated bodies passed the door and were answered by the model
