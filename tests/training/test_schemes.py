"""Placement: partitions aligned row by row, coded shards are the encode of the partitions, shard sizes."""

import numpy as np
import pytest

from gencc.training.options import default_partitions
from gencc.training.schemes import make_plan, partitions


def test_partitions_are_equal_disjoint_and_sorted_by_label(problem):
    X, y, _, _ = problem
    for how in ("stratified", "by-label"):
        idx = partitions(X, y, 7, how)
        assert {len(i) for i in idx} == {480 // 7}
        flat = np.concatenate(idx)
        assert np.unique(flat).size == flat.size
    strat = partitions(X, y, 4, "stratified")
    assert all(np.all(np.diff(y[i]) >= 0) for i in strat)  # each partition sorted by label: rows aligned
    assert all(np.bincount(y[i], minlength=10).min() >= 9 for i in strat)
    by = partitions(X, y, 4, "by-label")
    assert y[by[0]].max() <= y[by[3]].min()  # non-iid: label ranges
    with pytest.raises(ValueError, match="unknown placement"):
        partitions(X, y, 2, "random")
    with pytest.raises(ValueError, match="cannot fill K=500"):
        partitions(X, y, 500)


@pytest.mark.parametrize("scheme", ["gcc", "bacc"])
def test_coded_shards_are_the_encode_of_the_partitions(problem, scheme):
    X, y, _, _ = problem
    plan = make_plan(scheme, X, y, 10, N=6, S=1, K=3)
    E = plan.code.encoding_matrix
    for n in range(6):
        (blk,) = plan.blocks[n]
        np.testing.assert_allclose(blk.X, sum(E[n, k] * plan.parts[k][0] for k in range(3)), atol=1e-12)
        np.testing.assert_allclose(blk.T, sum(E[n, k] * plan.parts[k][1] for k in range(3)), atol=1e-12)
    assert plan.wait_for == 5 and plan.m == 160


def test_gc_and_agc_hold_s_plus_1_and_r_shards(problem):
    X, y, _, _ = problem
    gc = make_plan("gc", X, y, 10, N=6, S=2)
    assert [len(b) for b in gc.blocks] == [3] * 6 and gc.wait_for == 4
    agc = make_plan("agc", X, y, 10, N=6, S=2, replication=3)
    assert [len(b) for b in agc.blocks] == [3] * 6 and agc.wait_for == 4
    assert make_plan("sync", X, y, 10, N=6, S=2).wait_for == 6
    assert default_partitions("gcc", 8, 1) == 4 and default_partitions("gc", 8, 1) == 8
