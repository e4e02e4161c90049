"""The result check of checked serving (`gencc.serving._policy.checked`): per coded slot of a systematic code,
how far an honest result strays from the linear reading of the systematic results it mixes, calibrated on
training inputs, and the robust decode's calibration for the members decoded without their own result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...codes import Code
from ...codes import robust as robust_mod
from ...codes.ordering import order_inputs
from .slots import systematic_slots


class ResultCheck:
    """Per coded slot n: residual ||y_n - sum_k W[n, k] y_k|| over the systematic results y_k, where W is the
    encoding matrix's row with entries below `tol` x the row's largest dropped (so a row is checkable when its
    few real members answered), and a calibrated threshold per slot. `robust`: the `robust.Calibration` of the
    decodes of members whose own result is missing (None: those decode plainly)."""

    def __init__(self, code: Code, thresholds: Any, tol: float = 0.05,
                 robust: robust_mod.Calibration | None = None):
        sys = systematic_slots(code)
        if sys is None:
            raise ValueError(f"a result check needs a systematic code (K of its workers compute the raw inputs), "
                             f"not {code!r}")
        self.sys = sys
        self.coded = [n for n in range(code.N) if n not in set(sys)]
        E = np.asarray(code.encoding_matrix, dtype=float)[self.coded]
        keep = np.abs(E) >= tol * np.abs(E).max(axis=1, keepdims=True)
        self.W = np.where(keep, E, 0.0)
        self.support = [np.flatnonzero(row) for row in keep]
        self.thresholds = np.asarray(thresholds, dtype=float)
        if self.thresholds.shape != (len(self.coded),) or not np.all(self.thresholds > 0):
            raise ValueError(f"thresholds must hold one positive number per coded slot ({len(self.coded)}), "
                             f"got {self.thresholds}")
        if robust is not None:
            robust_mod.check_threshold(code, robust, 1)
        self.robust = robust

    def residuals(self, results: dict[int, Any]) -> np.ndarray:
        """Per coded row, its residual (NaN where the coded result or a member of its support is missing)."""
        out = np.full(len(self.coded), np.nan)
        for c, n in enumerate(self.coded):
            if n not in results or any(self.sys[k] not in results for k in self.support[c]):
                continue
            y = np.asarray(results[n], dtype=float)
            reading = sum(self.W[c, k] * np.asarray(results[self.sys[k]], dtype=float) for k in self.support[c])
            out[c] = float(np.linalg.norm(y - reading))
        return out

    def failing(self, results: dict[int, Any]) -> list[int]:
        """Indices (into `coded`) of the checkable rows whose residual exceeds their threshold."""
        r = self.residuals(results)
        return [c for c in range(len(self.coded)) if r[c] > self.thresholds[c]]

    @classmethod
    def calibrate(cls, code: Code, f: Callable, X: Any, groups: int = 300, quantile: float = 0.999,
                  margin: float = 1.25, order: bool = True, tol: float = 0.05, seed: int = 0,
                  false_alarm: float | None = 0.01) -> ResultCheck:
        """Thresholds from `groups` random groups of K inputs of X (training inputs: never the served ones),
        ordered as `CodedDispatcher` orders them: `margin` x the `quantile` of each row's honest residuals. Each slot
        runs `code.worker_function(f, n)`, so a parity model's slots are calibrated on the parity model.

        The same groups, each with 1 to 3 results left out at random (a decode happens when a member's own result
        is missing), calibrate the robust decode (`robust.calibrate`, one adversary, `false_alarm` at confidence
        0.9): `robust`, None when `false_alarm` is None, the code has no leave-one-out locator, or the groups are
        fewer than that rate needs (`robust.runs_needed`)."""
        if not 0 < quantile <= 1 or not margin > 0:
            raise ValueError(f"quantile must lie in (0, 1] and margin be positive, got {quantile}, {margin}")
        if false_alarm is not None and not 0 < false_alarm < 1:
            raise ValueError(f"false_alarm must lie in (0, 1) or be None, got {false_alarm!r}")
        X = np.asarray(X, dtype=np.float32)
        if X.ndim < 2 or len(X) < code.K:
            raise ValueError(f"calibration needs at least K={code.K} inputs (one per row of X), got shape {X.shape}")
        rng = np.random.default_rng(seed)
        enc = []
        for _ in range(int(groups)):
            Xg = X[rng.choice(len(X), code.K, replace=False)]
            if order:
                Xg = Xg[order_inputs(Xg)]
            enc.append(code.encode(Xg))  # (N, *in), or a list with packed parity queries
        Y = {n: np.asarray(code.worker_function(f, n)(np.stack([np.asarray(e[n], dtype=np.float32) for e in enc])),
                           dtype=float) for n in range(code.N)}
        probe = cls(code, np.ones(code.N - code.K), tol)
        res = np.array([probe.residuals({n: Y[n][g] for n in Y}) for g in range(len(enc))])
        cal = None if false_alarm is None else _robust_calibration(code, Y, len(enc), false_alarm, rng)
        return cls(code, margin * np.quantile(res, quantile, axis=0), tol, robust=cal)


def _robust_calibration(code: Code, Y: dict[int, np.ndarray], groups: int, false_alarm: float,
                        rng: np.random.Generator) -> robust_mod.Calibration | None:
    """`ResultCheck.calibrate`'s robust decode calibration from the groups' results Y[n][g] (see there)."""
    if "loo" not in code.robust_methods or groups < robust_mod.runs_needed(false_alarm):
        return None
    spare = code.N - robust_mod.min_results(code, 1)
    if spare < 1:
        return None
    runs = []
    for g in range(groups):
        ret = np.sort(rng.choice(code.N, code.N - int(rng.integers(1, min(spare, 3) + 1)), replace=False))
        runs.append((np.stack([np.asarray(Y[int(n)][g], dtype=float).ravel() for n in ret]), ret))
    try:
        return robust_mod.calibrate(code, runs, adversaries=1, false_alarm=false_alarm)
    except (ValueError, NotImplementedError):  # a code whose locator is not the leave-one-out search
        return None


__all__ = ["ResultCheck"]
