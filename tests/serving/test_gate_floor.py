"""The gate's score floor: a calibrated threshold is never below the score at which the decoder's own error
estimate makes the top-1 likely right (gencc.serving._policy.gate_threshold.score_floor)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from gencc.serving._policy.gate_threshold import choose_threshold, score_floor


def test_score_floor_against_the_normal_quantile_and_a_monte_carlo():
    for t in (0.9, 0.95, 0.96, 0.99):
        assert score_floor(t) == pytest.approx(math.sqrt(2) * norm.ppf(t), rel=1e-9)
    # two logits whose decoded margin is z error sds, each decoded with an independent N(0, 1) error: the top-1
    # stays the top-1 with probability 0.96 exactly at the floor
    rng = np.random.default_rng(0)
    e = rng.normal(size=(200_000, 2))
    z = score_floor(0.96)
    assert np.mean(z - (e[:, 0] - e[:, 1]) > 0) == pytest.approx(0.96, abs=0.003)
    with pytest.raises(ValueError, match="target"):
        score_floor(1.0)


def test_choose_threshold_is_at_least_its_floor():
    rng = np.random.default_rng(1)
    records = [(i, float(rng.exponential(2.0)), 0) for i in range(300)]  # every decode right
    free = choose_threshold(records, lambda rid: 0, target=0.9, draws=0)
    assert free.threshold == 0.0 and free.floor == 0.0
    got = choose_threshold(records, lambda rid: 0, target=0.9, draws=5, floor=score_floor(0.9))
    assert got.threshold == pytest.approx(score_floor(0.9)) and got.floor == got.threshold
    assert all(d == 0.0 for d in got.draws)  # the draws are the records' own; the floor applies after
    high = choose_threshold([(i, z, 0 if z > 3 else 1) for i, z, _ in records], lambda rid: 0, target=0.9,
                            draws=0, floor=1.0)
    assert high.threshold > 1.0  # above the floor the records decide
    with pytest.raises(ValueError, match="floor"):
        choose_threshold(records, lambda rid: 0, floor=-1.0)
