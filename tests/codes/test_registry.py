"""The code registry: one list of codes and their options, in step with the classes it names."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import gencc
from gencc.codes import CODES, Code, make_code, parse_option
from gencc.codes.registry import REQUIRED

#: constructor keywords deliberately left out of the registry (explicit point arrays have no text form)
ARRAY_ONLY = {("bacc", "alpha"), ("bacc", "beta")}


def test_every_code_class_is_registered_under_its_own_name():
    classes = {obj for obj in vars(gencc).values()
               if inspect.isclass(obj) and issubclass(obj, Code) and obj is not Code}
    assert {spec.cls for spec in CODES.values()} == classes
    for name, spec in CODES.items():
        assert spec.cls.name == name


@pytest.mark.parametrize("name", list(CODES))
def test_registered_options_match_the_constructor(name):
    spec = CODES[name]
    sig = inspect.signature(spec.cls.__init__).parameters
    keywords = {k for k in sig if k not in ("self", "K", "N")}
    assert {p.name for p in spec.params} == {k for k in keywords if (name, k) not in ARRAY_ONLY}
    for p in spec.params:
        if p.default is not REQUIRED:
            assert sig[p.name].default == p.default, p.name


@pytest.mark.parametrize("name, K, N, opts, direct", [
    ("gcc", 6, 20, {}, lambda: gencc.GCC(6, 20)),
    ("gcc", 6, 20, {"kernel": "cubic", "lam_dec": "gcv", "beta": "chebyshev2"},
     lambda: gencc.GCC(6, 20, kernel="cubic", lam_dec="gcv", beta="chebyshev2")),
    ("bacc", 6, 20, {}, lambda: gencc.BACC(6, 20)),
    ("lcc", 4, 12, {"degree": 2}, lambda: gencc.LCC(4, 12, degree=2)),
    ("replication", 4, 10, {}, lambda: gencc.Replication(4, 10)),
    ("parm", 6, 8, {"k": 3}, lambda: gencc.ParM(6, k=3)),
    ("parm", 5, None, {}, lambda: gencc.ParM(5)),
])
def test_make_code_is_the_constructor(name, K, N, opts, direct):
    code, ref = make_code(name, K, N, **opts), direct()
    assert type(code) is type(ref) and repr(code) == repr(ref)
    np.testing.assert_array_equal(code.encoding_matrix, ref.encoding_matrix)


@pytest.mark.parametrize("call, match", [
    (lambda: make_code("mds", 4, 8), "unknown code 'mds'; choose one of gcc, bacc, lcc, replication, parm"),
    (lambda: make_code("gcc", 4, 8, nokey=1), "gcc has no option 'nokey'; its options: kernel, length_scale, "
                                               "lam_enc, lam_dec, alpha, beta"),
    (lambda: make_code("gcc", 4, 8, length_scale=0), "gcc option length_scale must be a positive number or 'auto'"),
    (lambda: make_code("bacc", 4, 8, lam=1), "bacc has no option 'lam'; its options: colluders, mask_scale, seed"),
    (lambda: make_code("gcc", 4, 8, lam_enc="x"), "gcc option lam_enc must be a non-negative finite number"),
    (lambda: make_code("gcc", 4, 8, kernel="rbf"), "gcc option kernel must be one of auto, cubic, sobolev1"),
    (lambda: make_code("lcc", 4, 8), r"lcc needs option\(s\) degree: degree \(int, required\)"),
    (lambda: make_code("lcc", 4, 8, degree=1.0), r"lcc option degree must be a positive integer, got 1.0"),
    (lambda: make_code("parm", 4, 8, parity=3), "parm option parity must be a callable or None, got int"),
    (lambda: make_code("parm", 4, 5), "parm with K=4 and these options runs on N=6 workers, got N=5"),
    (lambda: make_code("gcc", 4), "gcc needs N"),
])
def test_make_code_refuses_with_the_valid_choices(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_parse_option_by_type():
    assert parse_option("gcc", "lam_dec", "gcv") == "gcv"
    assert parse_option("gcc", "lam_dec", "0.5") == 0.5 and parse_option("gcc", "lam_enc", "0") == 0.0
    assert parse_option("lcc", "degree", "2") == 2 and parse_option("gcc", "kernel", "cubic") == "cubic"
    with pytest.raises(ValueError, match="^lcc.degree takes an integer >= 1; got 'two'$"):
        parse_option("lcc", "degree", "two")
    with pytest.raises(ValueError, match="^gcc.lam_dec takes a number >= 0, gcv or loo; got 'aic'$"):
        parse_option("gcc", "lam_dec", "aic")
    # text of the right kind but out of range gets the same words (never Python's "convert it first")
    for code, key, text, words in [("gcc", "lam_dec", "-1", "a number >= 0, gcv or loo"), ("lcc", "degree", "0",
                                   "an integer >= 1"), ("gcc", "length_scale", "0", "a number > 0 or auto"),
                                   ("gcc", "lam_enc", "nan", "a number >= 0"), ("sgcc", "rho", "x", "a number >= 0"),
                                   ("gcc", "kernel", "rbf", "one of auto, cubic, sobolev1")]:
        with pytest.raises(ValueError, match=f"^{code}.{key} takes {words}.*; got '{text}'$") as err:
            parse_option(code, key, text)
        assert "convert" not in str(err.value)


def test_a_string_from_python_is_pointed_to_parse_option():
    """make_code with an option's text ("abc", "0.1") names the values it takes and the reader of text forms."""
    for text in ("abc", "0.1"):
        with pytest.raises(ValueError, match=r"gcc option lam_dec must be a finite non-negative number, 'gcv' or "
                                             rf"'loo', got '{text}' \(str\); pass the value itself, or read a command "
                                             r"line's text with parse_option\('gcc', 'lam_dec', text\)") as err:
            make_code("gcc", 4, 8, lam_dec=text)
        assert "float(text)" not in str(err.value)
    with pytest.raises(ValueError, match="parity is a callable .* gencc.workloads.load_parity"):
        parse_option("parm", "parity", "model.pt")


def test_cli_info_lists_every_code_and_option():
    from typer.testing import CliRunner

    from gencc.cli import app

    res = CliRunner().invoke(app, ["info"])
    assert res.exit_code == 0, res.output
    assert f"codes: {', '.join(CODES)}" in res.output
    for spec in CODES.values():
        for p in spec.params:
            assert p.describe() in res.output
