"""Parity models for ParM: the workload's architecture trained (MSE) to map a sum of k inputs to the sum of
the workload model's outputs on them. Cached like the workloads' models; imported only when one is loaded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._validate import check_int
from ._cache import read_json, recipe_hash
from ._torch import (
    IN_SHAPES,
    RECIPES,
    TRAIN_THREADS,
    ModelFn,
    _progress_bar,
    build_module,
    dataset,
    ensure_trained,
    full_recipe,
    load_module,
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
EVAL_TUPLES = 4000  # held-out k-tuples of test inputs for the metadata's reconstruction figures


def check_k(k: int) -> int:
    return check_int("k (inputs per parity query)", k, 1)  # type: ignore[return-value]


def parity_recipe(name: str, k: int) -> dict[str, Any]:
    """The parity recipe: k, the training settings, the workload's full recipe (its hash names the targets)."""
    return {"parity": PARITY_TRAIN, "k": check_k(k), "base": full_recipe(name), "format": PARITY_FORMAT,
            "threads": TRAIN_THREADS}


def parity_paths(name: str, k: int, models: Path) -> tuple[Path, Path, str]:
    """(weights .pt path, metadata .json path, recipe hash) of the parity model of `name` for k."""
    h = recipe_hash(parity_recipe(name, k))
    stem = f"{name}-parity-k{int(k)}-{h}"
    return models / f"{stem}.pt", models / f"{stem}.json", h


def _outputs(module: torch.nn.Module, X: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return module(X).clone()


def _reconstruction(parity: torch.nn.Module, X: torch.Tensor, F: torch.Tensor, k: int,
                    gen: torch.Generator) -> dict[str, float]:
    """How well F_P(sum) - sum of the others recovers f of the first member, on random k-tuples."""
    idx = torch.randint(len(X), (EVAL_TUPLES, k), generator=gen)
    with torch.inference_mode():
        P = parity(X[idx].sum(dim=1))
    target = F[idx].sum(dim=1)
    est = P - F[idx[:, 1:]].sum(dim=1)
    true = F[idx[:, 0]]
    return {
        "parity_mse": float(((P - target) ** 2).mean()),
        "rel_mse": float(((est - true) ** 2).sum() / (true**2).sum()),
        "agreement": float((est.argmax(dim=1) == true.argmax(dim=1)).float().mean()),
    }


def train_parity(name: str, k: int, models: Path, progress: bool = True) -> dict[str, Any]:
    """Train the parity model of `name` for k, write weights and metadata atomically, return the metadata.

    Deterministic like `_torch.train`: fixed seeds, private generators, deterministic algorithms, at most
    TRAIN_THREADS thread(s) (previous torch settings restored).
    """
    recipe = parity_recipe(name, k)
    pt, js, h = parity_paths(name, k, models)
    hp = recipe["parity"]
    ensure_trained(name, models, progress=progress)
    base = load_module(name, weights_paths(name, models)[0])
    Xtr, _, Xte, _ = dataset(name)
    t0 = time.perf_counter()
    with training_threads():
        X = torch.as_tensor(Xtr, dtype=torch.float32)
        F = _outputs(base, X)
        torch.manual_seed(hp["seed"])
        module = build_module(RECIPES[name]["arch"])
        if hp["init"] == "base":
            module.load_state_dict(base.state_dict())
        gen = torch.Generator().manual_seed(hp["seed"])
        opt = torch.optim.Adam(module.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=hp["epochs"])
        bar = _progress_bar(progress)
        with bar:
            task = bar.add_task(f"training {name} parity model (k={k})", total=hp["epochs"], loss=float("nan"))
            for _ in range(hp["epochs"]):
                module.train()
                idx = torch.randint(len(X), (hp["per_epoch"], k), generator=gen)
                P, target = X[idx].sum(dim=1), F[idx].sum(dim=1)
                for i in range(0, len(P), hp["batch"]):
                    opt.zero_grad(set_to_none=True)
                    loss = ((module(P[i : i + hp["batch"]]) - target[i : i + hp["batch"]]) ** 2).mean()
                    loss.backward()
                    opt.step()
                sched.step()
                bar.update(task, advance=1, loss=loss.item())
        module.eval()
        seconds = time.perf_counter() - t0
        Xt = torch.as_tensor(Xte, dtype=torch.float32)
        held_out = _reconstruction(module, Xt, _outputs(base, Xt), k, torch.Generator().manual_seed(1))
        meta = {
            "name": name,
            "k": k,
            "hash": h,
            "base_hash": weights_paths(name, models)[2],
            "recipe": recipe,
            "test": held_out,
            "train_seconds": round(seconds, 3),
            "n_train": len(Xtr),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    save_entry(pt, js, module, meta)
    return meta


def ensure_parity(name: str, k: int, models: Path, progress: bool = True,
                  retrain: bool = False) -> tuple[dict, bool]:
    """(metadata, from_cache): train unless a complete cache entry for the current parity recipe exists."""
    pt, js, _ = parity_paths(name, k, models)
    if not retrain and pt.exists() and js.exists():
        return read_json(js), True
    return train_parity(name, k, models, progress=progress), False


@dataclass
class ParityFactory:
    """Picklable builder of a parity model's callable (trains it if absent); refuses a recipe hash other than
    the one it was made for, like `ModelFactory`."""

    name: str
    k: int
    models: str
    hash: str

    def __call__(self) -> ParityFn:
        models = Path(self.models)
        pt, _, h = parity_paths(self.name, self.k, models)
        if h != self.hash:
            raise RuntimeError(f"{self.name} parity model (k={self.k}): recipe hash here is {h}, the factory was "
                               f"made for {self.hash} (torch {torch.__version__} here)")
        meta, from_cache = ensure_parity(self.name, self.k, models, progress=False)
        return ParityFn(self.name, load_module(self.name, pt), self, meta, from_cache, pt)


class ParityFn(ModelFn):
    """Batched parity model F_P: (B, *in_shape) -> (B, 10), like the workload's f (same array kinds).

    `k` is the group size it was trained for; `info` its metadata (held-out reconstruction figures under
    "test", training seconds, recipe); `from_cache` whether the weights were already cached; `weights_path`.
    """

    def __init__(self, name: str, module: torch.nn.Module, factory: ParityFactory, info: dict[str, Any],
                 from_cache: bool, weights_path: Path) -> None:
        super().__init__(f"{name}-parity-k{factory.k}", module, IN_SHAPES[name], OUT_SHAPE, factory)
        self.k = factory.k
        self.info = info
        self.from_cache = from_cache
        self.weights_path = weights_path

    def __repr__(self) -> str:
        return f"ParityFn({self.name!r}, k={self.k}, in_shape={self.in_shape}, out_shape={self.out_shape})"
