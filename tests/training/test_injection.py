"""Straggler specs for training: counts, gencc.faults models, their combination and the command-line form."""

import numpy as np
import pytest

from gencc.faults import Bimodal, Faults, PersistentStragglers, ShiftedExponential
from gencc.training.injection import injection, parse_stragglers


def test_a_count_holds_back_that_many_workers_each_step():
    inj = injection(2, 6, delay_s=0.3)
    assert inj.expected == 2
    d = inj.delays(6, np.random.default_rng(0))
    assert sorted(d.tolist()) == [0, 0, 0, 0, 0.3, 0.3]


def test_models_combine_and_set_the_expected_stragglers():
    inj = injection([Bimodal(0.2, 5.0, 0.01), PersistentStragglers(8, 0.3, 4.0), Faults(raise_p=0.1)], 8)
    assert inj.latency is not None and inj.persistent is not None and inj.faults is not None
    assert inj.expected == 3  # ceil(0.3 * 8)
    assert injection(None, 4).expected == 0


def test_bad_specs_raise():
    with pytest.raises(ValueError, match="stragglers must be"):
        injection("two", 4)
    with pytest.raises(ValueError, match="\\[0, N - 1 = 3\\]"):
        injection(4, 4)
    with pytest.raises(ValueError, match="built for 2 workers"):
        injection(PersistentStragglers(2, 0.5, 2.0), 4)


def test_command_line_form():
    spec = parse_stragglers("1+bernoulli:p=0.1,factor=4,base=0.01+persistent:fraction=0.25,factor=3+"
                            "faults:raise_p=0.05+exp:shift=0.01,rate=100", 8, seed=1)
    assert spec[0] == 1 and isinstance(spec[1], Bimodal) and spec[1].p == 0.1
    assert isinstance(spec[2], PersistentStragglers) and spec[2].factor == 3.0
    assert isinstance(spec[3], Faults) and isinstance(spec[4], ShiftedExponential)
    with pytest.raises(ValueError, match="unknown part"):
        parse_stragglers("slow", 4)
    with pytest.raises(ValueError, match="options are p, factor, base"):
        parse_stragglers("bernoulli:q=1", 4)
    with pytest.raises(ValueError, match="must be a number"):
        parse_stragglers("bernoulli:p=x", 4)
