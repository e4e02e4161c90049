"""simulate: coded computing in-process, with straggler sets drawn by a model, scored by every metric.

No processes, no clocks: the results of all N workers are computed once, and each trial decodes from the
subset a straggler model keeps. This is the reference the runtime is checked against.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .._util.arrays import take_rows, to_numpy
from .._util.validate import check_int
from ..codes.base import Code
from ..codes.ordering import order_inputs
from ..faults.adversaries import Adversary
from ..faults.stragglers import Bernoulli, Collected, FixedCount, worst_case_returned
from ..model import apply_batch, resolve
from . import metrics as M


def apply_workers(f: Callable, Xt: Any, code: Code, batched: bool | None = None) -> np.ndarray:
    """Every worker's result on the coded inputs Xt (N, *in_shape; a list for packed parity queries): worker n applies
    `code.worker_function(f, n)` to Xt[n]; workers that share a callable are applied together."""
    if code.uniform_workers:
        return apply_batch(f, Xt, batched)
    fns = [code.worker_function(f, n) for n in range(code.N)]
    groups: dict[int, list[int]] = {}
    for n, fn in enumerate(fns):
        groups.setdefault(id(fn), []).append(n)
    parts = {key: apply_batch(fns[rows[0]], take_rows(Xt, rows), batched) for key, rows in groups.items()}
    shapes = {p.shape[1:] for p in parts.values()}
    if len(shapes) != 1:
        raise ValueError(f"{code.name}: the workers' functions return different output shapes {sorted(shapes)}")
    out = np.empty((code.N, *shapes.pop()))
    for key, rows in groups.items():
        out[rows] = parts[key]
    return out


def _not_a_classifier() -> None:
    raise ValueError("the worst-agreement pattern searches for the least top-1 agreement with argmax f: it needs a "
                     "classifier's outputs (K x classes scores); use worst for other models")


def simulate(
    f: Callable,
    X: Any,
    code: Code,
    stragglers: FixedCount | Bernoulli | Collected,
    trials: int = 20,
    seed: int = 0,
    *,
    labels: Any = None,
    order: bool | str = True,
    classifier: bool | None = None,
    batched: bool | None = None,
    metric: str = "rel_mse",
    adversaries: Adversary | None = None,
    robust_method: str = "loo",
) -> list[dict]:
    """Run `trials` straggler draws and return one tidy record per trial. f: anything `gencc.as_model` takes
    (a torch module, an import path, a model file) or a callable (batched when marked `f.batched = True`).

    Each record holds scheme, K, N, S, p, pattern, trial, seed, n_returned, decodable, missing (inputs with
    no estimate), every metric of docs/design.md section 2, and encode/decode times in seconds. `order` applies
    `order_inputs` (True, or a method name) and restores the caller's order before scoring. The worst
    pattern is deterministic: it runs once, maximising `metric`, and records `exact` (False: a lower bound).
    The worst-agreement pattern (classifiers) runs once too, minimising the top-1 agreement with argmax f, ties
    going to the larger `metric`: the straggler set that flips the most labels.

    `adversaries` (a model of gencc.adversaries) corrupts some returned results each trial; the estimate
    is then `code.robust_decode(..., adversaries=model.bound, method=robust_method)` and the record adds
    adversary, A, flagged (worker indices, space-separated), recall (of the corrupted workers; NaN when
    none), false_alarms (honest workers flagged), missed, and rel_mse_excluded (the decode with the
    corrupted workers treated as stragglers: the best possible).
    """
    f = resolve(f)  # a torch module, an import path or a model file: as_model's Model
    trials = check_int("trials", trials, 1)
    seed = check_int("seed", seed, 0)
    X_np = np.asarray(to_numpy(X))
    if X_np.ndim == 0 or X_np.shape[0] != code.K:
        raise ValueError(f"X must have first dimension K={code.K}, got shape {X_np.shape}")
    stragglers.check(code.N)
    if metric not in ("rel_mse", "mse", "rmse"):
        raise ValueError(f"metric must be rel_mse, mse or rmse, got {metric!r}")
    searched = isinstance(stragglers, FixedCount) and stragglers.searched
    agreement_search = searched and stragglers.pattern == "worst-agreement"
    if agreement_search and classifier is False:
        _not_a_classifier()
    if adversaries is not None and searched:
        raise ValueError("adversaries combine with random, block, Bernoulli or Collected stragglers, not "
                         "the worst-case search")
    perm = np.arange(code.K)
    if order:
        perm = order_inputs(X_np, "chain" if order is True else order)
    Xp = X_np[perm]
    t0 = time.perf_counter()
    Xt = code.encode(Xp)
    t_enc = time.perf_counter() - t0
    Y_true = apply_batch(f, X_np, batched)  # before the N workers' calls: it tells whether f is a classifier
    if classifier is None:
        classifier = Y_true.ndim == 2 and Y_true.shape[1] > 1
    if agreement_search and not classifier:
        _not_a_classifier()
    Y_all = apply_workers(f, Xt, code, batched)
    base = {"scheme": code.name, "K": code.K, "N": code.N, **stragglers.describe(), "seed": seed}
    rng = np.random.default_rng(seed)

    def estimate(returned: np.ndarray) -> tuple[np.ndarray, float]:
        t = time.perf_counter()
        Yp = code.decode(Y_all[returned], returned)
        dt = time.perf_counter() - t
        out = np.empty_like(Yp)
        out[perm] = Yp
        return out, dt

    def score(returned: np.ndarray) -> float:
        return getattr(M, metric)(estimate(returned)[0], Y_true)

    def disagreement(returned: np.ndarray) -> float:
        """1 - agreement, plus the loss squashed below 1 / (1000 K): it orders sets of equal agreement only."""
        Yhat = estimate(returned)[0]
        loss = getattr(M, metric)(Yhat, Y_true)
        tie = loss / (1.0 + loss) if np.isfinite(loss) else 1.0
        return 1.0 - M.agreement(Yhat, Y_true) + tie / (1000.0 * code.K)

    if adversaries is not None:
        base.update(adversaries.describe())
        return [_adversarial_trial(code, Y_all, Y_true, stragglers, adversaries, robust_method, perm, rng,
                                   {**base, "trial": trial, "encode_time": t_enc}, labels, classifier)
                for trial in range(trials)]
    records = []
    for trial in range(1 if searched else trials):
        extra: dict = {}
        if searched:
            wc = worst_case_returned(score if stragglers.pattern == "worst" else disagreement, code.N, stragglers.S)
            returned = wc.returned
            extra = {"exact": wc.exact}
        else:
            returned = stragglers.draw(code.N, rng)
        rec = {**base, "trial": trial, "n_returned": int(returned.size), **extra, "encode_time": t_enc}
        if not code.can_decode(returned):
            rec.update(decodable=False, missing=code.K, decode_time=float("nan"),
                       mse=float("nan"), rmse=float("nan"), rel_mse=float("nan"))
            if classifier:
                rec.update(agreement=float("nan"), rel_acc=float("nan"))
        else:
            Yhat, dt = estimate(returned)
            missing = int(code.missing(returned).size)
            rec.update(decodable=True, missing=missing, decode_time=dt,
                       **M.all_metrics(Yhat, Y_true, labels, classifier))
        records.append(rec)
    return records


def _adversarial_trial(code: Code, Y_all: np.ndarray, Y_true: np.ndarray, stragglers, model: Adversary,
                       method: str, perm: np.ndarray, rng: np.random.Generator, rec: dict, labels: Any,
                       classifier: bool) -> dict:
    """One trial with wrong results: draw stragglers, corrupt, robust-decode, score (see `simulate`)."""
    returned = stragglers.draw(code.N, rng)
    rec["n_returned"] = int(returned.size)
    nan = float("nan")
    try:
        Yc, bad = model.corrupt(Y_all[returned], returned, rng, code)
        t = time.perf_counter()
        Yp, flagged = code.robust_decode(Yc, returned, adversaries=model.bound, method=method)
        dt = time.perf_counter() - t
    except ValueError as err:  # too few results for this many adversaries: not decodable
        rec.update(decodable=False, missing=code.K, decode_time=nan, mse=nan, rmse=nan, rel_mse=nan,
                   error=str(err))
        return rec
    keep = ~np.isin(returned, bad)
    Yx = code.decode(Y_all[returned[keep]], returned[keep]) if code.can_decode(returned[keep]) else None
    out = np.empty_like(Yp)
    out[perm] = Yp
    rec.update(decodable=True, missing=int(code.missing(np.setdiff1d(returned, flagged)).size), decode_time=dt,
               **M.all_metrics(out, Y_true, labels, classifier))
    if Yx is not None:
        ox = np.empty_like(Yx)
        ox[perm] = Yx
        rec["rel_mse_excluded"] = M.rel_mse(ox, Y_true)
    else:
        rec["rel_mse_excluded"] = nan
    caught = np.isin(bad, flagged)
    rec.update(flagged=" ".join(str(int(i)) for i in flagged), corrupted=" ".join(str(int(i)) for i in bad),
               recall=float(caught.mean()) if bad.size else nan, missed=int(bad.size - caught.sum()),
               false_alarms=int(np.setdiff1d(flagged, bad).size))
    return rec


def summarize(records: list[dict], keys: tuple[str, ...] = ("scheme", "K", "N", "S", "p", "pattern")) -> list[dict]:
    """Mean of every numeric metric per group of `keys`, with the count of trials and decodable fraction.

    Each mean over two or more decodable trials comes with `<metric>_ci`, the half-width of its 95%
    confidence interval (normal approximation, 1.96 standard errors): the Monte-Carlo error of the loss.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for key, rs in groups.items():
        row = dict(zip(keys, key, strict=True))
        row["trials"] = len(rs)
        row["decodable"] = float(np.mean([r["decodable"] for r in rs]))
        for m in ("mse", "rmse", "rel_mse", "agreement", "rel_acc", "missing", "decode_time",
                  "rel_mse_excluded", "recall", "false_alarms", "missed"):
            vals = np.array([r[m] for r in rs if m in r and r["decodable"]], dtype=float)
            vals = vals[~np.isnan(vals)]
            if vals.size:
                row[m] = float(vals.mean())
                if vals.size > 1:
                    row[f"{m}_ci"] = float(1.96 * vals.std(ddof=1) / np.sqrt(vals.size))
        fa = [r["false_alarms"] for r in rs if r.get("decodable") and "false_alarms" in r]
        if fa:
            row["false_alarm_rate"] = float(np.mean(np.asarray(fa) > 0))
        out.append(row)
    return out
