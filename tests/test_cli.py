"""Every bad CLI input a new user was seen to try: exit code 2, a short message naming the problem, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gencc.cli import app

runner = CliRunner()
SWEEP = ["sweep", "-w", "toy-xsinx", "--K", "4", "--no-progress"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sweep CSV on one N (no rate data), a CSV with other columns, a plain file, a missing path."""
    d = tmp_path_factory.mktemp("cli")
    one_n = d / "one-n.csv"
    res = runner.invoke(app, [*SWEEP, "--N", "8", "--trials", "2", "-o", str(one_n)])
    assert res.exit_code == 0, res.output
    junk = d / "junk.csv"
    junk.write_text("x,y\n1,2\n")
    afile = d / "afile"
    afile.write_text("not a folder\n")
    return {"one_n": one_n, "junk": junk, "afile": afile, "missing": d / "missing.csv", "dir": d}


# (arguments, a fragment the message must contain); {name} is filled from the `files` fixture
BAD = [
    ([*SWEEP, "--N", "8", "--opt", "gcc.nokey=1"], "gcc has no option 'nokey'; its options: kernel"),
    ([*SWEEP, "--N", "8", "--opt", "bacc.alpha=x", "--schemes", "gcc"], "not in --schemes"),
    ([*SWEEP, "--N", "8", "--opt", "nokeyvalue"], "scheme.key=value"),
    ([*SWEEP, "--N", "8", "--opt", "gcc.kernel=spline"], "kernel must be one of auto, cubic"),
    ([*SWEEP, "--N", "8", "--opt", "gcc.beta=halton"], "chebyshev2-nested"),
    ([*SWEEP, "--N", "abc"], "--N: expected an integer or a lo:hi range, got 'abc'"),
    ([*SWEEP, "--ratios", "abc"], "--ratios: expected a number, got 'abc'"),
    ([*SWEEP, "--N", "8", "--K", "x"], "--K: expected an integer"),
    ([*SWEEP, "--N", "3"], "the grid is empty: N=3 < K=4"),
    ([*SWEEP, "--N", "-3"], "the grid is empty: N=-3 < K=4"),
    ([*SWEEP, "--N", "20", "--stragglers", "worst:20"], "S=20 >= N"),
    ([*SWEEP, "--N", "8", "--seeds", "3:1"], "empty range '3:1'"),
    ([*SWEEP, "--N", "8", "--seeds", ","], "no seeds given"),
    ([*SWEEP, "--N", "8", "--stragglers", "worst:x"], "bad straggler spec 'worst:x'"),
    ([*SWEEP, "--N", "8", "--stragglers", "bernoulli:2"], "bad straggler spec"),
    ([*SWEEP, "--N", "8", "--adversaries", "nope:2"], "bad adversary spec 'nope:2'; use model:A or model:N^a"),
    ([*SWEEP, "--N", "8", "--adversaries", "signflip:N^2"], "bad adversary spec 'signflip:N^2'"),
    ([*SWEEP, "--N", "8", "--adversaries", "signflip:2", "--stragglers", "worst:1"],
     "the grid is empty: adversaries with worst:1"),
    (["reproduce", "--preset", "adversarial", "-o", "{dir}", "--set", "adversaries=offset"], "bad adversary spec"),
    ([*SWEEP, "--N", "8", "--schemes", "nope"], "unknown code 'nope'"),
    ([*SWEEP, "--N", "8", "--schemes", "lcc"], "lcc needs option(s) degree"),
    (["sweep", "-w", "nope", "--K", "4", "--N", "8", "--no-progress"], "unknown workload 'nope'"),
    ([*SWEEP], "--N and/or --ratios"),
    ([*SWEEP, "--N", "8", "--trials", "0"], "--trials"),
    ([*SWEEP, "--N", "8", "--jobs", "0"], "--jobs"),
    ([*SWEEP, "--N", "8", "-o", "{junk}"], "missing column(s) workload, scheme"),
    (["plot", "{missing}"], "no such file"),
    (["plot", "{dir}"], "is a folder, not a sweep CSV"),
    ([*SWEEP, "--N", "8", "-o", "{dir}"], "is a folder, not a sweep CSV"),
    (["plot", "{junk}"], "missing column(s) workload"),
    (["plot", "{one_n}", "--kind", "nope"], "unknown plot kind(s) nope"),
    (["plot", "{one_n}", "--kind", "rate", "-o", "{dir}/never"], "do not support kind(s) rate"),
    (["plot", "{one_n}", "-o", "{afile}"], "Not a directory"),
    (["reproduce", "--preset", "nope"], "unknown preset 'nope'"),
    (["reproduce", "--preset", "vs-S", "--set", "colour=red", "-o", "{dir}/r"], "cannot override 'colour'"),
    (["reproduce", "--preset", "vs-S", "--set", "seeds", "-o", "{dir}/r"], "key=value"),
    (["reproduce", "--preset", "vs-S", "--set", "trials=x", "-o", "{dir}/r"], "trials must be a positive integer"),
    (["reproduce", "--preset", "vs-S", "--set", "seeds=abc", "-o", "{dir}/r"], "expected an integer"),
    (["reproduce", "--preset", "vs-S", "--set", "N=5", "--set", "workloads=toy-xsinx", "-o", "{dir}/r"],
     "the grid is empty"),
    (["reproduce", "--check", "-o", "{dir}/nowhere"], "no results.md"),
    (["reproduce", "--jobs", "0"], "--jobs"),
    (["run", "--backend", "nope"], "backend must be local or ray"),
    (["run", "--scheme", "nope"], "scheme must be one of"),
    (["run", "--actors", "3"], "apply to --backend ray only"),
    (["run", "--address", "127.0.0.1:6379"], "apply to --backend ray only"),
    (["run", "--K", "0"], "K must be a positive integer"),
    (["run", "--K", "8", "--N", "4"], "N=4 < K=8"),
    (["run", "--latency", "bimodal:q=1"], "bimodal takes p, factor, base"),
    (["run", "--latency", "lognormal"], "unknown latency model"),
    (["run", "--jobs", "0"], "--jobs"),
    (["demo", "--batches", "0"], "--batches"),
    (["demo", "--trials", "abc"], "--trials"),
    (["info", "extra"], "unexpected extra argument"),
    (["nope"], "No such command"),
]


def _check_usage_error(code: int, output: str, fragment: str) -> None:
    flat = " ".join(ln.strip(" │╭╮╰╯─") for ln in output.splitlines())
    assert code == 2, output
    assert "Traceback" not in output, output
    assert len(output.strip().splitlines()) <= 15, output
    assert " ".join(fragment.split()) in " ".join(flat.split()), output


@pytest.mark.parametrize(("args", "fragment"), BAD, ids=[" ".join(a[:4]) + f" [{i}]" for i, (a, _) in enumerate(BAD)])
def test_bad_input_is_exit_2_with_a_short_message(files: dict[str, Path], args: list[str], fragment: str) -> None:
    argv = [a.format(**files) for a in args]
    res = runner.invoke(app, argv, terminal_width=100)
    _check_usage_error(res.exit_code, res.output, fragment)


def test_a_mixed_grid_says_what_it_left_out(tmp_path: Path) -> None:
    res = runner.invoke(app, [*SWEEP, "--N", "3,8", "--stragglers", "worst:1,worst:8", "-o", str(tmp_path / "s.csv")])
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
    p = _gencc(["sweep", "-w", "toy-xsinx", "--K", "4", "--N", "8", "--opt", "gcc.nokey=1", "--no-progress",
                "-o", str(tmp_path / "x.csv")])
    _check_usage_error(p.returncode, p.stdout + p.stderr, "gcc has no option 'nokey'")
