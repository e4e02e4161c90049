"""Gradient codes: any N - s workers recover the all-ones combination exactly; the FRC group decode."""

from itertools import combinations

import numpy as np
import pytest

from gencc.training.gradcodes import cyclic_matrix, frc_group_weights, frc_matrix, gc_matrix, gc_weights


@pytest.mark.parametrize("kind,N,s", [("cyclic", 7, 2), ("cyclic", 6, 1), ("frc", 6, 2), ("frc", 8, 1),
                                      ("cyclic", 5, 0)])
def test_any_n_minus_s_workers_decode_exactly(kind, N, s):
    B = gc_matrix(kind, N, s, seed=3)
    assert B.shape == (N, N)
    assert np.all((B != 0).sum(axis=1) == s + 1)  # each worker holds s + 1 partitions
    for F in combinations(range(N), N - s):
        a = gc_weights(B, list(F))
        np.testing.assert_allclose(a @ B[list(F)], np.ones(N), atol=1e-10)


def test_cyclic_support_and_frc_groups():
    B = cyclic_matrix(6, 2)
    assert [sorted(np.flatnonzero(r).tolist()) for r in B][4] == [0, 4, 5]
    F = frc_matrix(6, 1)
    assert np.array_equal(F[0], F[1]) and np.flatnonzero(F[2]).tolist() == [2, 3]


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="s \\+ 1 to divide N"):
        frc_matrix(7, 1)
    with pytest.raises(ValueError, match="s < N"):
        cyclic_matrix(3, 3)
    with pytest.raises(ValueError, match="unknown gradient code"):
        gc_matrix("mds", 4, 1)
    with pytest.raises(ValueError, match="at least one returned"):
        gc_weights(frc_matrix(4, 1), [])


def test_frc_group_weights_use_one_message_per_group_and_rescale():
    B = frc_matrix(6, 1)  # groups {0, 1}, {2, 3}, {4, 5}
    w = frc_group_weights(B, [1, 0, 3])  # group 3 missing: two groups present of three
    np.testing.assert_allclose(w, [1.5, 0.0, 1.5])
    g = np.arange(6.0)[:, None] + 1  # partition gradients 1..6
    msgs = B @ g
    np.testing.assert_allclose(frc_group_weights(B, [0, 2, 5]) @ msgs[[0, 2, 5]], g.sum(0))
