"""Parity models for ParM: the workload's architecture (or a per-workload one) trained (MSE) to map a sum of k
inputs to the sum of the workload model's outputs on them. Cached like the workloads' models; imported only when
one is loaded.

A *packed* parity model (`packed=True`) gets the k inputs themselves, stacked along a new leading axis
((k, *in_shape): ParM's concatenation encoder without the downsampling) and folded into its first layer's
input channels; everything after the first layer is the workload's architecture, so a query costs about one
evaluation of f, while the coded worker receives k inputs instead of one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._util.validate import check_int
from ._cache import SHA_KEY, check_cache, recipe_hash
from ._torch import (
    IN_SHAPES,
    RECIPES,
    TRAIN_THREADS,
    ModelFn,
    _progress_bar,
    build_module,
    cached_meta,
    dataset,
    ensure_trained,
    full_recipe,
    load_module,
    load_state,
    save_entry,
    training_threads,
    weights_paths,
)

PARITY_FORMAT = 1  # bump when the parity training loop itself changes (part of every parity recipe hash)
OUT_SHAPE = (10,)

# Everything that changes a parity model's weights besides k and the workload's own recipe. Each epoch draws
# `per_epoch` fresh k-tuples of training inputs; the model starts from the workload model's weights ("base").
PARITY_TRAIN: dict[str, Any] = {"epochs": 40, "per_epoch": 8192, "batch": 64, "lr": 3e-3, "weight_decay": 0.0,
                                "seed": 0, "init": "base"}
# Per-workload changes to PARITY_TRAIN. Keys absent from PARITY_TRAIN: "arch", the parity model's architecture
# entry (default the workload's); "scale", "sum" or "mean" as in `build_parity`; "chain_set", draw the k-tuples
# as coded workers see them (`chain_groups`: consecutive groups of chain-ordered sets of that many inputs)
# instead of uniformly. A workload without an entry keeps PARITY_TRAIN exactly, so its parity recipe hashes
# (and cached models) are unchanged. mnist1d (measured at low redundancy by a probe script since removed,
# parity_recipes.py; see docs/generated/findings.md): chain groups of sets of 8 and 60 epochs; a wider model, mean
# scaling, training from scratch and other learning rates did no better.
PARITY_OVERRIDES: dict[str, dict[str, Any]] = {
    "mnist1d-cnn": {"chain_set": 8, "epochs": 60},
}
EVAL_TUPLES = 4000  # held-out k-tuples of test inputs for the metadata's reconstruction figures


def check_k(k: int) -> int:
    return check_int("k (inputs per parity query)", k, 1)  # type: ignore[return-value]


def parity_recipe(name: str, k: int, packed: bool = False) -> dict[str, Any]:
    """The parity recipe: k, the training settings, the workload's full recipe (its hash names the targets)."""
    return {"parity": settings(name, packed), "k": check_k(k), "base": full_recipe(name), "format": PARITY_FORMAT,
            "threads": TRAIN_THREADS}


def parity_paths(name: str, k: int, models: Path, packed: bool = False) -> tuple[Path, Path, str]:
    """(weights .pt path, metadata .json path, recipe hash) of the parity model of `name` for k."""
    h = recipe_hash(parity_recipe(name, k, packed))
    stem = f"{name}-parity-k{int(k)}{'-packed' if packed else ''}-{h}"
    return models / f"{stem}.pt", models / f"{stem}.json", h


def _outputs(module: torch.nn.Module, X: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return module(X).clone()


def queries(X: torch.Tensor, idx: torch.Tensor, packed: bool) -> torch.Tensor:
    """The parity queries of the k-tuples idx (rows of X): their sums, or packed, the stacked members."""
    return X[idx] if packed else X[idx].sum(dim=1)


def _reconstruction(parity: torch.nn.Module, X: torch.Tensor, F: torch.Tensor, idx: torch.Tensor) -> dict[str, float]:
    """How well F_P(query) - sum of the others recovers f of the first member, on the k-tuples idx (rows of X)."""
    with torch.inference_mode():
        P = parity(queries(X, idx, isinstance(parity, PackedParity)))
    target = F[idx].sum(dim=1)
    est = P - F[idx[:, 1:]].sum(dim=1)
    true = F[idx[:, 0]]
    return {
        "parity_mse": float(((P - target) ** 2).mean()),
        "rel_mse": float(((est - true) ** 2).sum() / (true**2).sum()),
        "agreement": float((est.argmax(dim=1) == true.argmax(dim=1)).float().mean()),
    }


class MeanParity(torch.nn.Module):
    """F_P(s) = k g(s / k): the inner model g maps the mean of k inputs to the mean of their outputs, so inputs
    and targets keep the scale of single ones (and g = f is the untrained reading of the mean)."""

    def __init__(self, inner: torch.nn.Module, k: int) -> None:
        super().__init__()
        self.inner = inner
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x / self.k) * self.k


class PackedParity(torch.nn.Module):
    """F_P on k stacked inputs (B, k, C, ...) -> (B, classes): the members are folded into the input channels
    of `inner` (an architecture built with k C input channels; for flat inputs, k times the features)."""

    def __init__(self, inner: torch.nn.Module, k: int) -> None:
        super().__init__()
        self.inner = inner
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.reshape(x.shape[0], x.shape[1] * x.shape[2], *x.shape[3:]))


#: what a packed parity model changes in a workload's settings. From scratch: started from f's weights (the
#: first layer repeated per member, i.e. f on the sum) every member's channels get the same weights and the
#: gradients barely tell them apart, so on digits it stayed the plain model (held-out rel_mse 0.043 both at
#: k = 2; from scratch 0.031); on mnist1d both starts end alike (the removed parity_recipes.py probe, packed rows;
#: see docs/generated/findings.md).
PACKED = {"pack": True, "init": "scratch"}


def settings(name: str, packed: bool = False) -> dict[str, Any]:
    """The parity training settings of `name`: PARITY_TRAIN with the workload's PARITY_OVERRIDES entries, and
    PACKED for a packed parity model (absent otherwise, so the plain recipes' hashes never move)."""
    return {**PARITY_TRAIN, **PARITY_OVERRIDES.get(name, {}), **(PACKED if packed else {})}


def build_parity(name: str, k: int, hp: dict[str, Any]) -> torch.nn.Module:
    """A fresh parity module for settings `hp`: architecture hp["arch"] (default: the workload's), wrapped in
    MeanParity when hp["scale"] is "mean" (default "sum": the module sees the sum and outputs the sum), or
    with hp["pack"] in PackedParity (the module sees the k members stacked)."""
    arch = hp.get("arch", RECIPES[name]["arch"])
    if hp.get("pack"):
        if hp.get("scale", "sum") != "sum":
            raise ValueError("a packed parity model sees the members themselves: scale must be 'sum'")
        shape = IN_SHAPES[name]
        # channels-first inputs fold the members into the channels; flat ones (an MLP) into the features
        return PackedParity(build_module({**arch, "in_channels": k * shape[0] if len(shape) > 1 else k}), k)
    inner = build_module(arch)
    scale = hp.get("scale", "sum")
    if scale == "mean":
        return MeanParity(inner, k)
    if scale != "sum":
        raise ValueError(f"parity scale must be 'sum' or 'mean', got {scale!r}")
    return inner


def fit_parity(name: str, k: int, hp: dict[str, Any], base: torch.nn.Module, X: torch.Tensor,
               progress: bool = False) -> tuple[torch.nn.Module, float]:
    """(trained parity module in eval mode, training seconds) for settings `hp` on training inputs X (float32):
    each epoch draws hp["per_epoch"] fresh k-tuples of X (uniformly, or `chain_groups` when hp has "chain_set")
    with the sum of `base`'s outputs as target. Call it under `training_threads()`, as `train_parity` does."""
    t0 = time.perf_counter()
    F = _outputs(base, X)
    torch.manual_seed(hp["seed"])
    module = build_parity(name, k, hp)
    if hp["init"] == "base":
        inner = module.inner if isinstance(module, (MeanParity, PackedParity)) else module
        try:
            inner.load_state_dict(_from_base(base.state_dict(), inner.state_dict()))
        except RuntimeError as err:
            raise ValueError(f"{name} parity settings: init 'base' needs the workload's architecture ({err})") from None
    elif hp["init"] != "scratch":
        raise ValueError(f"parity init must be 'base' or 'scratch', got {hp['init']!r}")
    module = train_loop(module, X, F, k, hp, progress, f"training {name} parity model (k={k})")
    return module, time.perf_counter() - t0


def train_loop(module: torch.nn.Module, X: torch.Tensor, F: torch.Tensor, k: int, hp: dict[str, Any],
               progress: bool, label: str, state: dict[str, Any] | None = None,
               save: Callable[[dict[str, Any]], None] | None = None) -> torch.nn.Module:
    """Train parity `module` (MSE to the sums F[idx].sum(1) of the base outputs F on training inputs X) for
    hp["epochs"] epochs of hp["per_epoch"] fresh k-tuples (uniform, or `chain_groups` with hp["chain_set"]);
    returned in eval mode. Resumable: `save(state)` gets the state after each epoch, and `state` (one such)
    continues from there with the same draws as an uninterrupted run."""
    gen = torch.Generator().manual_seed(hp["seed"])
    chain = hp.get("chain_set")
    opt = torch.optim.Adam(module.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=hp["epochs"])
    start, loss_value = 0, float("nan")
    if state is not None:
        module.load_state_dict(state["module"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"])
        start, loss_value = int(state["epoch"]), float(state["loss"])
    bar = _progress_bar(progress)
    with bar:
        task = bar.add_task(label, total=hp["epochs"], completed=start, loss=loss_value)
        for epoch in range(start, hp["epochs"]):
            module.train()
            if chain is None:
                idx = torch.randint(len(X), (hp["per_epoch"], k), generator=gen)
            else:
                idx = chain_groups(X, k, chain, -(-hp["per_epoch"] // (chain // k)), gen)
            P, target = queries(X, idx, bool(hp.get("pack"))), F[idx].sum(dim=1)
            for i in range(0, len(P), hp["batch"]):
                opt.zero_grad(set_to_none=True)
                loss = ((module(P[i : i + hp["batch"]]) - target[i : i + hp["batch"]]) ** 2).mean()
                loss.backward()
                opt.step()
            sched.step()
            bar.update(task, advance=1, loss=loss.item())
            if save is not None:
                save({"epoch": epoch + 1, "loss": loss.item(), "module": module.state_dict(),
                      "opt": opt.state_dict(), "sched": sched.state_dict(), "gen": gen.get_state()})
    module.eval()
    return module


def _from_base(base: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The workload model's weights for a parity module: a first layer with k times the inputs (packed) gets
    the base weights repeated k times, so at the start F_P(members) = f(sum of members), the plain start."""
    out = {}
    for key, w in base.items():
        target = own.get(key)
        if (target is not None and w.dim() >= 2 and target.shape[0] == w.shape[0] and target.shape[1] != w.shape[1]
                and target.shape[1] % w.shape[1] == 0):
            w = torch.cat([w] * (target.shape[1] // w.shape[1]), dim=1)
        out[key] = w
    return out


def chain_groups(X: torch.Tensor, k: int, size: int, sets: int, gen: torch.Generator) -> torch.Tensor:
    """Index k-tuples as coded workers see them: `sets` sets of `size` distinct rows of X, each put in chain
    order (`order_inputs`) and cut into consecutive groups of k (a remainder is dropped); (sets * (size // k), k)."""
    from ..codes.ordering import order_inputs

    if not k <= size <= len(X):
        raise ValueError(f"chain_set must be between k = {k} and the {len(X)} training inputs, got {size}")
    pick = torch.rand((sets, len(X)), generator=gen).argsort(dim=1)[:, :size]
    flat = X.reshape(len(X), -1).numpy()
    rows = [s[torch.from_numpy(order_inputs(flat[s.numpy()]).copy())] for s in pick]
    g = size // k
    return torch.stack(rows)[:, : g * k].reshape(sets * g, k)


def held_out(module: torch.nn.Module, base: torch.nn.Module, X: torch.Tensor, k: int,
             chain_set: int | None = None) -> dict[str, float]:
    """Reconstruction figures of a parity module on EVAL_TUPLES k-tuples of X (fixed draw): random ones, or
    with `chain_set` consecutive groups of chain-ordered sets of that size (`chain_groups`)."""
    gen = torch.Generator().manual_seed(1)
    if chain_set is None:
        idx = torch.randint(len(X), (EVAL_TUPLES, k), generator=gen)
    else:
        idx = chain_groups(X, k, chain_set, -(-EVAL_TUPLES // (chain_set // k)), gen)
    return _reconstruction(module, X, _outputs(base, X), idx)


def train_parity(name: str, k: int, models: Path, progress: bool = True, packed: bool = False) -> dict[str, Any]:
    """Train the parity model of `name` for k, write weights and metadata atomically, return the metadata.

    Deterministic like `_torch.train`: fixed seeds, private generators, deterministic algorithms, at most
    TRAIN_THREADS thread(s) (previous torch settings restored).
    """
    recipe = parity_recipe(name, k, packed)
    pt, js, h = parity_paths(name, k, models, packed)
    base_meta, _ = ensure_trained(name, models, progress=progress)
    base = load_module(name, weights_paths(name, models)[0], sha256=base_meta[SHA_KEY])
    Xtr, _, Xte, _ = dataset(name)
    with training_threads():
        X = torch.as_tensor(Xtr, dtype=torch.float32)
        module, seconds = fit_parity(name, k, recipe["parity"], base, X, progress)
        test = held_out(module, base, torch.as_tensor(Xte, dtype=torch.float32), k)
        meta = {
            "name": name,
            "k": k,
            "packed": packed,
            "hash": h,
            "base_hash": weights_paths(name, models)[2],
            "recipe": recipe,
            "test": test,
            "train_seconds": round(seconds, 3),
            "n_train": len(Xtr),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    save_entry(pt, js, module, meta)
    return meta


def load_parity_module(name: str, k: int, weights: Path, packed: bool = False, *, sha256: str) -> torch.nn.Module:
    """The parity module of `name` for k (current settings) with the weights at `weights` (refused unless their
    sha256 is `sha256`, recorded when they were trained), eval, float32, CPU."""
    module = build_parity(name, k, settings(name, packed))
    module.load_state_dict(load_state(weights, sha256))
    return module.float().eval()


def ensure_parity(name: str, k: int, models: Path, progress: bool = True,
                  retrain: bool = False, packed: bool = False) -> tuple[dict, bool]:
    """(metadata, from_cache): train unless a complete cache entry for the current parity recipe exists."""
    check_cache(models)
    pt, js, _ = parity_paths(name, k, models, packed)
    meta = cached_meta(pt, js, retrain)
    if meta is not None:
        return meta, True
    return train_parity(name, k, models, progress=progress, packed=packed), False


@dataclass
class ParityFactory:
    """Picklable builder of a parity model's callable (trains it if absent); refuses a recipe hash other than
    the one it was made for, like `ModelFactory`."""

    name: str
    k: int
    models: str
    hash: str
    packed: bool = False

    def __call__(self) -> ParityFn:
        models = Path(self.models)
        pt, _, h = parity_paths(self.name, self.k, models, self.packed)
        if h != self.hash:
            raise RuntimeError(f"{self.name} parity model (k={self.k}): recipe hash here is {h}, the factory was "
                               f"made for {self.hash} (torch {torch.__version__} here)")
        meta, from_cache = ensure_parity(self.name, self.k, models, progress=False, packed=self.packed)
        module = load_parity_module(self.name, self.k, pt, self.packed, sha256=meta[SHA_KEY])
        return ParityFn(self.name, module, self, meta, from_cache, pt)


class ParityFn(ModelFn):
    """Batched parity model F_P: (B, *in_shape) -> (B, 10), like the workload's f (same array kinds); packed,
    (B, k, *in_shape) -> (B, 10): each query is the k members stacked.

    `k` is the group size it was trained for; `packed` whether it takes the members stacked; `info` its
    metadata (held-out reconstruction figures under "test", training seconds, recipe); `from_cache` whether
    the weights were already cached; `weights_path`.
    """

    def __init__(self, name: str, module: torch.nn.Module, factory: ParityFactory, info: dict[str, Any],
                 from_cache: bool, weights_path: Path) -> None:
        packed = factory.packed
        in_shape = (factory.k, *IN_SHAPES[name]) if packed else IN_SHAPES[name]
        super().__init__(f"{name}-parity-k{factory.k}{'-packed' if packed else ''}", module, in_shape, OUT_SHAPE,
                         factory)
        self.packed = packed
        self.k = factory.k
        self.info = info
        self.from_cache = from_cache
        self.weights_path = weights_path

    def __repr__(self) -> str:
        pk = ", packed=True" if self.packed else ""
        return f"ParityFn({self.name!r}, k={self.k}{pk}, in_shape={self.in_shape}, out_shape={self.out_shape})"
