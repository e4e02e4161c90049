"""`gencc run` on the local backend (the digits CNN; trained on first use, cached afterwards)."""

from __future__ import annotations

import pytest

typer_testing = pytest.importorskip("typer.testing")
pytest.importorskip("torch")


def _invoke(args):
    from gencc.cli import app

    return typer_testing.CliRunner().invoke(app, ["run", *args])


def test_run_command_prints_percentiles_and_accuracy():
    r = _invoke(["--scheme", "gcc", "--K", "4", "--workers", "8", "--wait-for", "6", "--jobs", "6", "--service-ms",
                 "2", "--slow-task-fraction", "0.2", "--no-progress", "--in-flight", "2"])
    assert r.exit_code == 0, r.output
    assert "p99" in r.output and "p99.9" in r.output and "agreement with f" in r.output


def test_run_command_baseline():
    r = _invoke(["--scheme", "hedged", "--K", "4", "--workers", "6", "--jobs", "3", "--service-ms", "5",
                 "--slow-task-fraction", "0.05", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "hedged on local" in r.output and "agreement with f: 1.000" in r.output


@pytest.mark.parametrize(("args", "option"), [
    (["--scheme", "nope"], "--scheme"), (["--slow-task-fraction", "1.5"], "--slow-task-fraction"),
    (["--slow-factor", "0"], "--slow-factor"),
    (["--K", "8", "--workers", "16", "--wait-for", "20", "--jobs", "1"], "--wait-for"),
    (["--K", "4", "--workers", "8", "--wait-for", "12"], "--wait-for"), (["--K", "361", "--workers", "400"], "--K")])
def test_run_command_rejects_bad_options(args, option, monkeypatch):
    import gencc.workloads

    monkeypatch.setattr(gencc.workloads, "load", lambda *a, **k: pytest.fail("the model loaded before the check"))
    r = _invoke([*args, "--no-progress"])
    assert r.exit_code == 2 and f"'{option}'" in r.output, r.output


def test_the_k_limit_is_the_number_of_held_out_digits():
    from gencc.cli.run import DIGITS_TEST_INPUTS
    from gencc.workloads import load

    assert DIGITS_TEST_INPUTS == len(load("digits-cnn", progress=False).X_test)


def test_wait_for_defaults_halfway_from_K_to_N():
    from gencc.cli.run import default_wait_for

    assert default_wait_for(8, 16) == 12 and default_wait_for(4, 8) == 6 and default_wait_for(4, 5) == 5
    assert default_wait_for(10, 10, min_results=10) == 10 and default_wait_for(1, 3, min_results=2) == 2


def test_run_command_with_a_small_N_and_no_wait_for():
    r = _invoke(["--K", "4", "--workers", "8", "--jobs", "2", "--service-ms", "0", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "K=4, N=8, 2 jobs" in r.output and "wait for 6 results" in " ".join(r.output.split())
    assert "deadline" not in r.output and "None" not in r.output  # only what was set is printed


def test_run_prints_a_deadline_only_when_one_is_set():
    r = _invoke(["--K", "4", "--workers", "8", "--jobs", "2", "--service-ms", "0", "--deadline-ms", "5000",
                 "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "wait for 6 results, deadline 5000 ms" in " ".join(r.output.split()) and "None" not in r.output


def test_run_on_ray_reruns_itself_in_a_loopback_namespace(monkeypatch):
    """Without --address, `gencc run --backend ray` re-executes the same options with --no-isolate inside the
    namespace (the re-executed command is captured here, not run)."""
    pytest.importorskip("ray")

    from gencc.cli import isolate

    seen = {}

    def fake(argv, **kwargs):
        seen["argv"] = list(argv)
        return 3

    monkeypatch.setattr(isolate, "in_loopback_namespace", lambda: False)
    monkeypatch.setattr(isolate, "can_unshare", lambda: (True, "`unshare -rn` (test)"))
    monkeypatch.setattr(isolate, "run_forwarding", fake)
    r = _invoke(["--backend", "ray", "--scheme", "bacc", "--K", "4", "--workers", "6", "--wait-for", "5", "--jobs", "2",
                 "--actors", "3", "--no-progress"])
    assert r.exit_code == 3, r.output  # the re-executed command's status
    assert "loopback-only network namespace, made with `unshare -rn` (test)" in r.output
    argv = seen["argv"]
    assert argv[1:4] == ["-m", "gencc.cli", "run"] and argv[-1] == "--no-isolate"
    opts = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert {k: opts[k] for k in ("--backend", "--scheme", "--K", "--workers", "--wait-for", "--jobs", "--actors")} == {
        "--backend": "ray", "--scheme": "bacc", "--K": "4", "--workers": "6", "--wait-for": "5", "--jobs": "2",
        "--actors": "3"}
    assert "--no-progress" in argv


def test_run_on_ray_without_a_namespace_says_how_to_proceed(monkeypatch):
    pytest.importorskip("ray")
    from gencc.cli import isolate

    monkeypatch.setattr(isolate, "in_loopback_namespace", lambda: False)
    monkeypatch.setattr(isolate, "can_unshare", lambda: (False, "unshare -rn: Operation not permitted"))
    r = _invoke(["--backend", "ray", "--jobs", "2", "--no-progress"])
    flat = " ".join(" ".join(ln.strip(" │╭╮╰╯─") for ln in r.output.splitlines()).split())
    assert r.exit_code == 2 and "--no-isolate" in flat and "Operation not permitted" in flat, r.output


@pytest.mark.parametrize("scheme", ["uncoded", "replication", "hedged", "gcc", "parm"])
def test_every_scheme_takes_the_shared_flags_at_equal_resources(scheme, caplog):
    """`--K 8 --workers 12` with the injected slowness runs for every scheme; a scheme that does not use one of
    them says so in one warning line and runs; the baselines get the same 12 workers as the coded schemes."""
    import logging

    caplog.set_level(logging.WARNING, logger="gencc.cli")
    r = _invoke(["--scheme", scheme, "--K", "8", "--workers", "12", "--jobs", "2", "--service-ms", "1",
                 "--slow-task-fraction", "0.1", "--slow-factor", "5", "--no-progress"])
    assert r.exit_code == 0, r.output
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "gencc.cli"]
    used = "N=8 of 12" if scheme == "uncoded" else "N=12"  # parm's K + ceil(K/2) is 12 too
    assert f"K=8, {used}, 2 jobs" in r.output, r.output
    if scheme == "uncoded":
        assert warned == ["--workers is not used by --scheme uncoded (a job sends its K=8 inputs to K of the N=12 "
                          "workers, one each); running without it"]
    else:
        assert warned == []


def test_run_command_passes_code_options_to_the_code(monkeypatch):
    """--opt scheme.key=value (as in gencc sweep) reaches the code the jobs run with, and the summary names it."""
    import gencc.codes.registry as registry

    built = []
    make = registry.make_code
    monkeypatch.setattr(registry, "make_code", lambda *a, **k: built.append(c := make(*a, **k)) or c)
    r = _invoke(["--scheme", "gcc", "--K", "4", "--workers", "8", "--jobs", "2", "--service-ms", "0",
                 "--no-progress", "--opt", "gcc.lam_dec=0.01", "--opt", "gcc.gaps=fit"])
    assert r.exit_code == 0, r.output
    assert built and all(c.lam_dec == 0.01 and c.gaps == "fit" for c in built)
    assert "gcc (lam_dec=0.01, gaps=fit) on local" in r.output


def test_a_warning_speaks_only_of_options_the_user_gave(caplog):
    """--workers left at its default is not warned about, even where the scheme uses fewer workers."""
    import logging

    caplog.set_level(logging.WARNING, logger="gencc.cli")
    r = _invoke(["--scheme", "uncoded", "--jobs", "2", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "K=8, N=8 of 16, 2 jobs" in r.output, r.output
    assert [rec.getMessage() for rec in caplog.records if rec.name == "gencc.cli"] == []


def test_run_takes_any_gencc_workload():
    """--workload runs jobs of another workload than the digits (here an analytic one, scored by rel_mse)."""
    r = _invoke(["--workload", "xsinx", "--scheme", "gcc", "--K", "4", "--workers", "8", "--jobs", "2",
                 "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "xsinx: gcc on local: K=4, N=8, 2 jobs, no injected latency" in " ".join(r.output.split()), r.output
    assert "rel_mse against f:" in r.output


def test_run_checks_k_against_the_workload_held_out_inputs(monkeypatch):
    import gencc.workloads

    w = gencc.workloads.load("xsinx", progress=False)
    r = _invoke(["--workload", "xsinx", "--K", str(len(w.X_test) + 1), "--workers", str(len(w.X_test) + 1),
                 "--scheme", "uncoded", "--jobs", "1", "--no-progress"])
    assert r.exit_code == 2 and "'--K'" in r.output and f"there are {len(w.X_test)}" in r.output, r.output
