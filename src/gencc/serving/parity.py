"""Trained parity models in serving: which one a scheme needs, and SystematicGCC's prior calibrated for it.

`sgcc-parity` serves with `SystematicGCC(K, N, parity=F_P)`: its N - K coded workers run ParM's trained parity model
on the mean of each group of ceil(K / (N - K)) members (K = 8, N = 12: pairs, ParM k = 2's model, no extra
training), and its kriging decoder uses a length scale and rho fitted on *training* inputs
(`SystematicGCC.calibrated`), never on served ones. Members stay in arrival order: the parity model was trained on
random tuples, and pairing similar inputs (`order_inputs`) measured no better (300 s simulated, W = 12, 30% / 50%
load: agreement 0.978 / 0.965 ordered, 0.979 / 0.977 in arrival order). The calibration costs about a second of
model calls, so it is kept per (workload, K, N, parity model) for the life of the process.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any, NamedTuple

import numpy as np

from ..codes import SystematicGCC
from ..codes.ordering import order_inputs
from ..codes.schemes import SCHEME_SPECS, schemes
from ..errors import ConfigError
from ..model import Model, as_model, load_inputs
from ..rkhs.kernels import Matern32

#: the schemes that run a parity model (each also as a coded hedge, "<scheme>-hedge"), from the one scheme table
PARITY_SCHEMES = tuple(n for n in schemes("serving") if SCHEME_SPECS[n].parity and not SCHEME_SPECS[n].hedge)
#: largest parity group a scheme may ask for (parity models for k = 2..4 are what ParM's paper uses)
MAX_PARITY_K = 4
#: training input sets (K inputs each) the calibration fits the prior on
CALIBRATION_SETS = 200

_cache: dict[tuple, dict[str, float]] = {}
_lock = threading.Lock()


def coded_workers(K: int, W: int) -> int:
    """N of the GCC / BACC / SGCC schemes on W workers: redundancy 1.5 (ParM k = 2's), at most W."""
    return min(W, K + math.ceil(K / 2))


def check_coded_workers(scheme: str, K: int, W: int) -> int:
    """N = `coded_workers(K, W)` of the GCC / BACC / SGCC schemes (`scheme`, a -hedge form too), which must exceed
    K; else a `ConfigError` naming "workers" (`gencc.serving.config.check_workers` holds every scheme's rule)."""
    N = coded_workers(K, W)
    if N <= K:
        raise ConfigError(f"{scheme.removesuffix('-hedge')} needs more workers than K={K} (got workers={W}); lower K",
                          "workers")
    return N


def parity_k(scheme: str, K: int, W: int, parm_k: int = 2) -> int | None:
    """Inputs per parity query of the parity model `scheme` runs (None: it runs none). ParM: parm_k;
    sgcc-parity: its largest group of members, ceil(K / (N - K)) (the parity model is trained for that)."""
    base = scheme.removesuffix("-hedge")
    if base not in PARITY_SCHEMES:
        return None
    if base == "parm":
        return int(parm_k)
    N = check_coded_workers(scheme, K, W)
    k = math.ceil(K / (N - K))
    if k > MAX_PARITY_K:
        raise ValueError(f"{base} on {W} workers with K={K} has groups of {k} members per coded worker; parity "
                         f"models exist for 2..{MAX_PARITY_K}: use more workers (N - K >= K / {MAX_PARITY_K}) "
                         "or a smaller --K")
    return max(k, 2)


def calibrate_sgcc(workload: Any, K: int, N: int, parity: Any, n_sets: int = CALIBRATION_SETS, seed: int = 0,
                   ordered: bool = False, *, data: Any = None) -> dict[str, float]:
    """{"length_scale", "rho"} of `SystematicGCC.calibrated(K, N, f, sets, parity=parity)` on `n_sets` random
    sets of K *training* inputs of `workload`, in the order the dispatcher serves them: arrival order (random)
    for sgcc-parity, or ordered by `order_inputs` (`ordered`). `workload`: a gencc workload (or its name), or
    any model `gencc.as_model` takes with its training inputs in `data` (an array or .npy / .npz file); `parity`: a
    parity model, or the path of one saved by `gencc parity train`. Cached per (model, K, N, parity model's
    weights, n_sets, seed, ordered) in this process."""
    served = service_model(workload, data=data)
    f = served.workload.f if served.workload is not None else served.model  # a workload's own call, unchecked
    if isinstance(parity, (str, os.PathLike)):
        from ..workloads.parity_training import load_parity_file

        parity = load_parity_file(parity, served.model)
    key = (served.model.identity, int(K), int(N), str(getattr(parity, "weights_path", id(parity))), int(n_sets),
           int(seed), bool(ordered))
    with _lock:
        if key in _cache:
            return dict(_cache[key])
    if served.data is None:
        raise ValueError("the SystematicGCC calibration fits its prior on training inputs: pass data=")
    rng = np.random.default_rng([seed, 11])
    X = np.asarray(served.data)
    sets = []
    for _ in range(n_sets):
        S = X[rng.choice(len(X), size=K, replace=False)]
        sets.append(S[order_inputs(S)] if ordered else S)
    cal = dict(SystematicGCC.calibrated(K, N, f, sets, parity=parity).calibration)
    with _lock:
        _cache[key] = cal
    return dict(cal)


def sgcc_parity_code(K: int, N: int, parity: Any, calibration: dict[str, float] | None = None) -> SystematicGCC:
    """SystematicGCC with `parity` on its coded workers and, when given, the calibrated prior."""
    if parity is None:
        raise ValueError("sgcc-parity needs the workload's parity model (parity=gencc.workloads.load_parity(name, "
                         "k), k = ceil(K / (N - K)))")
    if calibration is None:
        return SystematicGCC(K, N, parity=parity)
    return SystematicGCC(K, N, parity=parity, rho=calibration["rho"],
                         kernel=Matern32(float(calibration["length_scale"]), null_degree=0))


class Served(NamedTuple):
    """What a service runs: the `Model`, its training inputs (calibration, checks; None when not given), its
    parity model (None for the schemes without one), and the built-in `Workload` when it is one (else None)."""

    model: Model
    data: np.ndarray | None
    parity: Any = None
    workload: Any = None


def service_model(workload: Any, parity_k: int | None = None, packed: bool = False, *, data: Any = None,
                  parity: Any = None, scheme: str = "") -> Served:
    """What a service runs (`Served`) for a built-in workload name or any model `gencc.as_model` takes, with
    `data` (an array or .npy / .npz file of training inputs: calibration, checks) and `parity` (a file saved by
    `gencc parity train`, checked against the model and `parity_k`, or a parity model)."""
    from ..workloads import WORKLOADS, Workload, load, load_parity

    if isinstance(workload, str) and workload in WORKLOADS or isinstance(workload, Workload):
        if data is not None or parity is not None:
            raise ValueError(f"data= and parity= go with your own model, not the built-in workload {workload!r}")
        w = load(workload, progress=False) if isinstance(workload, str) else workload
        pm = load_parity(w.name, parity_k, progress=False, packed=packed) if parity_k else None
        return Served(w.model, w.X_train, pm, w)
    if isinstance(workload, str) and ":" not in workload and not os.path.exists(workload):
        raise ValueError(f"unknown workload {workload!r}: a built-in one is {', '.join(WORKLOADS)}; your own model is "
                         "an import path 'package.module:attr' or a .pt2 / TorchScript file")
    model = as_model(workload)
    X = None if data is None else load_inputs(data, model.in_shape)
    if X is not None:
        model(X[:2])  # reads the input shape, or refuses inputs of the wrong shape, before any slow work
    if model.in_shape is None:
        raise ValueError(f"the input shape of {model.name} is unknown: give input_shape (--input-shape C,H,W) or "
                         "training inputs (data=, --data FILE.npy)")
    if parity_k is None and parity is None:
        return Served(model, X)
    if parity_k is None:
        raise ValueError(f"a parity model applies to the schemes that run one ({', '.join(PARITY_SCHEMES)}), not "
                         f"{scheme or 'this one'}")
    if parity is None:
        raise ValueError(f"{scheme or 'this scheme'} runs a parity model for k={parity_k}: train one for your model "
                         f"with `gencc parity train --model SPEC --data FILE --K {parity_k} --out parity.pt` and pass "
                         "it (--parity parity.pt)")
    if isinstance(parity, (str, os.PathLike)):
        from ..workloads.parity_training import load_parity_file

        parity = load_parity_file(parity, model, k=parity_k, packed=True if packed else None)
    elif int(getattr(parity, "k", parity_k)) != parity_k:
        raise ValueError(f"the parity model was trained for k={parity.k}; this scheme needs k={parity_k}")
    return Served(model, X, parity)
