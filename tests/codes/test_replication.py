"""Replication at equal resources: first replica wins, missing inputs are zero rows."""

import numpy as np

from gencc import Replication


def test_assignment_and_encoding():
    code = Replication(4, 10)
    np.testing.assert_array_equal(code.assignment, np.arange(10) % 4)
    E = code.encoding_matrix
    assert E.shape == (10, 4)
    np.testing.assert_array_equal(E.sum(axis=1), 1.0)
    np.testing.assert_array_equal(E.sum(axis=0), [3, 3, 2, 2])
    X = np.random.default_rng(0).normal(size=(4, 2, 3))
    np.testing.assert_array_equal(code.encode(X), X[np.arange(10) % 4])


def test_all_returned_exact():
    code = Replication(4, 10)
    X = np.random.default_rng(1).normal(size=(4, 3))
    Xt = code.encode(X)
    np.testing.assert_allclose(code.decode(np.sin(Xt), np.arange(10)), np.sin(X))
    assert code.missing(np.arange(10)).size == 0


def test_missing_inputs_are_zero_rows():
    code = Replication(4, 10)
    X = np.random.default_rng(2).normal(size=(4, 3)) + 5.0
    Yall = code.encode(X)
    r = np.array([0, 4, 9, 5])  # inputs 0, 0, 1, 1: inputs 2 and 3 have no replica
    np.testing.assert_array_equal(code.missing(r), [2, 3])
    Yhat = code.decode(Yall[r], r)
    np.testing.assert_allclose(Yhat[:2], X[:2])
    np.testing.assert_array_equal(Yhat[2:], 0.0)
    assert code.can_decode([]) and code.min_results == 0
    empty = code.decode(np.zeros((0, 3)), [])
    assert empty.shape == (4, 3) and np.all(empty == 0)
    np.testing.assert_array_equal(code.missing([]), np.arange(4))


def test_one_replica_per_input_lowest_worker_wins_whatever_the_order():
    code = Replication(3, 9)  # input k on workers k, k+3, k+6
    r = np.array([7, 1, 4, 2])  # input 1 from workers 7, 1, 4; input 2 from 2
    Y = np.array([[70.0], [10.0], [40.0], [20.0]])  # replicas that disagree show which one was used
    D = code.decoding_matrix(r)
    assert D.shape == (3, 4)
    np.testing.assert_array_equal((D != 0).sum(axis=1), [0, 1, 1])
    Yhat = code.decode(Y, r)
    np.testing.assert_array_equal(Yhat[:, 0], [0.0, 10.0, 20.0])  # the set decides, not the listing order
    np.testing.assert_array_equal(code.decode(Y[::-1], r[::-1]), Yhat)


def test_nobody_returned_torch():
    torch = __import__("pytest").importorskip("torch")
    out = Replication(4, 10).decode(torch.zeros(0, 3, 2), torch.zeros(0, dtype=torch.int64))
    assert isinstance(out, torch.Tensor) and out.shape == (4, 3, 2) and not out.any()
