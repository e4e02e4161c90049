"""Real, offline workloads: trained torch models on bundled data and analytic test functions.

    from gencc.workloads import load, WORKLOADS
    w = load("digits-cnn")          # trains on first use (rich progress bar), cached afterwards
    Y = w.f(w.X_test[:10])          # batched: (B, *in_shape) -> float64 (B, *out_shape)
    f2 = w.factory()                # a fresh equivalent callable (picklable factory, for workers)

Nothing is ever downloaded: digits ships with scikit-learn and mnist1d is generated locally. Importing this
module does not import torch; loading a trained workload does. Weights are cached under
`<cache root>/models/`, the root being `$GENCC_CACHE_DIR` or `platformdirs.user_cache_dir("gencc")`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .._util.validate import check_int
from ..model import Model, wrap_batched
from ._cache import ENV_VAR, SHA_KEY, cache_root, models_dir, recipe_hash

if TYPE_CHECKING:
    from ._parity import ParityFn


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload is, known without loading it."""

    name: str
    description: str
    trained: bool
    classifier: bool
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]


WORKLOADS: MappingProxyType[str, WorkloadSpec] = MappingProxyType({
    s.name: s
    for s in (
        WorkloadSpec("digits-cnn", "LeNet-style CNN on scikit-learn's 8x8 digits (10 logits)", True, True,
                     (1, 8, 8), (10,)),
        WorkloadSpec("digits-mlp", "MLP 64-128-64-10 on scikit-learn's digits, flattened (10 logits)", True, True,
                     (64,), (10,)),
        WorkloadSpec("mnist1d-cnn", "1-D CNN on mnist1d generated locally, 4000 train / 1000 test (10 logits)",
                     True, True, (1, 40), (10,)),
        WorkloadSpec("xsinx", "f(x) = x sin x on [-3, 3]", False, False, (1,), (1,)),
        WorkloadSpec("tanh-mlp", "seeded random-weight tanh MLP R^8 -> R^4, standard normal inputs", False, False,
                     (8,), (4,)),
        WorkloadSpec("poly", "degree-2 polynomial R^4 -> R^3: A (x*x) + B x + c, standard normal inputs", False,
                     False, (4,), (3,)),
    )
})


@dataclass(eq=False)
class Workload:
    """A loaded workload: its model, held-out and training inputs, and facts about it.

    `model` is the workload's `gencc.model.Model` (what `gencc.as_model(workload)` gives: shapes, identity,
    picklable factory). `f` is the model's own call, unchecked: (B, *in_shape) to (B, *out_shape), numpy in gives
    float64 numpy out, a torch tensor in gives a tensor out; `f.batched` is True. `factory()` builds a fresh
    equivalent f; the factory is picklable and small, so send it (not f) to a worker process or Ray actor.
    """

    name: str
    f: Callable[[Any], Any]
    factory: Callable[[], Callable[[Any], Any]]
    X_train: np.ndarray
    y_train: np.ndarray | None
    X_test: np.ndarray
    y_test: np.ndarray | None
    classifier: bool
    test_accuracy: float | None
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    description: str = ""
    degree: int | None = None
    train_seconds: float | None = None
    from_cache: bool = False
    weights_path: Path | None = None
    info: dict[str, Any] = field(default_factory=dict, repr=False)
    model: Model = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.model = wrap_batched(self.f, self.factory, self.name, self.in_shape, self.out_shape, self.weights_path)

    def sample(self, K: int, rng: np.random.Generator | int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """K distinct test inputs chosen with `rng` (a numpy Generator, or a seed), and their labels (or None)."""
        K = check_int("K", K, 1)
        n = len(self.X_test)
        if K > n:
            raise ValueError(f"K={K} exceeds the {n} test inputs of {self.name!r}")
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        idx = gen.choice(n, size=int(K), replace=False)
        y = None if self.y_test is None else self.y_test[idx]
        return self.X_test[idx], y


def workload_spec(name: str) -> WorkloadSpec:
    """What workload `name` is (known without loading it); ValueError naming the choices when there is none."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


def load(name: str, progress: bool = True, *, cache_dir: str | os.PathLike | None = None,
         retrain: bool = False) -> Workload:
    """Load workload `name`; a trained one is trained on first use and cached (see module docstring).

    progress: show a rich progress bar while training. cache_dir: cache root (default `$GENCC_CACHE_DIR` or
    the platform cache dir). retrain: train again even when a cached model exists.
    """
    if not isinstance(name, str):
        raise ValueError(f"workload name must be a string, got {type(name).__name__}")
    spec = workload_spec(name)
    if spec.trained:
        return _load_trained(spec, progress, cache_dir, retrain)
    return _load_analytic(spec)


def _load_trained(spec: WorkloadSpec, progress: bool, cache_dir: str | os.PathLike | None,
                  retrain: bool) -> Workload:
    from . import _torch

    models = models_dir(cache_dir).resolve()
    meta, from_cache = _torch.ensure_trained(spec.name, models, progress=progress, retrain=retrain)
    pt, _, h = _torch.weights_paths(spec.name, models)
    factory = _torch.ModelFactory(spec.name, str(models), h)
    Xtr, ytr, Xte, yte = _torch.dataset(spec.name)
    return Workload(
        name=spec.name, f=factory(), factory=factory, X_train=Xtr, y_train=ytr, X_test=Xte, y_test=yte,
        classifier=True, test_accuracy=float(meta["test_accuracy"]), in_shape=spec.in_shape,
        out_shape=spec.out_shape, description=spec.description, train_seconds=float(meta["train_seconds"]),
        from_cache=from_cache, weights_path=pt, info=meta,
    )


def cached_weights_sha256(name: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """The sha256 of trained workload `name`'s cached weights, or None when none are cached (imports torch only
    when they are)."""
    spec = workload_spec(name)
    models = models_dir(cache_dir)
    if not spec.trained or not any(models.glob(f"{name}-*.json")):
        return None
    import json

    from . import _torch

    meta = _torch.weights_paths(name, models)[1]
    return str(json.loads(meta.read_text())[SHA_KEY]) if meta.is_file() else None


def _trained_spec(name: str) -> WorkloadSpec:
    spec = workload_spec(name)
    if not spec.trained:
        raise ValueError(f"workload {name!r} has no trained model; choose one of "
                         f"{', '.join(n for n, s in WORKLOADS.items() if s.trained)}")
    return spec


def training_data(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Trained workload `name`'s data split (X_train, y_train, X_test, y_test), as its model was trained on."""
    _trained_spec(name)
    from . import _torch

    return tuple(_torch.dataset(name))


def untrained_module(name: str) -> Any:
    """A fresh, untrained torch module of trained workload `name`'s architecture, initialised from torch's
    current seed: what training from scratch starts from."""
    _trained_spec(name)
    from . import _torch

    return _torch.build_module(_torch.RECIPES[name]["arch"])


def load_parity(name: str = "digits-cnn", k: int = 2, progress: bool = True, *,
                cache_dir: str | os.PathLike | None = None, retrain: bool = False, packed: bool = False) -> ParityFn:
    """The parity model F_P of trained workload `name` for ParM with k inputs per parity query.

    Same input and output shapes and array kinds as the workload's f (batched); trained with MSE so that
    F_P(x_1 + ... + x_k) ~ f(x_1) + ... + f(x_k) for training inputs, with f the workload's own model (trained
    first if absent), from f's weights; the k-tuples are random, or for mnist1d consecutive groups of
    chain-ordered sets of 8 training inputs, as ParM's and SystematicGCC's coded workers see them. Trained on
    first use (progress bar) and cached under the models folder with the parity recipe's hash in the file
    name. The callable's `info` holds held-out reconstruction figures ("test": parity_mse, rel_mse and
    agreement of F_P(sum) - sum of the others, on random k-tuples of test inputs), `k`, `from_cache`,
    `weights_path` and `factory` (picklable).
    Use it as `gencc.ParM(K, k, parity=load_parity(name, k))`.

    packed=True: the model takes the k members themselves, stacked ((B, k, *in_shape)), instead of their sum
    (the first layer sees k times the channels; the rest is f's architecture, so one query costs about one f).
    A separate cache entry; ParM and SystematicGCC then send each coded worker its group's k inputs.
    """
    if not isinstance(name, str):
        raise ValueError(f"workload name must be a string, got {type(name).__name__}")
    spec = workload_spec(name)
    if not spec.trained:
        trained = ", ".join(n for n, s in WORKLOADS.items() if s.trained)
        raise ValueError(f"parity models exist for trained workloads only ({trained}), not {name!r}")
    from . import _parity

    k = _parity.check_k(k)
    models = models_dir(cache_dir).resolve()
    if not isinstance(packed, bool):
        raise ValueError(f"packed must be True or False, got {packed!r}")
    _, from_cache = _parity.ensure_parity(name, k, models, progress=progress, retrain=retrain, packed=packed)
    _, _, h = _parity.parity_paths(name, k, models, packed)
    fn = _parity.ParityFactory(name, k, str(models), h, packed)()
    fn.from_cache = from_cache
    return fn


def _load_analytic(spec: WorkloadSpec) -> Workload:
    from . import _analytic

    factory = _analytic.AnalyticFactory(spec.name)
    f = factory()
    Xtr, Xte = _analytic.inputs(spec.name)
    return Workload(
        name=spec.name, f=f, factory=factory, X_train=Xtr, y_train=None, X_test=Xte, y_test=None,
        classifier=False, test_accuracy=None, in_shape=spec.in_shape, out_shape=spec.out_shape,
        description=spec.description, degree=getattr(f, "degree", None),
    )


__all__ = [
    "ENV_VAR", "WORKLOADS", "Workload", "WorkloadSpec", "cache_root", "cached_weights_sha256", "load",
    "load_parity", "models_dir", "recipe_hash", "training_data", "untrained_module", "workload_spec",
]
