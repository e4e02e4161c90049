"""Every bad CLI input a new user was seen to try: exit code 2, a short message naming the problem, no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gencc.cli import app

runner = CliRunner()
SWEEP = ["sweep", "-w", "toy-xsinx", "--K", "4", "--no-progress"]
#: what each command does once its options are checked (loading or training a model, running a sweep or jobs,
#: sending load, serving): a bad option must be refused before any of it starts
SLOW_WORK = [("gencc.workloads", "load"), ("gencc.workloads", "load_parity"), ("gencc.experiments.sweep", "run_sweep"),
             ("gencc.experiments.reproduce", "reproduce"), ("gencc.experiments.staleness", "check"),
             ("gencc.experiments.plots", "make_outputs"), ("gencc.runtime.job", "stream"),
             ("gencc.serving.service", "Service.build"), ("gencc.loadgen.load", "run_http"), ("uvicorn", "run")]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own temporary folder: a default output (./sweep.csv, -o .) lands there."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def no_slow_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace each SLOW_WORK function by one that records its call (and fails the command); returns the calls."""
    import importlib

    calls: list[str] = []
    for module, name in SLOW_WORK:
        *path, attr = name.split(".")
        owner = importlib.import_module(module)
        for part in path:
            owner = getattr(owner, part)

        def fake(*args, _what=f"{module}.{name}", **kwargs):
            calls.append(_what)
            raise AssertionError(f"{_what} was called: slow work started before the options were checked")

        monkeypatch.setattr(owner, attr, fake)
    return calls


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sweep CSV on one N (no rate data), a CSV with other columns, a plain file, a missing path."""
    d = tmp_path_factory.mktemp("cli")
    one_n = d / "one-n.csv"
    res = runner.invoke(app, [*SWEEP, "--workers", "8", "--trials", "2", "-o", str(one_n)])
    assert res.exit_code == 0, res.output
    junk = d / "junk.csv"
    junk.write_text("x,y\n1,2\n")
    afile = d / "afile"
    afile.write_text("not a folder\n")
    (d / "docs").mkdir()
    (d / "docs" / "results.md").write_text("# results\n")
    return {"one_n": one_n, "junk": junk, "afile": afile, "missing": d / "missing.csv", "dir": d}


LOADTEST = ["loadtest", "--url", "http://127.0.0.1:1", "--rate", "1", "--duration-ms", "1000"]

# (arguments, a fragment the message must contain); {name} is filled from the `files` fixture
BAD = [
    ([*SWEEP, "--workers", "8", "--opt", "gcc.nokey=1"], "gcc has no option 'nokey'; its options: kernel"),
    ([*SWEEP, "--workers", "8", "--opt", "bacc.alpha=x", "--scheme", "gcc"],
     "'--opt': --opt bacc.* sets options of bacc, but --scheme is gcc; pass --scheme bacc"),
    ([*SWEEP, "--workers", "8", "--opt", "nokeyvalue"], "'--opt': code options look like scheme.key=value"),
    ([*SWEEP, "--workers", "8", "--opt", "gcc.kernel=spline"], "'--opt': gcc.kernel takes one of auto, cubic"),
    ([*SWEEP, "--workers", "8", "--opt", "gcc.beta=halton"], "chebyshev2-nested"),
    ([*SWEEP, "--workers", "abc"], "'--workers': expected an integer or a lo:hi range, got 'abc'"),
    ([*SWEEP, "--ratios", "abc"], "'--ratios': expected a number, got 'abc'"),
    ([*SWEEP, "--ratios", "inf"], "'--ratios': ratios must be finite numbers > 0"),
    ([*SWEEP, "--ratios", "nan"], "'--ratios': ratios must be finite numbers > 0"),
    ([*SWEEP, "--ratios", "-2"], "'--ratios': ratios must be finite numbers > 0 (N = round(ratio K)), got -2"),
    ([*SWEEP, "--ratios", "1e9"], "'--ratios': N must be at most 100000 workers"),
    ([*SWEEP, "--workers", "200000"], "'--workers': N must be at most 100000 workers"),
    (["run", "--workers", "5000"], "'--workers': must be an integer <= 1024"),
    (["serve", "--workers", "5000"], "'--workers': must be an integer <= 1024"),
    (["run", "--workers", "5000"], "'--workers': must be an integer <= 1024"),
    ([*SWEEP, "--workers", "8", "--K", "x"], "'--K': expected an integer"),
    (["sweep", "-w", "toy-xsinx", "--K", "0", "--workers", "8", "--no-progress"],
     "'--K': K (inputs per code) must be a positive integer, got 0"),
    ([*SWEEP, "--workers", "3"], "the grid is empty: N=3 < K=4"),
    ([*SWEEP, "--workers", "-3"], "the grid is empty: N=-3 < K=4"),
    ([*SWEEP, "--workers", "20", "--stragglers", "worst:20"], "S=20 >= N"),
    ([*SWEEP, "--workers", "8", "--seeds", "3:1"], "empty range '3:1'"),
    ([*SWEEP, "--workers", "8", "--seeds", ","], "'--seeds': no seeds given"),
    ([*SWEEP, "--workers", "8", "--scheme", ""], "'--scheme': no schemes given"),
    ([*SWEEP, "--workers", "8", "--stragglers", "worst:x"], "'--stragglers': bad straggler spec 'worst:x'"),
    ([*SWEEP, "--workers", "8", "--stragglers", "bernoulli:2"], "bad straggler spec"),
    ([*SWEEP, "--workers", "8", "--stragglers", "random:inf%"], "'--stragglers': bad straggler spec 'random:inf%'"),
    ([*SWEEP, "--workers", "8", "--stragglers", "random:-1"], "'--stragglers': bad straggler spec 'random:-1'"),
    ([*SWEEP, "--workers", "8", "--adversaries", "nope:2"], "bad adversary spec 'nope:2'; use model:A or model:N^a"),
    ([*SWEEP, "--workers", "8", "--adversaries", "signflip:N^2"], "bad adversary spec 'signflip:N^2'"),
    ([*SWEEP, "--workers", "8", "--adversaries", "signflip:2", "--stragglers", "worst:1"],
     "the grid is empty: adversaries with worst:1"),
    (["reproduce", "--preset", "adversarial", "-o", "{dir}", "--set", "adversaries=offset"], "bad adversary spec"),
    ([*SWEEP, "--workers", "8", "--scheme", "nope"], "'--scheme': unknown scheme 'nope'; choose one of"),
    ([*SWEEP, "--workers", "8", "--scheme", "lcc"], "'--opt': lcc needs option(s) degree"),
    ([*SWEEP, "--workers", "8", "--scheme", "parm"], "parm with K=4 and these options runs on N=6 workers, got N=8"),
    (["sweep", "-w", "nope", "--K", "4", "--workers", "8", "--no-progress"], "'--workload': unknown workload 'nope'"),
    ([*SWEEP], "--workers and/or --ratios"),
    ([*SWEEP, "--workers", "8", "--trials", "0"], "--trials"),
    ([*SWEEP, "--workers", "8", "--procs", "0"], "'--procs': must be an integer >= 1, got 0"),
    ([*SWEEP, "--workers", "8", "-o", "{junk}"], "'--out': {junk} is not a sweep CSV"),
    ([*SWEEP, "--workers", "8", "-o", "{dir}"], "'--out': {dir} is a folder"),
    ([*SWEEP, "--workers", "8", "-o", "/nonexistent/dir/x.csv"], "'--out': the folder /nonexistent/dir of"),
    ([*SWEEP, "--workers", "8", "-o", "{afile}/x.csv"], "is a file, not a folder"),
    (["plot", "{missing}"], "'CSV...': {missing} does not exist"),
    (["plot", "{dir}"], "is a folder, not a sweep CSV"),
    (["plot", "{junk}"], "missing column(s) workload"),
    (["plot", "{one_n}", "--kind", "nope"], "'--kind': unknown plot kind(s) nope"),
    (["plot", "{one_n}", "--kind", "rate", "-o", "{dir}/never"], "'--kind': the rows do not support kind(s) rate"),
    (["plot", "{one_n}", "-o", "{afile}"], "'--out': {afile} is a file, not a folder"),
    (["plot", "{one_n}", "-o", "/nonexistent/dir/figs"], "'--out': the folder /nonexistent/dir of"),
    (["plot", "{one_n}", "--prefix", ""], "'--prefix': the prefix starts file names"),
    (["plot", "{one_n}", "--prefix", "a/b"], "'--prefix'"),
    (["reproduce", "--preset", "nope"], "'--preset': unknown preset 'nope'"),
    (["reproduce", "--preset", "vs-S", "--set", "colour=red", "-o", "{dir}/r"], "cannot override 'colour'"),
    (["reproduce", "--preset", "vs-S", "--set", "seeds", "-o", "{dir}/r"], "key=value"),
    (["reproduce", "--preset", "vs-S", "--set", "trials=x", "-o", "{dir}/r"], "trials must be a positive integer"),
    (["reproduce", "--set", "trials=0", "-o", "{dir}/r"], "'--set': preset rate-worst: trials must be a positive"),
    (["reproduce", "--preset", "vs-S", "--set", "seeds=abc", "-o", "{dir}/r"], "expected an integer"),
    (["reproduce", "--preset", "vs-S", "--set", "N=5", "--set", "workloads=toy-xsinx", "-o", "{dir}/r"],
     "the grid is empty"),
    (["reproduce", "--set", "ratios=inf", "-o", "{dir}/r"], "'--set': preset rate-worst: ratios must be finite"),
    (["reproduce", "--set", "workloads=nope", "-o", "{dir}/r"], "'--set': preset rate-worst: unknown workload"),
    (["reproduce", "--preset", "low-redundancy", "--set", "sets=1", "-o", "{dir}/r"], "'--set': sets must be at"),
    (["reproduce", "--check", "-o", "{dir}/nowhere"], "'--out': no results.md"),
    (["reproduce", "--check", "-o", "{dir}/docs", "--set", "trials=0"], "'--set': preset rate-bernoulli: trials"),
    (["reproduce", "-o", "/nonexistent/dir/docs"], "'--out': the folder /nonexistent/dir of"),
    (["reproduce", "-o", "{afile}"], "'--out': {afile} is a file, not a folder"),
    (["reproduce", "-j", "0"], "'--procs': must be an integer >= 1, got 0"),
    (["run", "--backend", "nope"], "'--backend': unknown backend 'nope'; choose one of local, ray"),
    (["run", "--scheme", "nope"], "'--scheme': unknown scheme 'nope'; choose one of uncoded"),
    (["run", "--actors", "3"], "'--actors': --actors needs --backend ray"),
    (["run", "--address", "127.0.0.1:6379"], "'--address': --address needs --backend ray"),
    (["run", "--K", "361", "--workers", "400"],
     "'--K': a job takes K distinct held-out digits, of which there are 360"),
    (["run", "--K", "0"], "'--K': must be an integer >= 1, got 0"),
    (["run", "--workers", "0"], "'--workers': must be an integer >= 1, got 0"),
    (["run", "--K", "8", "--workers", "4"], "'--workers': need at least as many workers as inputs: N=4 < K=8"),
    (["run", "--wait-for", "20"], "'--wait-for': must be an integer in [2, N=16]"),
    (["run", "--K", "4", "--workers", "8", "--wait-for", "9"], "'--wait-for': must be an integer in [2, N=8]"),
    (["run", "--scheme", "uncoded", "--wait-for", "3"], "'--wait-for': applies to coded jobs only"),
    (["run", "--scheme", "hedged", "--deadline-ms", "1"], "'--deadline-ms': deadline applies to coded jobs only"),
    (["run", "--deadline-ms", "inf"], "'--deadline-ms': must be a finite number > 0, got inf"),
    (["run", "--deadline-ms", "0"], "'--deadline-ms': must be a finite number > 0, got 0"),
    (["run", "--hedge-delay-ms", "100"], "'--hedge-delay-ms': --hedge-delay-ms applies to --scheme hedged"),
    (["run", "--scheme", "hedged", "--hedge-delay-ms", "nan"], "'--hedge-delay-ms': must be a finite number >= 0"),
    (["run", "--scheme", "uncoded", "--K", "8", "--workers", "5"], "'--workers': need at least as many workers as "
                                                                   "inputs: N=5 < K=8"),
    (["run", "--seed", "-1"], "'--seed': must be an integer >= 0 (a seed), got -1"),
    (["run", "--slow-task-fraction", "1"], "'--slow-task-fraction': must be a finite number >= 0 and < 1, got 1"),
    (["run", "--slow-task-fraction", "nan"], "'--slow-task-fraction': must be a finite number >= 0, got nan"),
    (["run", "--slow-task-fraction", "0.1"], "'--slow-task-fraction': a slow task is --slow-factor times slower "
                                              "than --service-ms: give --service-ms MS > 0 with it"),
    (["run", "--service-ms", "5", "--slow-factor", "3"], "'--slow-factor': --slow-factor applies with "
                                                         "--slow-task-fraction > 0"),
    (["run", "--scheme", "hedged"], "'--hedge-delay-ms': --scheme hedged sends a second copy after --hedge-delay-ms"),
    (["run", "--model", "m:f", "--workload", "xsinx"], "'--workload': give --workload (a gencc workload) or "
                                                       "--model (your own model), not both"),
    (["run", "--workload", "nope"], "'--workload': unknown workload"),
    (["run", "--workload", "xsinx", "--scheme", "parm"], "'--scheme': --scheme parm runs a trained parity model"),
    (["run", "--slow-factor", "0.5"], "'--slow-factor': must be a finite number >= 1, got 0.5"),
    (["run", "--service-ms", "-1"], "'--service-ms': must be a finite number >= 0, got -1"),
    (["run", "--jobs", "0"], "'--jobs': must be an integer >= 1, got 0"),
    (["run", "--in-flight", "0"], "'--in-flight': must be an integer >= 1, got 0"),
    (["run", "--jobs", "x"], "'--jobs'"),
    (["run", "--opt", "lam_dec=1"], "'--opt': code options look like scheme.key=value, got 'lam_dec=1'"),
    (["run", "--opt", "bacc.gaps=fit"], "'--opt': --opt bacc.* sets options of bacc, but --scheme is gcc (the "
                                        "default); pass --scheme bacc"),
    (["run", "--opt", "gcc.nope=1"], "'--opt': gcc has no option 'nope'"),
    (["run", "--opt", "gcc.lam_dec=-1"], "'--opt': gcc.lam_dec takes a number >= 0, gcv or loo; got '-1'"),
    (["run", "--opt", "gcc.lam_dec=abc"], "'--opt': gcc.lam_dec takes a number >= 0, gcv or loo; got 'abc'"),
    (["run", "--opt", "gcc.length_scale=0"], "'--opt': gcc.length_scale takes a number > 0 or auto; got '0'"),
    (["run", "--scheme", "sgcc", "--opt", "sgcc.rho=x"], "'--opt': sgcc.rho takes a number >= 0; got 'x'"),
    (["run", "--scheme", "hedged", "--opt", "gcc.lam_dec=1"], "'--opt': code options apply to the coded schemes"),
    (["run", "--scheme", "parm", "--opt", "parm.k=3"], "'--opt': code options apply to the coded schemes without a "
                                                     "parity model (bacc, gcc, sgcc); parm's code"),
    (["run", "--opt", "gcc.lam_dec=0.1", "--workers", "4"], "'--workers': need at least as many workers as inputs"),
    (["demo", "--batches", "0"], "'--batches': must be an integer >= 1, got 0"),
    (["demo", "--trials", "abc"], "--trials"),
    (["demo", "--jobs", "-1"], "--jobs"),
    (["demo", "--seed", "-1"], "'--seed': must be an integer >= 0 (a seed), got -1"),
    (["serve", "--max-wait-ms", "inf"], "'--max-wait-ms': must be a finite number > 0, got inf"),
    (["serve", "--max-wait-ms", "0"], "'--max-wait-ms': must be a finite number > 0, got 0"),
    (["serve", "--service-ms", "nan"], "'--service-ms': must be a finite number >= 0, got nan"),
    (["serve", "--service-ms", "-1"], "'--service-ms': must be a finite number >= 0"),
    (["serve", "--slow-fraction", "1"], "'--slow-fraction': must be a probability in [0, 1)"),
    (["serve", "--slow-fraction", "-0.1"], "'--slow-fraction': must be a finite number >= 0"),
    (["serve", "--slow-factor", "0.5"], "'--slow-factor': must be a finite number >= 1"),
    (["serve", "--address", "127.0.0.1:6379"], "'--address': address needs backend ray"),
    (["serve", "--scheme", "hedged", "--max-wait-ms", "5"], "'--max-wait-ms': --max-wait-ms applies to the coded"),
    (["serve", "--slow-factor", "5"], "'--slow-factor': --slow-factor applies with --slow-fraction > 0"),
    (["serve", "--workers", "0"], "'--workers': must be an integer >= 1, got 0"),
    (["serve", "--K", "0"], "'--K': must be an integer >= 1, got 0"),
    (["serve", "--max-pending", "0"], "'--max-pending': must be an integer >= 1, got 0"),
    (["serve", "--port", "0"], "'--port': must be an integer >= 1 and <= 65535, got 0"),
    (["serve", "--port", "70000"], "'--port': must be an integer >= 1 and <= 65535, got 70000"),
    (["serve", "--scheme", "nope"], "'--scheme': unknown scheme 'nope'; choose one of uncoded"),
    (["serve", "--backend", "nope"], "'--backend': unknown backend 'nope'; choose one of local, ray"),
    (["serve", "--workload", "nope"], "'--workload': unknown workload 'nope'"),
    (["serve", "--scheme", "gcc", "--workers", "8", "--K", "8"], "'--workers': gcc needs more workers than K=8"),
    (["serve", "--scheme", "sgcc-parity", "--workers", "9", "--K", "8"], "'--K': sgcc-parity on 9 workers with K=8"),
    (["serve", "--scheme", "parm", "--workers", "2"], "'--workers': parm with --K=2 runs groups on 3"),
    (["serve", "--scheme", "replication", "--workers", "1"], "'--workers': replication sends two copies"),
    (["serve", "--check-results", "maybe"], "'--check-results': unknown check 'maybe'; choose one of off, on, strict"),
    (["serve", "--scheme", "uncoded", "--check-results", "on"], "'--check-results': wrong-result checks apply to"),
    (["serve", "--scheme", "gcc-hedge", "--packed-parity"], "'--packed-parity': packed parity applies "
                                                               "to the schemes with a parity model (parm and sgcc"),
    (["serve", "--opt", "gcc.lam_dec=0.1"], "'--opt': --opt gcc.* sets options of gcc, but --scheme is sgcc (the "
                                            "default); pass --scheme gcc"),
    (["serve", "--opt", "gcc.nosuch=1"], "'--opt': --opt gcc.* sets options of gcc, but --scheme is sgcc (the "
                                         "default); pass --scheme gcc"),
    (["serve", "--scheme", "sgcc", "--opt", "gcc.x=1"], "'--opt': --opt gcc.* sets options of gcc, but --scheme is "
                                                        "sgcc; pass --scheme gcc"),
    (["serve", "--scheme", "gcc", "--opt", "gcc.nosuch=1"], "'--opt': gcc has no option 'nosuch'; its options: "
                                                            "kernel, length_scale, lam_enc, lam_dec, alpha, beta, "
                                                            "decoder, gaps"),
    (["serve", "--opt", "foo.x=1"], "'--opt': --opt foo.* names no code or scheme; --scheme is sgcc (the default): "
                                    "write sgcc.KEY=VALUE"),
    (["serve", "--scheme", "gcc-hedge", "--opt", "gcc.nope=1"], "'--opt': gcc has no option 'nope'"),
    (["serve", "--scheme", "gcc-hedge", "--opt", "bacc.x=1"], "'--opt': --opt bacc.* sets options of bacc, but "
                                                               "--scheme is gcc-hedge, whose code is gcc; pass "
                                                               "--scheme bacc"),
    (["serve", "--scheme", "gcc-hedge", "--opt", "lcc.x=1"], "'--opt': --opt lcc.* sets options of lcc, which "
                                                              "--scheme gcc-hedge does not run; write "
                                                              "gcc-hedge.KEY=VALUE or gcc.KEY=VALUE"),
    (["serve", "--scheme", "hedged", "--opt", "hedged.x=1"], "'--opt': code options apply to the coded "
                                                             "schemes without a parity model (bacc, gcc, sgcc, "
                                                             "gcc-hedge, sgcc-hedge); hedged is a baseline"),
    (["serve", "--scheme", "parm", "--opt", "parm.k=3"], "'--opt': code options apply to the coded "
                                                          "schemes without a parity model (bacc, gcc, sgcc, "
                                                          "gcc-hedge, sgcc-hedge); parm's code follows"),
    (["serve", "--opt", "lam_dec=1"], "'--opt': code options look like scheme.key=value"),
    (["serve", "--host", "no-such-host.invalid"], "'--host': --host 'no-such-host.invalid' does not resolve"),
    ([*LOADTEST[:2], "http://127.0.0.1:99999", *LOADTEST[3:], "--out", "x.csv"], "'--url': the port of --url"),
    ([*LOADTEST[:2], "ftp://x", *LOADTEST[3:], "--out", "x.csv"], "'--url': --url must look like http://"),
    ([*LOADTEST[:2], "http://127.0.0.1:8000/?q=1", *LOADTEST[3:], "--out", "x.csv"], "drop the query"),
    ([*LOADTEST, "--out", "x.csv"], "'--url': cannot reach http://127.0.0.1:1 (connection refused)"),
    ([*LOADTEST, "--out", "{dir}"], "'--out': {dir} is a folder; give the path of a file to write"),
    ([*LOADTEST, "--out", "/nonexistent/dir/x.csv"], "'--out': the folder /nonexistent/dir of"),
    ([*LOADTEST, "--out", "x.csv", "--plot", "/nonexistent/dir/png"], "'--plot': the folder /nonexistent/dir of"),
    ([*LOADTEST, "--out", "x.csv", "--plot", "{afile}"], "'--plot': {afile} is a file, not a folder"),
    ([*LOADTEST, "--out", "x.csv", "--seed", "-1"], "'--seed': must be an integer >= 0 (a seed)"),
    ([*LOADTEST, "--out", "x.csv", "--timeout-ms", "inf"], "'--timeout-ms': must be a finite number > 0, got inf"),
    ([*LOADTEST, "--out", "x.csv", "--workload", "nope"], "'--workload': unknown workload 'nope'"),
    ([*LOADTEST[:4], "inf", *LOADTEST[5:], "--out", "x.csv"], "'--rate': must be a finite number > 0, got inf"),
    ([*LOADTEST[:4], "nan", *LOADTEST[5:], "--out", "x.csv"], "'--rate': must be a finite number > 0, got nan"),
    ([*LOADTEST[:6], "0", "--out", "x.csv"], "'--duration-ms': must be a finite number > 0, got 0"),
    ([*LOADTEST[:4], "1e6", *LOADTEST[5:6], "10000", "--out", "x.csv"], "'--rate': rate x duration must stay under"),
    (["--log-level", "loud", "info"], "'--log-level': must be one of debug, info, warning, error"),
    (["info", "extra"], "unexpected extra argument"),
    (["nope"], "No such command"),
]


def _check_usage_error(code: int, output: str, fragment: str) -> None:
    """Exit code 2 and at most three lines: the usage, the help hint and the message (with `fragment`) on one."""
    flat = " ".join(ln.strip(" │╭╮╰╯─") for ln in output.splitlines())
    assert code == 2, output
    assert "Traceback" not in output, output
    assert len(output.strip().splitlines()) <= 3, output
    assert output.strip().splitlines()[-1].startswith("Error: "), output
    assert " ".join(fragment.split()) in " ".join(flat.split()), output


@pytest.mark.parametrize(("args", "fragment"), BAD, ids=[" ".join(a[:4]) + f" [{i}]" for i, (a, _) in enumerate(BAD)])
def test_bad_input_is_exit_2_with_a_short_message(files: dict[str, Path], no_slow_work: list[str], tmp_path: Path,
                                                  args: list[str], fragment: str) -> None:
    argv = [a.format(**files) for a in args]
    res = runner.invoke(app, argv, terminal_width=100)
    _check_usage_error(res.exit_code, res.output, fragment.format(**files))
    assert no_slow_work == [], res.output  # refused before any model, sweep, job or load started
    assert list(tmp_path.iterdir()) == [], "a refused command wrote into the working folder"


@pytest.mark.parametrize("args", [["run", "--backend", "ray", "--address", "bogus"],
                                  ["serve", "--backend", "ray", "--address", "h:0"]])
def test_a_malformed_ray_address_is_refused_before_ray_starts(no_slow_work: list[str], args: list[str]) -> None:
    pytest.importorskip("ray")  # without Ray the refusal is "needs Ray" (test_run_on_ray_without_ray_installed)
    res = runner.invoke(app, args, terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "'--address': a Ray address is auto, HOST:PORT or ray://HOST:PORT")
    assert no_slow_work == []


def test_a_mixed_grid_says_what_it_left_out(tmp_path: Path) -> None:
    res = runner.invoke(app, [*SWEEP, "--workers", "3,8", "--stragglers", "worst:1,worst:8", "-o",
                              str(tmp_path / "s.csv")])
    assert res.exit_code == 0, res.output
    assert "left out N=3 < K=4 (a code needs at least K workers): 4 points" in res.output
    assert "left out worst:8 at N=8 (S=8 >= N: no worker would return): 2 points" in res.output
    assert "2 grid points: 0 already in" in res.output


def test_plot_writes_nothing_when_the_kind_is_unsupported(files: dict[str, Path]) -> None:
    out = files["dir"] / "nothing"
    runner.invoke(app, ["plot", str(files["one_n"]), "--kind", "vs-S", "-o", str(out)])
    assert not out.exists()


def _gencc(argv: list[str], prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}import sys; sys.argv = ['gencc', *{argv!r}]; from gencc.cli import main; main()"
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_run_on_ray_without_ray_installed() -> None:
    p = _gencc(["run", "--backend", "ray", "--jobs", "2"], prelude="import sys; sys.modules['ray'] = None; ")
    _check_usage_error(p.returncode, p.stdout + p.stderr, "needs Ray, which is not installed: pip install")


def test_the_entry_point_turns_library_errors_into_exit_2(tmp_path: Path) -> None:
    p = _gencc(["sweep", "-w", "toy-xsinx", "--K", "4", "--workers", "8", "--opt", "gcc.nokey=1", "--no-progress",
                "-o", str(tmp_path / "x.csv")])
    _check_usage_error(p.returncode, p.stdout + p.stderr, "gcc has no option 'nokey'")


def test_version_prints_the_package_version() -> None:
    import gencc

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"gencc {gencc.__version__}"
    p = _gencc(["--version"])
    assert p.returncode == 0 and p.stdout.strip() == f"gencc {gencc.__version__}", p.stderr


@pytest.fixture
def gencc_logger():
    """The `gencc` logger, its level and handlers restored after the test (the CLI configures it)."""
    import logging

    logger = logging.getLogger("gencc")
    saved = (logger.level, list(logger.handlers))
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]


def test_log_level_configures_the_gencc_logger_only_to_stderr(gencc_logger, capsys) -> None:
    import logging

    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    for _ in range(2):  # configuring twice leaves one handler
        res = runner.invoke(app, ["--log-level", "debug", "info"])
        assert res.exit_code == 0, res.output
    assert gencc_logger.level == logging.DEBUG
    ours = [h for h in gencc_logger.handlers if type(h).__name__ == "_StderrHandler"]
    assert len(ours) == 1
    assert (root.level, list(root.handlers)) == before  # the root logger is left alone
    logging.getLogger("gencc.serving.test").debug("a debug record")
    logging.getLogger("other").warning("not gencc's")
    err = capsys.readouterr().err
    assert "DEBUG gencc.serving.test: a debug record" in err and "not gencc's" not in err
    res = runner.invoke(app, ["--log-level", "ERROR", "info"])
    assert res.exit_code == 0 and gencc_logger.level == logging.ERROR
    logging.getLogger("gencc.x").warning("below the level")
    assert "below the level" not in capsys.readouterr().err


def test_importing_gencc_configures_no_logging() -> None:
    code = ("import logging, gencc, gencc.serving, gencc.runtime, gencc.experiments; "
            "print(logging.getLogger('gencc').handlers, logging.getLogger().handlers, "
            "logging.getLogger('gencc').level)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "[]", "0"]


@pytest.mark.parametrize("args", [["run", "--K", "4", "--workers", "8", "--wait-for", "9"],
                                  ["sweep", "-w", "toy-xsinx", "--K", "4", "--ratios", "inf"],
                                  ["serve", "--max-wait-ms", "inf"]])
def test_a_refusal_from_the_entry_point_is_exit_2_and_one_message(args: list[str]) -> None:
    p = _gencc(args)
    _check_usage_error(p.returncode, p.stdout + p.stderr, "Invalid value for")


def test_output_paths_are_checked_without_creating_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from gencc.cli import options as opts

    (tmp_path / "a").mkdir()
    (tmp_path / "f").write_text("x")
    assert opts.check_out_file("--out", tmp_path / "a" / "x.csv") == tmp_path / "a" / "x.csv"
    assert opts.check_out_dir("--out", tmp_path / "new") == tmp_path / "new"
    assert opts.check_out_dir("--out", tmp_path / "a") == tmp_path / "a"
    bad = [(opts.check_out_file, tmp_path / "a", "is a folder"),
           (opts.check_out_file, tmp_path / "no" / "x.csv", "does not exist (no folder is created)"),
           (opts.check_out_file, tmp_path / "f" / "x.csv", "is a file, not a folder"),
           (opts.check_out_dir, tmp_path / "f", "is a file, not a folder"),
           (opts.check_out_dir, tmp_path / "no" / "new", "does not exist (only the last folder is created)")]
    for check, path, words in bad:
        with pytest.raises(typer.BadParameter, match=re.escape(words)) as err:
            check("--out", path)
        assert "'--out'" in err.value.format_message()
    monkeypatch.setattr(opts.os, "access", lambda *a: False)
    for check in (opts.check_out_file, opts.check_out_dir):
        with pytest.raises(typer.BadParameter, match="no permission to write"):
            check("--out", tmp_path / "a" / "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "f"] and not any((tmp_path / "a").iterdir())


def test_a_code_option_out_of_its_values_names_them_in_command_line_words(no_slow_work: list[str]) -> None:
    """`--opt gcc.lam_dec=abc`: the values gcc.lam_dec takes, as a command line writes them (no Python advice)."""
    res = runner.invoke(app, ["run", "--opt", "gcc.lam_dec=abc"], terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "Error: Invalid value for '--opt': gcc.lam_dec takes a number >= 0, "
                                                  "gcv or loo; got 'abc'")
    assert "float(text)" not in res.output and "convert" not in res.output
    assert no_slow_work == []


def test_an_option_of_another_code_says_the_scheme_is_the_default_and_how_to_choose(no_slow_work: list[str]) -> None:
    """`gencc serve --opt gcc.nosuch=1` without --scheme: --scheme is sgcc, the default; pass --scheme gcc. With
    --scheme gcc the unknown key is refused with the code's keys."""
    res = runner.invoke(app, ["serve", "--opt", "gcc.nosuch=1"], terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "'--opt': --opt gcc.* sets options of gcc, but --scheme is sgcc "
                                                  "(the default); pass --scheme gcc")
    res = runner.invoke(app, ["serve", "--scheme", "gcc", "--opt", "gcc.nosuch=1"], terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "'--opt': gcc has no option 'nosuch'; its options: kernel, "
                                                  "length_scale, lam_enc, lam_dec, alpha, beta, decoder, gaps")
    assert no_slow_work == []


def test_a_model_file_name_is_answered_with_its_module_form(no_slow_work: list[str], tmp_path: Path) -> None:
    """--model winemlp.py:make names a file: the module form winemlp:make and the folder it is imported from, in
    one line (no dump of sys.path); a module that is nowhere names the folder searched."""
    (tmp_path / "winemlp.py").write_text("def make():\n    return lambda x: x\n")
    res = runner.invoke(app, ["serve", "--model", "winemlp.py:make", "--input-shape", "13"], terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "'--model': model spec 'winemlp.py:make': an import path names a "
                                                  "module, not a file: write 'winemlp:make' (imported from the "
                                                  f"current folder, {tmp_path}, which holds winemlp.py)")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.py").write_text("def make():\n    return lambda x: x\n")
    res = runner.invoke(app, ["run", "--model", "sub/other.py:make", "--input-shape", "13"], terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "'--model': model spec 'sub/other.py:make': an import path names a "
                                                  f"module, not a file: write 'other:make' and run from {tmp_path}/sub "
                                                  "(the folder holding other.py), or add that folder to PYTHONPATH")
    res = runner.invoke(app, ["serve", "--model", "nosuch_cli_model:make", "--input-shape", "13"], terminal_width=100)
    _check_usage_error(res.exit_code, res.output, "'--model': model spec 'nosuch_cli_model:make': no module "
                                                  f"'nosuch_cli_model' in the current folder, {tmp_path}, or on "
                                                  "PYTHONPATH; run from the folder holding nosuch_cli_model.py")
    assert "sys.path" not in res.output
    assert no_slow_work == []


def test_a_model_whose_factory_raises_is_three_lines_with_the_error_and_where(tmp_path: Path) -> None:
    """docs/guides/your_model.md's promise, from the installed entry point: the usage, the help hint and one line
    with the error's type, its message and where in the user's file it was raised; exit 2."""
    (tmp_path / "raising_factory_model.py").write_text(
        "def make():\n    raise RuntimeError('weights file missing: wine.pt')\n")
    p = _gencc(["serve", "--model", "raising_factory_model:make", "--input-shape", "13"])
    out = p.stdout + p.stderr
    _check_usage_error(p.returncode, out, "Error: Invalid value for '--model': model 'raising_factory_model:make': "
                                          "the factory raised RuntimeError: weights file missing: wine.pt (at "
                                          "raising_factory_model.py:2 in make)")
    assert out.strip().splitlines()[:2] == ["Usage: gencc serve [OPTIONS]", "Try 'gencc serve --help' for help."]
