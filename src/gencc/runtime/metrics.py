"""The metrics of docs/design.md section 2, by these exact names. Inputs: numpy arrays or torch tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._util.arrays import to_numpy


def _pair(Yhat: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(to_numpy(Yhat), dtype=float)
    b = np.asarray(to_numpy(Y), dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"estimates and truth must have the same shape, got {a.shape} and {b.shape}")
    if a.ndim == 0 or a.shape[0] == 0:
        raise ValueError("need at least one input to score")
    return a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)


def mse(Yhat: Any, Y: Any) -> float:
    """(1 / (K m)) sum_k ||yhat_k - f(x_k)||^2: mean over inputs and output coordinates."""
    a, b = _pair(Yhat, Y)
    return float(np.mean((a - b) ** 2))


def rmse(Yhat: Any, Y: Any) -> float:
    """sqrt(mse)."""
    return float(np.sqrt(mse(Yhat, Y)))


def rel_mse(Yhat: Any, Y: Any) -> float:
    """sum_k ||yhat_k - f(x_k)||^2 / sum_k ||f(x_k)||^2: scale-free, the headline accuracy figure."""
    a, b = _pair(Yhat, Y)
    den = float(np.sum(b**2))
    if den == 0.0:
        raise ValueError("rel_mse is undefined when every true output is zero; use mse")
    return float(np.sum((a - b) ** 2) / den)


def agreement(Yhat: Any, Y: Any) -> float:
    """Fraction of inputs whose argmax estimate equals the argmax of the true output (classifiers)."""
    a, b = _pair(Yhat, Y)
    return float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1)))


def rel_acc(Yhat: Any, Y: Any, labels: Any) -> float:
    """RelAcc: accuracy of argmax yhat on `labels` divided by the accuracy of argmax f(x) on the same labels.

    NaN when f itself gets none of these inputs right (the ratio is undefined).
    """
    a, b = _pair(Yhat, Y)
    lab = np.asarray(to_numpy(labels)).ravel()
    if lab.size != a.shape[0]:
        raise ValueError(f"need one label per input: {lab.size} labels for {a.shape[0]} inputs")
    acc_f = np.mean(np.argmax(b, axis=1) == lab)
    if acc_f == 0:
        return float("nan")
    return float(np.mean(np.argmax(a, axis=1) == lab) / acc_f)


def all_metrics(Yhat: Any, Y: Any, labels: Any = None, classifier: bool = True) -> dict[str, float]:
    """Every metric that applies, as a dict keyed by the metric names."""
    out = {"mse": mse(Yhat, Y), "rmse": rmse(Yhat, Y), "rel_mse": rel_mse(Yhat, Y)}
    if classifier:
        out["agreement"] = agreement(Yhat, Y)
        out["rel_acc"] = rel_acc(Yhat, Y, labels) if labels is not None else float("nan")
    return out
