"""Metrics of docs/design.md section 2 against hand computations."""

import numpy as np
import pytest

from gencc import metrics

Y = np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]])
YHAT = np.array([[1.5, 2.0, 0.0], [0.0, 1.0, 2.0]])
# squared errors: row 0: 0.25; row 1: 4 + 1 = 5 -> total 5.25 over K m = 6 entries
# truth energy: 1 + 4 + 1 + 9 = 15


def test_mse_rmse_rel_mse_by_hand():
    assert metrics.mse(YHAT, Y) == pytest.approx(5.25 / 6)
    assert metrics.rmse(YHAT, Y) == pytest.approx(np.sqrt(5.25 / 6))
    assert metrics.rel_mse(YHAT, Y) == pytest.approx(5.25 / 15)


def test_metrics_on_multi_dim_outputs_flatten_per_input():
    a = np.arange(24.0).reshape(2, 3, 4)
    b = a + 1.0
    assert metrics.mse(a, b) == pytest.approx(1.0)
    assert metrics.rel_mse(b, b) == 0.0


def test_agreement_by_hand():
    # argmax truth: 1, 2; argmax estimate: 1, 2 -> 1.0; change row 1 -> 0.5
    assert metrics.agreement(YHAT, Y) == 1.0
    yh = YHAT.copy()
    yh[1] = [5.0, 0.0, 0.0]
    assert metrics.agreement(yh, Y) == 0.5


def test_rel_acc_by_hand():
    Yt = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=float)  # argmax 0,1,2,0
    labels = np.array([0, 1, 1, 0])  # f correct on 0,1,3 -> 3/4
    Yh = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=float)  # argmax 0,0,1,0 -> 3/4 correct
    assert metrics.rel_acc(Yh, Yt, labels) == pytest.approx(0.75 / 0.75)
    Yh2 = np.array([[0, 1, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=float)  # 2/4 correct
    assert metrics.rel_acc(Yh2, Yt, labels) == pytest.approx(0.5 / 0.75)


def test_rel_acc_nan_when_f_never_right():
    Yt = np.eye(2)
    assert np.isnan(metrics.rel_acc(Yt, Yt, np.array([1, 0])))


def test_all_metrics_keys():
    out = metrics.all_metrics(YHAT, Y, labels=np.array([1, 2]))
    assert set(out) == {"mse", "rmse", "rel_mse", "agreement", "rel_acc"}
    assert set(metrics.all_metrics(YHAT, Y, classifier=False)) == {"mse", "rmse", "rel_mse"}


def test_torch_inputs():
    torch = pytest.importorskip("torch")
    assert metrics.mse(torch.tensor(YHAT), torch.tensor(Y)) == pytest.approx(5.25 / 6)


@pytest.mark.parametrize("fn", [metrics.mse, metrics.rmse, metrics.rel_mse, metrics.agreement])
def test_shape_mismatch_raises(fn):
    with pytest.raises(ValueError, match="same shape"):
        fn(np.zeros((2, 3)), np.zeros((3, 2)))


def test_rel_mse_zero_truth_raises():
    with pytest.raises(ValueError, match="every true output is zero"):
        metrics.rel_mse(np.ones((2, 2)), np.zeros((2, 2)))


def test_rel_acc_label_count_mismatch_raises():
    with pytest.raises(ValueError, match="one label per input"):
        metrics.rel_acc(YHAT, Y, np.array([0, 1, 2]))
