"""`gencc run` on the local backend (the digits CNN; trained on first use, cached afterwards)."""

from __future__ import annotations

import pytest

typer_testing = pytest.importorskip("typer.testing")
pytest.importorskip("torch")


def _invoke(args):
    from gencc.cli import app

    return typer_testing.CliRunner().invoke(app, ["run", *args])


def test_run_command_prints_percentiles_and_accuracy():
    r = _invoke(["--scheme", "gcc", "--K", "4", "--N", "8", "--wait-for", "6", "--jobs", "6", "--latency",
                 "bimodal:p=0.2,base=0.002", "--no-progress", "--in-flight", "2"])
    assert r.exit_code == 0, r.output
    assert "p99" in r.output and "p99.9" in r.output and "agreement with f" in r.output


def test_run_command_baseline():
    r = _invoke(["--scheme", "hedged", "--K", "4", "--N", "6", "--jobs", "3", "--latency", "shifted-exp",
                 "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "hedged on local" in r.output and "agreement with f: 1.000" in r.output


@pytest.mark.parametrize("args", [["--scheme", "nope"], ["--latency", "bimodal:q=1"], ["--latency", "weird"],
                                  ["--K", "8", "--N", "16", "--wait-for", "20", "--jobs", "1"]])
def test_run_command_rejects_bad_options(args):
    r = _invoke([*args, "--no-progress"])
    assert r.exit_code != 0
