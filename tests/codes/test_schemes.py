"""The one scheme table (gencc.codes.schemes): every front end's list, and every command's --scheme choices, derive
from it; every --opt is parsed by the registry's typed parser."""

from __future__ import annotations

import pytest
import typer

from gencc.codes import CODES
from gencc.codes.schemes import FRONTS, SCHEME_SPECS, check_code_options, option_code, scheme_spec, schemes


def test_the_table_names_registry_codes_and_known_front_ends():
    for name, spec in SCHEME_SPECS.items():
        assert spec.name == name and spec.fronts and set(spec.fronts) <= set(FRONTS)
        assert spec.code is None or spec.code in CODES
        assert spec.coded == (spec.code is not None and spec.baseline is None)
    assert set(schemes("sweeps")) == set(CODES)  # a sweep simulates every code of the registry
    with pytest.raises(ValueError, match="unknown front end 'web'"):
        schemes("web")


def test_every_front_end_derives_its_list_from_the_table():
    from gencc.cli.experiments import SWEEP_CHOICES
    from gencc.cli.run import CODED, RUN_SCHEMES
    from gencc.experiments.schemes import SWEEP_SCHEMES
    from gencc.serving import SCHEME_TABLE, SCHEMES
    from gencc.serving.config import BASELINES
    from gencc.serving.parity import PARITY_SCHEMES
    from gencc.training import TRAINING_SCHEMES

    assert SCHEMES == tuple(SCHEME_TABLE) == schemes("serving")
    assert TRAINING_SCHEMES == schemes("training")
    assert RUN_SCHEMES == schemes("jobs") and CODED == tuple(n for n in RUN_SCHEMES if SCHEME_SPECS[n].coded)
    assert SWEEP_SCHEMES == schemes("sweeps") and SWEEP_CHOICES == ", ".join(schemes("sweeps"))
    assert set(BASELINES) == {n for n in schemes("serving") if SCHEME_SPECS[n].baseline}
    assert PARITY_SCHEMES == ("parm", "sgcc-parity")
    for name, s in SCHEME_TABLE.items():
        spec = SCHEME_SPECS[name]
        assert s.code == (spec.code if spec.coded else None) and s.parity == spec.parity
        assert s.mode == ("hedge" if spec.hedge else "eager")


@pytest.mark.parametrize("command, front", [("run", "jobs"), ("serve", "serving"), ("train", "training")])
def test_each_commands_scheme_choices_are_the_tables(command, front):
    """The command accepts every scheme of its front end, and refuses any other with the table's list."""
    from typer.testing import CliRunner

    from gencc.cli import app

    for other in (n for n in SCHEME_SPECS if n not in schemes(front)):
        r = CliRunner().invoke(app, [command, "--scheme", other], terminal_width=400)
        flat = " ".join(" ".join(ln.strip(" │╭╮╰╯─") for ln in r.output.splitlines()).split())
        assert r.exit_code == 2, r.output
        assert f"'--scheme': unknown scheme '{other}'; choose one of {', '.join(schemes(front))}" in flat, r.output
    for name in schemes(front):
        scheme_spec(name, front)  # the library's check, which the command reports


def test_the_sweep_takes_the_tables_sweep_schemes():
    from gencc.cli.experiments import _check_schemes

    _check_schemes(schemes("sweeps"), "--scheme")
    with pytest.raises(typer.BadParameter, match="unknown scheme 'sync'"):
        _check_schemes(("gcc", "sync"), "--scheme")


def test_code_options_go_to_the_coded_schemes_without_a_parity_model():
    check_code_options("gcc-hedge", {"lam_dec": 0.1}, "serving")
    check_code_options("parm", {"k": 3}, "sweeps")  # a sweep builds ParM with any k
    check_code_options("hedged", {}, "jobs")  # no options: nothing to refuse
    with pytest.raises(ValueError, match=r"coded schemes without a parity model \(bacc, gcc, sgcc\); hedged is a "):
        check_code_options("hedged", {"x": 1}, "jobs")
    with pytest.raises(ValueError, match="parm's code follows from its parity model"):
        check_code_options("parm", {"k": 3}, "jobs")
    assert option_code("gcc-hedge") == "gcc" and option_code("gcc") == "gcc"
    with pytest.raises(ValueError, match="neither a code nor a coded scheme"):
        option_code("hedged")


def test_every_commands_opt_is_typed_by_the_codes_declared_options():
    """--opt values take the type of the code's option: gcv stays a string, 0.01 a float, an int option an int,
    a choice its text; the one check refuses what the type refuses, naming --opt."""
    from gencc.cli.options import code_options

    got = code_options(["gcc.lam_dec=gcv", "gcc.lam_enc=0.01", "gcc.kernel=cubic"], ("gcc",), "jobs")
    assert got == {"gcc": {"lam_dec": "gcv", "lam_enc": 0.01, "kernel": "cubic"}}
    assert type(code_options(["gcc.lam_dec=1"], ("gcc",), "jobs")["gcc"]["lam_dec"]) is float
    assert code_options(["lcc.degree=2", "parm.k=3"], ("lcc", "parm", "gcc"), "sweeps") == {
        "lcc": {"degree": 2}, "parm": {"k": 3}}
    # serving: a scheme's options under its code's name or its own, merged
    assert code_options(["gcc.lam_dec=0.01", "gcc-hedge.gaps=fit"], ("gcc-hedge",), "serving") == {
        "gcc-hedge": {"lam_dec": 0.01, "gaps": "fit"}}
    assert code_options([], ("hedged",), "jobs") == {}
    for items, chosen, front, match in [
        (["lcc.degree=2.5"], ("lcc",), "sweeps", "lcc.degree takes an integer >= 1; got '2.5'"),
        (["gcc.lam_dec=aic"], ("gcc",), "jobs", "gcc.lam_dec takes a number >= 0, gcv or loo; got 'aic'"),
        (["gcc.kernel=1"], ("gcc",), "serving", "gcc.kernel takes one of auto"),
        (["gcc.lam_dec"], ("gcc",), "jobs", "code options look like scheme.key=value"),
        (["bacc.x=1"], ("gcc", "lcc"), "sweeps", r"--opt bacc\.\* sets options of bacc, which is not in --scheme "
                                                 "gcc,lcc; add bacc to --scheme"),
        (["parm.parity=f.pt"], ("parm",), "sweeps", "parity is a callable and has no text form"),
    ]:
        with pytest.raises(typer.BadParameter, match=match) as err:
            code_options(items, chosen, front)
        assert err.value.param_hint == "'--opt'"
