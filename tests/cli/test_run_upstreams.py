"""`gencc run --upstream URL` / `--upstreams FILE`: jobs over model replicas gencc does not run, here real Open
Inference Protocol servers on 127.0.0.1 (tests/engine/oip_replica.py) serving a model defined in this file; a fleet
that cannot run the jobs is refused with exit code 2 and one message, before any work."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

typer_testing = pytest.importorskip("typer.testing")

from ..engine.oip_replica import Replica, dead_url  # noqa: E402


def model(X: Any) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    return np.stack([np.tanh(X).sum(axis=1), X[:, 0] * X[:, 1], np.sin(X[:, 2]) - X[:, 3]], axis=1)


@pytest.fixture
def replicas():
    made: list[Replica] = []

    def make(n: int, **kw: Any) -> list[Replica]:
        new = [Replica(kw.pop("fn", model), name="m", **kw) for _ in range(n)]
        made.extend(new)
        return new

    yield make
    for r in made:
        r.kill()


def _invoke(args: list[str]):
    from gencc.cli import app

    return typer_testing.CliRunner().invoke(app, ["run", *args])


def test_gencc_run_over_the_replicas_prints_its_summary(replicas, tmp_path) -> None:
    reps = replicas(8)
    data = tmp_path / "inputs.npy"
    np.save(data, np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32))
    args = [a for r in reps for a in ("--upstream", r.url)]
    res = _invoke([*args, "--scheme", "gcc", "--K", "4", "--jobs", "3", "--data", str(data), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "gcc on 8 upstreams: K=4, N=8, 3 jobs" in res.output and "p99" in res.output
    assert "agreement with f" in res.output
    listing = tmp_path / "replicas.txt"
    listing.write_text("# the fleet\n" + "\n".join(r.url for r in reps[:6]) + "\n")
    reps[5].mode = "nan"  # a straggler every job: decoded from the others
    res = _invoke(["--upstreams", str(listing), "--scheme", "bacc", "--K", "3", "--jobs", "2", "--wait-for", "4",
                   "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "bacc on 6 upstreams: K=3, N=6, 2 jobs" in res.output
    res = _invoke([*args[:8], "--scheme", "uncoded", "--K", "4", "--jobs", "2", "--data", str(data),
                   "--no-progress"])
    assert res.exit_code == 0 and "agreement with f: 1.000" in res.output, res.output


def test_gencc_run_refuses_a_fleet_that_cannot_run_with_exit_2(replicas, tmp_path) -> None:
    (r,) = replicas(1)
    (other,) = replicas(1, in_shape=(5,))
    ints = replicas(2, datatype="INT32")
    gone = dead_url("m")

    def refused(args: list[str]) -> str:
        scheme = [] if "--scheme" in args else ["--scheme", "uncoded"]
        res = _invoke([*args, *scheme, "--K", "1", "--jobs", "1", "--no-progress"])
        assert res.exit_code == 2, res.output
        return " ".join(res.output.split())

    calls = r.calls
    assert f"'--upstream': upstream {gone}" in refused(["--upstream", r.url, "--upstream", gone])
    assert "upstreams serve different models" in refused(["--upstream", r.url, "--upstream", other.url])
    assert "an upstream names a model's route" in refused(["--upstream", "http://127.0.0.1:1/v1/m"])
    assert "'--upstreams'" in refused(["--upstreams", str(tmp_path / "none.txt")])
    assert "'--workers'" in refused(["--upstream", r.url, "--workers", "3"])
    assert "'--model'" in refused(["--upstream", r.url, "--model", "pkg.mod:f"])
    assert "'--backend'" in refused(["--upstream", r.url, "--backend", "ray"])
    assert "'--scheme'" in refused(["--upstream", r.url, "--scheme", "parm"])
    assert "'--hedge-delay-ms'" in refused(["--upstream", r.url, "--scheme", "hedged"])
    ints_args = [a for i in ints for a in ("--upstream", i.url)]
    text = refused([*ints_args, "--scheme", "bacc"])
    assert "'--scheme'" in text and "INT32" in text
    assert "'--data'" in refused([*ints_args, "--scheme", "uncoded"])
    assert r.calls == calls and sum(i.calls for i in ints) == 0  # nothing ran
