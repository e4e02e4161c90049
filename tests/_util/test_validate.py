"""One judgement per kind of parameter: the shared checks, and every public constructor that uses them.

Before the shared checks, integer parameters disagreed: GCC(10.0, 20) was accepted, ParM(10.0) refused, and
FixedCount(2.0) stored a float.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gencc
from gencc._util.validate import check_int, check_nonneg, check_positive, check_probability, check_real
from gencc.rkhs.kernels import Matern32, Sobolev
from gencc.rkhs.points import chebyshev1
from gencc.runtime import LocalExecutor, RayExecutor


@given(st.integers(-10**6, 10**6))
def test_check_int_accepts_python_and_numpy_integers(v):
    for x in (v, np.int64(v), np.int32(v) if abs(v) < 2**31 else v):
        out = check_int("v", x)
        assert out == v and type(out) is int


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_check_int_refuses_every_float(v):
    with pytest.raises(ValueError, match=r"^v must be an integer, got .* \(float\)"):
        check_int("v", v)


@pytest.mark.parametrize("v, fix", [
    (10.0, r"pass 10 \(an int\), not 10.0"),
    (np.float64(3.0), r"pass 3 \(an int\)"),
    (True, "not a bool"),
    (np.bool_(False), "not a bool"),
    ("7", r"int\(text\)"),
    (2.5, r"2.5 \(float\)$"),
    (None, r"None \(NoneType\)$"),
])
def test_check_int_names_the_parameter_and_the_fix(v, fix):
    with pytest.raises(ValueError, match=r"^K must be a positive integer, got .*" + fix):
        check_int("K", v, 1)


def test_check_int_ranges_and_optional():
    assert check_int("n", None, 0, optional=True) is None
    assert check_int("n", 0, 0) == 0 and check_int("n", 4, 1, 4) == 4
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 4\], got 5"):
        check_int("n", 5, 1, 4)
    with pytest.raises(ValueError, match=r"n must be a non-negative integer or None, got -1"):
        check_int("n", -1, 0, optional=True)
    with pytest.raises(ValueError, match=r"w must be an integer in \[2, N=9\] \(why\), got 1"):
        check_int("w", 1, 2, 9, what="an integer in [2, N=9]", hint="why")


@given(st.floats(min_value=1e-300, max_value=1e300) | st.integers(1, 10**9))
def test_check_positive_accepts_positive_reals(v):
    out = check_positive("x", v)
    assert out == float(v) and type(out) is float


@pytest.mark.parametrize("v", [0, -1.0, float("nan"), float("inf"), -float("inf"), True, "1", None, [1.0]])
def test_check_positive_refuses(v):
    with pytest.raises(ValueError, match=r"^x must be a positive finite number of seconds, got"):
        check_positive("x", v, unit="seconds")


def test_real_checks():
    assert check_nonneg("lam", 0) == 0.0 and check_nonneg("lam", None, optional=True) is None
    assert check_real("t", float("inf"), 0.0, lo_open=True, finite=False) == float("inf")
    with pytest.raises(ValueError, match="nan"):
        check_real("t", float("nan"), finite=False)
    assert check_probability("p", 1) == 1.0
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\), got 1"):
        check_probability("p", 1, below_one=True)
    with pytest.raises(ValueError, match=r"factor must be a finite number >= 1, got 0.5"):
        check_real("factor", 0.5, 1.0)


# ----- the public constructors: an integral float is refused the same way everywhere ------------------------
INTEGER_PARAMETERS = {
    "GCC K": (lambda v: gencc.GCC(v, 20), "K"),
    "GCC N": (lambda v: gencc.GCC(4, v), "N"),
    "BACC K": (lambda v: gencc.BACC(v, 20), "K"),
    "LCC degree": (lambda v: gencc.LCC(3, 9, degree=v), "degree"),
    "Replication N": (lambda v: gencc.Replication(2, v), "N"),
    "ParM K": (lambda v: gencc.ParM(v), "K"),
    "ParM k": (lambda v: gencc.ParM(10, k=v), r"k \(inputs per parity group\)"),
    "FixedCount S": (lambda v: gencc.FixedCount(v), "S"),
    "Collected wait_for": (lambda v: gencc.Collected(gencc.Pareto(), wait_for=v), "wait_for"),
    "Uncoded K": (lambda v: gencc.Uncoded(v), "K"),
    "Replicated N": (lambda v: gencc.Replicated(2, v), "N"),
    "Hedged N": (lambda v: gencc.Hedged(2, v), "N"),
    "chebyshev1 n": (lambda v: chebyshev1(v), "number of points"),
    "Sobolev m": (lambda v: Sobolev(v), "Sobolev order m"),
    "Matern null_degree": (lambda v: Matern32(0.3, null_degree=v), "null_degree"),
    "LocalExecutor processes": (lambda v: LocalExecutor(processes=v), "processes"),
    "RayExecutor num_actors": (lambda v: RayExecutor(num_actors=v), "num_actors"),
    "simulate trials": (lambda v: gencc.simulate(np.tanh, np.zeros((4, 1)), gencc.GCC(4, 8), gencc.FixedCount(1),
                                                 trials=v), "trials"),
    "run wait_for": (lambda v: gencc.run(np.tanh, np.zeros((4, 1)), gencc.GCC(4, 8), wait_for=v), "wait_for"),
    "stream max_in_flight": (lambda v: next(gencc.stream(np.tanh, [np.zeros((4, 1))], gencc.GCC(4, 8),
                                                         max_in_flight=v)), "max_in_flight"),
}


@pytest.mark.parametrize("make, name", INTEGER_PARAMETERS.values(), ids=INTEGER_PARAMETERS.keys())
def test_an_integral_float_is_refused_with_the_fix(make, name):
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got 2.0 \(float\); pass 2 \(an int\)"):
        make(2.0)


@pytest.mark.parametrize("make, name", INTEGER_PARAMETERS.values(), ids=INTEGER_PARAMETERS.keys())
def test_a_bool_is_refused(make, name):
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got True \(bool\)"):
        make(True)


def test_numpy_integers_are_stored_as_int():
    code = gencc.GCC(np.int64(4), np.int32(9))
    assert (code.K, code.N) == (4, 9) and type(code.K) is int and type(code.N) is int
    fc = gencc.FixedCount(np.int64(2))
    assert fc.S == 2 and type(fc.S) is int
    assert type(gencc.ParM(np.int16(6), k=np.int64(3)).k) is int
    assert type(gencc.Uncoded(np.int64(3)).K) is int
    assert gencc.Collected(gencc.Pareto(), wait_for=np.int64(3)).wait_for == 3


@pytest.mark.parametrize("make, match", [
    (lambda: gencc.Bernoulli("0.1"), r"straggling probability p must be a probability in \[0, 1\), got '0.1'"),
    (lambda: gencc.Bernoulli(1.0), r"in \[0, 1\), got 1.0"),
    (lambda: gencc.ShiftedExponential(rate=float("inf")), "rate must be a positive finite number"),
    (lambda: gencc.ShiftedExponential(shift=-1), "shift must be a non-negative finite number of seconds"),
    (lambda: gencc.Pareto(x_m=0), "x_m must be a positive finite number of seconds"),
    (lambda: gencc.Bimodal(p=1.5), r"p must be a probability in \[0, 1\]"),
    (lambda: gencc.Bimodal(factor=0.5), "factor must be a finite number >= 1"),
    (lambda: gencc.Bimodal(base="1"), "base must be a non-negative number of seconds or a LatencyModel"),
    (lambda: gencc.Collected(gencc.Pareto(), deadline=float("nan")), "deadline must be a positive finite number"),
    (lambda: gencc.Hedged(2, 4, hedge_delay=-1), "hedge_delay must be a non-negative finite number of seconds"),
    (lambda: gencc.GCC(4, 8, lam_enc="0"), "lam_enc must be a non-negative finite number"),
    (lambda: gencc.GCC(4, 8, lam_dec=float("inf")), "lam_dec must be a finite non-negative number, 'gcv' or 'loo'"),
    (lambda: gencc.GCC(4, 8, lam_dec="aic"), "lam_dec must be a finite non-negative number, 'gcv' or 'loo'"),
    (lambda: Matern32(length_scale=0), "length_scale must be a positive finite number"),
    (lambda: gencc.run(np.tanh, np.zeros((4, 1)), gencc.GCC(4, 8), deadline=True), "deadline must be a positive"),
])
def test_bad_numbers_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_numbers_are_stored_as_float():
    assert type(gencc.Bernoulli(np.float32(0.25)).p) is float
    assert type(gencc.ShiftedExponential(1, 2).rate) is float
    with pytest.raises(ValueError, match="timeout must be a positive finite number of seconds, got inf"):
        gencc.run(np.tanh, np.zeros((4, 1)), gencc.GCC(4, 8), timeout=float("inf"))
