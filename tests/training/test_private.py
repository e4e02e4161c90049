"""Private coded training: gcc / bacc placements with `code_options={"colluders": T, "mask_scale": s}` place
masked shards (no worker holds a partition, or any row of one, in the clear; the masks are what the code's
`mask_matrix` says), the leakage of that placement is finite and falls with the mask scale, and the model, one
this file's conftest defines, still learns. Options that do not apply are refused naming code_options."""

from __future__ import annotations

import numpy as np
import pytest

from gencc import metrics
from gencc.codes.registry import make_code
from gencc.errors import ConfigError
from gencc.training import TrainOptions, train
from gencc.training.schemes import make_plan


@pytest.mark.parametrize("scheme", ["gcc", "bacc"])
def test_a_private_placement_holds_masked_shards_only(problem, scheme: str) -> None:
    X, y, _, _ = problem
    opts = {"colluders": 1, "mask_scale": 4.0, "seed": 3}
    plan = make_plan(scheme, X, y, 10, N=8, S=1, K=3, code_options=opts)
    E, M = plan.code.encoding_matrix, plan.code.mask_matrix
    assert plan.code.private and M.shape == (8, 1) and np.all(np.abs(M[:, 0]) > 1e-9)
    raw = np.concatenate([p[0] for p in plan.parts])
    sd = plan.code.mask_sd(np.stack([p[0] for p in plan.parts]))  # the masks' sd: mask_scale x the data's rms
    dim = raw.shape[1]
    for n in range(8):
        (blk,) = plan.blocks[n]
        plain = sum(E[n, k] * plan.parts[k][0] for k in range(3))
        # what the worker holds beyond the data's own mix is its mask: M[n] times one N(0, sd^2) draw per row
        per_row = np.linalg.norm(blk.X - plain, axis=1) / (abs(M[n, 0]) * sd * np.sqrt(dim))
        assert 0.6 < np.median(per_row) < 1.4, (n, np.median(per_row))
        # so no row of a shard is a row of the data: the nearest one is at least half a mask away (a worker
        # near a data point has a small mask weight M[n]: what it learns is what leakage_bits measures)
        d = np.min(np.linalg.norm(blk.X[:, None, :] - raw[None, :, :], axis=2), axis=1)
        assert d.min() > 0.5 * abs(M[n, 0]) * sd * np.sqrt(dim), (n, d.min())
    # one mask draw behind all workers: the masks' parts of two workers are proportional, by M's ratio
    m0 = plan.blocks[0][0].X - sum(E[0, k] * plan.parts[k][0] for k in range(3))
    m1 = plan.blocks[1][0].X - sum(E[1, k] * plan.parts[k][0] for k in range(3))
    np.testing.assert_allclose(m1 * M[0, 0], m0 * M[1, 0], atol=1e-8 * np.abs(m0).max())


def test_leakage_of_the_placement_is_finite_and_falls_with_the_mask_scale() -> None:
    bits = [metrics.leakage_bits(make_code("gcc", 3, 8, colluders=1, mask_scale=s)) for s in (1.0, 4.0, 16.0)]
    assert np.all(np.isfinite(bits)) and bits[0] > bits[1] > bits[2] > 0, bits
    assert metrics.leakage_bits(make_code("gcc", 3, 8)) == np.inf  # no masks: a worker's view is the data's mix


def test_a_model_gencc_does_not_ship_learns_on_a_private_placement(problem, tiny) -> None:
    X, y, Xv, yv = problem
    res = train(tiny, (X, y), scheme="gcc", workers=8, stragglers=1, partitions=3, steps=30, batch_size=240,
                lr=0.5, seed=0, eval_data=(Xv, yv), eval_every=30, track_grad_error=True, delay_s=0.0,
                code_options={"colluders": 1, "mask_scale": 1.0, "seed": 0})
    assert res.plan.code.private and all(h["updated"] for h in res.history)
    assert res.history[-1]["loss_full"] < 0.8 * res.history[0]["loss_full"]  # it learns
    assert res.final_accuracy() > 0.5, res.final_accuracy()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"scheme": "sync", "code_options": {"colluders": 1}}, "apply to the coded placements gcc and bacc"),
    ({"scheme": "gcc", "code_options": {"nosuch": 1}}, "nosuch"),
    ({"scheme": "gcc", "code_options": {"colluders": -1}}, "colluders"),
    ({"scheme": "gcc", "code_options": [("colluders", 1)]}, "must be a dict"),
])
def test_options_that_do_not_apply_are_refused_naming_code_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        TrainOptions(workers=8, stragglers=1, **kwargs)
    assert e.value.field == "code_options"
