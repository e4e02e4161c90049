"""Trained torch workloads: architectures, a deterministic training loop, the batched callable and its factory.

Imported only when a trained workload is loaded, so `import gencc` and `import gencc.workloads` never pull in
torch.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .._util.arrays import is_torch
from . import _data
from ._cache import SHA_KEY, atomic_write, check_cache, read_json, read_verified, recipe_hash, sha256_bytes, write_json

log = logging.getLogger(__name__)
#: how a refused weights file is fixed (see `_cache.read_verified`)
FIX = "(gencc trains it again on the next load) or load with retrain=True"

TRAIN_THREADS = 1  # one thread: reproducible, and 10-100x faster than two on a shared 2-core machine
FORMAT_VERSION = 1  # bump when the training loop itself changes (it is part of every recipe hash)
CHUNK = 8192  # rows per forward pass, bounds memory for very large batches

# Everything that changes the weights. The hash of (recipe, torch version, format) names the cache file.
RECIPES: dict[str, dict[str, Any]] = {
    "digits-cnn": {
        "data": {"name": "digits", **_data.DIGITS_SPLIT},
        "arch": {"kind": "lenet2d", "channels": [16, 32], "kernel": 3, "hidden": 64, "classes": 10},
        "train": {"epochs": 30, "batch": 64, "lr": 3e-3, "weight_decay": 1e-4, "seed": 0},
    },
    "digits-mlp": {
        "data": {"name": "digits", **_data.DIGITS_SPLIT},
        "arch": {"kind": "mlp", "sizes": [64, 128, 64, 10]},
        "train": {"epochs": 40, "batch": 64, "lr": 2e-3, "weight_decay": 1e-4, "seed": 0},
    },
    "mnist1d-cnn": {
        "data": {"name": "mnist1d", **_data.MNIST1D_ARGS},
        "arch": {"kind": "cnn1d", "channels": [64, 64, 64], "length": 40, "classes": 10},
        "train": {"epochs": 100, "batch": 100, "lr": 1e-2, "weight_decay": 1e-4, "seed": 0},
    },
}

IN_SHAPES: dict[str, tuple[int, ...]] = {"digits-cnn": (1, 8, 8), "digits-mlp": (64,), "mnist1d-cnn": (1, 40)}


class LeNet2d(nn.Module):
    """conv-pool-conv-pool-fc-fc with ReLU, for 1x8x8 images (3x3 convolutions, same padding); `in_channels`
    > 1 for stacked images (packed parity models)."""

    def __init__(self, channels: list[int], kernel: int, hidden: int, classes: int, in_channels: int = 1) -> None:
        super().__init__()
        c1, c2 = channels
        pad = kernel // 2
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel, padding=pad), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, kernel, padding=pad), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(c2 * 2 * 2, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class CNN1d(nn.Module):
    """Strided 1-D convolutions (ReLU) and a linear read-out, for 1 x length signals (mnist1d); with `hidden`,
    a hidden fully connected layer (ReLU) before the read-out; `in_channels` > 1 for stacked signals."""

    def __init__(self, channels: list[int], length: int, classes: int, hidden: int | None = None,
                 in_channels: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in, n = in_channels, length
        for i, c in enumerate(channels):
            k = 5 if i == 0 else 3
            layers += [nn.Conv1d(c_in, c, k, stride=2, padding=1), nn.ReLU()]
            n = (n + 2 - k) // 2 + 1
            c_in = c
        self.features = nn.Sequential(*layers)
        if hidden is None:
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(c_in * n, classes))
        else:
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(c_in * n, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build_module(arch: dict[str, Any]) -> nn.Module:
    """A freshly initialised module for an architecture entry of a recipe."""
    kind = arch["kind"]
    if kind == "lenet2d":
        return LeNet2d(arch["channels"], arch["kernel"], arch["hidden"], arch["classes"], arch.get("in_channels", 1))
    if kind == "mlp":
        sizes = [arch["sizes"][0] * arch.get("in_channels", 1), *arch["sizes"][1:]]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-2], sizes[1:-1], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-2], sizes[-1]))
        return nn.Sequential(*layers)
    if kind == "cnn1d":
        return CNN1d(arch["channels"], arch["length"], arch["classes"], arch.get("hidden"), arch.get("in_channels", 1))
    raise ValueError(f"unknown architecture kind {kind!r}")


def full_recipe(name: str) -> dict[str, Any]:
    """The recipe of a trained workload, with the torch version and training-loop format version."""
    if name not in RECIPES:
        raise ValueError(f"no training recipe for {name!r}; trained workloads: {', '.join(sorted(RECIPES))}")
    return {"name": name, **RECIPES[name], "torch": torch.__version__, "format": FORMAT_VERSION,
            "threads": TRAIN_THREADS}


def weights_paths(name: str, models: Path) -> tuple[Path, Path, str]:
    """(weights .pt path, metadata .json path, recipe hash) for the current recipe of `name`."""
    h = recipe_hash(full_recipe(name))
    return models / f"{name}-{h}.pt", models / f"{name}-{h}.json", h


def dataset(name: str) -> _data.Split:
    """(X_train, y_train, X_test, y_test) of a trained workload, shaped (n, *in_shape), float64 / int64."""
    data = RECIPES[name]["data"]
    if data["name"] == "digits":
        split = _data.digits(data["test_size"], data["seed"], data["stratify"])
    elif data["name"] == "mnist1d":
        split = _data.mnist1d(data["num_samples"], data["train_split"], data["seed"])
    else:
        raise ValueError(f"unknown data set {data['name']!r}")
    Xtr, ytr, Xte, yte = split
    shape = IN_SHAPES[name]
    return Xtr.reshape(-1, *shape), ytr, Xte.reshape(-1, *shape), yte


def _accuracy(module: nn.Module, X: np.ndarray, y: np.ndarray) -> float:
    with torch.inference_mode():
        pred = module(torch.as_tensor(X, dtype=torch.float32)).argmax(dim=1).numpy()
    return float(np.mean(pred == y))



@contextmanager
def training_threads() -> Iterator[None]:
    """At most TRAIN_THREADS intra-op threads and deterministic algorithms while training; the caller's
    torch settings are restored afterwards."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(min(TRAIN_THREADS, threads))
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def save_entry(pt: Path, js: Path, module: nn.Module, meta: dict) -> None:
    """Weights first, metadata last (with the weights' sha256 under SHA_KEY, added to `meta`): the .json is the
    marker of a complete cache entry."""
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    data = buf.getvalue()
    meta[SHA_KEY] = sha256_bytes(data)

    def _write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write(pt, _write)
    write_json(js, meta)


def cached_meta(pt: Path, js: Path, retrain: bool) -> dict | None:
    """The metadata of a complete, verifiable cache entry (weights, metadata, a recorded sha256), else None.
    An entry written before gencc recorded sha256s is trained again (training is deterministic)."""
    if retrain or not (pt.exists() and js.exists()):
        return None
    meta = read_json(js)
    if not meta.get(SHA_KEY):
        log.info("%s has no recorded sha256 (an older gencc wrote it): training it again", pt)
        return None
    return meta


def load_state(path: Path, sha256: str) -> dict[str, torch.Tensor]:
    """The state_dict at `path`, read once and refused unless its sha256 is `sha256` (then weights_only)."""
    data = read_verified(path, sha256, FIX)
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def train(name: str, models: Path, progress: bool = True) -> dict[str, Any]:
    """Train workload `name` from its recipe, write weights and metadata atomically, return the metadata.

    Deterministic: fixed seeds, a private generator for shuffling, deterministic algorithms and at most
    TRAIN_THREADS thread(s) (the previous torch settings are restored afterwards).
    """
    recipe = full_recipe(name)
    pt, js, h = weights_paths(name, models)
    hp = recipe["train"]
    Xtr, ytr, Xte, yte = dataset(name)
    t0 = time.perf_counter()
    with training_threads():
        torch.manual_seed(hp["seed"])
        module = build_module(recipe["arch"])
        gen = torch.Generator().manual_seed(hp["seed"])
        X = torch.as_tensor(Xtr, dtype=torch.float32)
        y = torch.as_tensor(ytr, dtype=torch.int64)
        opt = torch.optim.Adam(module.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=hp["epochs"])
        loss_fn = nn.CrossEntropyLoss()
        bar = _progress_bar(progress)
        with bar:
            task = bar.add_task(f"training {name}", total=hp["epochs"], loss=float("nan"))
            for _ in range(hp["epochs"]):
                module.train()
                perm = torch.randperm(len(X), generator=gen)
                for i in range(0, len(X), hp["batch"]):
                    idx = perm[i : i + hp["batch"]]
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(module(X[idx]), y[idx])
                    loss.backward()
                    opt.step()
                sched.step()
                bar.update(task, advance=1, loss=loss.item())
        module.eval()
        seconds = time.perf_counter() - t0
        meta = {
            "name": name,
            "hash": h,
            "recipe": recipe,
            "test_accuracy": _accuracy(module, Xte, yte),
            "train_accuracy": _accuracy(module, Xtr, ytr),
            "train_seconds": round(seconds, 3),
            "n_train": len(Xtr),
            "n_test": len(Xte),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    save_entry(pt, js, module, meta)
    return meta


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None


def _progress_bar(progress: bool) -> Any:
    if not progress:
        return _NoBar()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("epochs"),
        TimeElapsedColumn(), TextColumn("loss {task.fields[loss]:.3f}"), transient=False,
    )


def ensure_trained(name: str, models: Path, progress: bool = True, retrain: bool = False) -> tuple[dict, bool]:
    """(metadata, from_cache): train unless a complete cache entry for the current recipe exists."""
    check_cache(models)
    pt, js, _ = weights_paths(name, models)
    meta = cached_meta(pt, js, retrain)
    if meta is not None:
        return meta, True
    return train(name, models, progress=progress), False


def load_module(name: str, weights: Path, *, sha256: str) -> nn.Module:
    """The module of `name` with the weights at `weights` (refused unless their sha256 is `sha256`, the one
    recorded when they were trained), in eval mode, float32, on the CPU."""
    module = build_module(RECIPES[name]["arch"])
    module.load_state_dict(load_state(weights, sha256))
    return module.float().eval()


@dataclass
class ModelFactory:
    """Picklable builder of a workload's callable: loads the cached weights (training them if absent).

    Holds only the name, the models folder and the recipe hash, so it is cheap to send to a worker process
    or Ray actor. It refuses to build a model whose recipe hash differs from the one it was created with
    (e.g. another torch version on the worker), since that would compute a different f.
    """

    name: str
    models: str
    hash: str

    def __call__(self) -> ModelFn:
        models = Path(self.models)
        pt, _, h = weights_paths(self.name, models)
        if h != self.hash:
            raise RuntimeError(
                f"{self.name}: recipe hash here is {h}, the factory was made for {self.hash} "
                f"(torch {torch.__version__} here); the model would differ from the caller's"
            )
        meta, _ = ensure_trained(self.name, models, progress=False)
        return ModelFn(self.name, load_module(self.name, pt, sha256=meta[SHA_KEY]), IN_SHAPES[self.name], (10,),
                       self)


class ModelFn:
    """Batched f of a trained model: (B, *in_shape) -> (B, *out_shape) logits.

    numpy in -> float64 numpy out; torch in -> torch out on the input's device, in the input's float dtype
    (non-float tensors give torch's default dtype). Computation runs in float32 on the CPU under
    torch.inference_mode(). Pickling sends the factory, not the weights.
    """

    batched = True

    def __init__(self, name: str, module: nn.Module, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
                 factory: Callable[[], ModelFn]) -> None:
        self.name = name
        self.module = module
        self.in_shape = in_shape
        self.out_shape = out_shape
        self.factory = factory

    def __reduce__(self) -> tuple:
        return (_build, (self.factory,))

    def __repr__(self) -> str:
        return f"ModelFn({self.name!r}, in_shape={self.in_shape}, out_shape={self.out_shape})"

    def _check(self, shape: tuple[int, ...]) -> None:
        if tuple(shape[1:]) != self.in_shape or len(shape) != len(self.in_shape) + 1:
            raise ValueError(
                f"{self.name}: expected a batch of shape (B, {', '.join(map(str, self.in_shape))}), got "
                f"{tuple(shape)}; add a leading batch axis for a single input"
            )

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            parts = [self.module(x[i : i + CHUNK]) for i in range(0, len(x), CHUNK)]
            out = torch.cat(parts) if parts else torch.zeros((0, *self.out_shape))
        return out.clone()  # a normal tensor, usable outside inference mode

    def __call__(self, x: Any) -> Any:
        if is_torch(x):
            self._check(tuple(x.shape))
            dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
            out = self._forward(x.detach().to(device="cpu", dtype=torch.float32))
            return out.to(device=x.device, dtype=dtype)
        arr = np.asarray(x)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise ValueError(f"{self.name}: input must be a numeric array, got dtype {arr.dtype}")
        self._check(arr.shape)
        out = self._forward(torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)))
        return out.numpy().astype(np.float64)


def _build(factory: ModelFactory) -> ModelFn:
    return factory()
