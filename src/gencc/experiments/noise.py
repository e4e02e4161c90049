"""Noisy results (LeTCC's second regime): every worker returns f(x) plus Gaussian noise of a relative level.

The level is relative to each worker's own clean result: worker n returns y_n + level * rms(y_n) * z_n, z_n
standard normal of y_n's shape (`gencc.adversaries.relative_noise`, the per-result model of the fault injection
of jobs and serving, applied here to every worker, not to a few). So one level means the same signal-to-noise
ratio for any f and any output scale, and level 0 is the noiseless setting. `noisy_trials` is `simulate` for
this setting: fresh noise and a fresh straggler set every trial, scored against the clean f(X).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..codes.base import Code
from ..codes.ordering import order_inputs
from ..faults.adversaries import relative_noise
from ..faults.stragglers import Bernoulli, FixedCount
from ..model import apply_batch, resolve
from ..runtime import metrics as M
from ..runtime.simulate import apply_workers


def noisy_results(Y: np.ndarray, level: float, rng: np.random.Generator) -> np.ndarray:
    """Every row (one worker's result) of Y plus Gaussian noise of `level` times that row's root mean square;
    one `relative_noise` draw per row, in row order."""
    Y = np.asarray(Y, dtype=float)
    return np.stack([relative_noise(y, level, rng) for y in Y]) if len(Y) else Y.copy()


def noisy_trials(f: Callable, X: Any, code: Code, stragglers: FixedCount | Bernoulli, level: float,
                 trials: int = 20, seed: int = 0, labels: Any = None, classifier: bool | None = None) -> list[dict]:
    """`trials` draws of noisy results and a random straggler set (one rng seeded by `seed` draws the noise,
    then the stragglers, each trial); one record per trial with K, N, level, trial, n_returned, decodable and
    every metric against the clean f(X). Inputs are ordered by `order_inputs` as in `simulate`. The worst-case
    search is not supported (its pattern would depend on the noise draw)."""
    if isinstance(stragglers, FixedCount) and stragglers.searched:
        raise ValueError("noisy_trials draws random stragglers; the worst-case search is not supported")
    if not (np.isfinite(level) and level >= 0):
        raise ValueError(f"the noise level must be a finite number >= 0, got {level!r}")
    stragglers.check(code.N)
    f = resolve(f)
    X = np.asarray(X)
    if X.ndim == 0 or X.shape[0] != code.K:
        raise ValueError(f"X must have first dimension K={code.K}, got shape {X.shape}")
    perm = order_inputs(X)
    Y_all = apply_workers(f, code.encode(X[perm]), code)
    Y_true = apply_batch(f, X, None)
    if classifier is None:
        classifier = Y_true.ndim == 2 and Y_true.shape[1] > 1
    rng = np.random.default_rng(seed)
    out = []
    for trial in range(trials):
        Yn = noisy_results(Y_all, level, rng)
        returned = stragglers.draw(code.N, rng)
        rec = {"scheme": code.name, "K": code.K, "N": code.N, "level": float(level), "trial": trial,
               "n_returned": int(returned.size), "decodable": bool(code.can_decode(returned))}
        if rec["decodable"]:
            Yhat = np.empty_like(Y_true, dtype=float)
            Yhat[perm] = code.decode(Yn[returned], returned)
            rec.update(M.all_metrics(Yhat, Y_true, labels, classifier))
        out.append(rec)
    return out
