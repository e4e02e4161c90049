"""ParM parity models for any torch model (`gencc.as_model`): trained from the user's training inputs, saved
with a sha256 and metadata, refused when they do not match the model, k or their weights.

    meta = train_parity_model(model, X, k=2, out="parity.pt")      # writes parity.pt and parity.json
    parity = load_parity_file("parity.pt", model, k=2)             # checked; a batched Model with .k, .packed

The parity model has the user's architecture (a deep copy, started from the user's weights) and is trained
(MSE, `_parity.train_loop`, the built-in workloads' loop and settings) so that F_P(x_1 + ... + x_k) ~ f(x_1) +
... + f(x_k) on random k-tuples of the training inputs. Packed (`packed=True`): F_P takes the k members stacked;
the first layer (a Conv or Linear applied to the input or its flattening) gets k times the input channels,
freshly initialised (from the user's weights repeated, the members' channels stay alike and the model stays f
of the sum: see `_parity.PACKED`), the rest starts from the user's weights. Training is resumable: a checkpoint
beside the output (`<out>.ckpt`) is written after every epoch and a rerun with the same settings continues it.
"""

from __future__ import annotations

import copy
import io
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._util.validate import check_int
from ..model import Model, as_model
from ..model.spec import file_sha256
from ._cache import atomic_write, read_json, write_json
from ._parity import PARITY_TRAIN, PackedParity, check_k, held_out, train_loop
from ._torch import training_threads

#: the metadata's format tag
FORMAT = "gencc-parity/1"
#: the default epochs: PARITY_TRAIN's (40 epochs of 8192 k-tuples: about 15 s for a digits-sized CNN on one core)
EPOCHS = PARITY_TRAIN["epochs"]
#: fewest training inputs (a tenth, at least k, is held out for the reconstruction figures)
MIN_INPUTS = 20
_LAYERS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)


def meta_path(out: str | os.PathLike) -> Path:
    """The metadata JSON beside a parity weights file: `parity.pt` -> `parity.json`."""
    return Path(out).with_suffix(".json")


def checkpoint_path(out: str | os.PathLike) -> Path:
    return Path(out).with_suffix(".ckpt")


def _torch_module(model: Model, what: str) -> torch.nn.Module:
    if model.module is None:
        raise ValueError(f"{what} needs a torch model (an nn.Module, an import path to one, or a .pt2 / TorchScript "
                         f"file); {model.name} is a plain callable")
    return model.module


def _first_layer(module: torch.nn.Module, in_shape: tuple[int, ...]) -> tuple[str, torch.nn.Module]:
    """(name, layer) of the first Conv / Linear the input reaches, refused unless it sees the input itself
    (a Conv: (B, C, ...); a Linear: the flattened input)."""
    seen: list[tuple[str, torch.nn.Module, tuple[int, ...]]] = []
    hooks = [m.register_forward_pre_hook(lambda m, a, n=n: seen.append((n, m, tuple(a[0].shape))) if not seen
                                         else None)
             for n, m in module.named_modules() if isinstance(m, _LAYERS)]
    try:
        ref = next(iter(module.parameters()))
        with torch.no_grad():
            module(torch.zeros((1, *in_shape), dtype=ref.dtype, device=ref.device))
    finally:
        for h in hooks:
            h.remove()
    why = ("--packed-parity needs a model whose first layer is a Conv or Linear applied to the input (or its "
           "flattening)")
    if not seen:
        raise ValueError(f"{why}; no Conv or Linear layer ran")
    name, layer, shape = seen[0]
    if isinstance(layer, torch.nn.Linear):
        if shape != (1, math.prod(in_shape)):
            raise ValueError(f"{why}; its first Linear layer {name!r} sees shape {shape[1:]}, not the flattened input")
    elif shape != (1, *in_shape) or layer.groups != 1:
        raise ValueError(f"{why}; its first Conv layer {name!r} sees shape {shape[1:]} (groups {layer.groups}), not "
                         f"the input {in_shape}")
    return name, layer


def parity_module(model: Model, k: int, packed: bool, seed: int = 0) -> torch.nn.Module:
    """A fresh parity module for `model`: a deep copy of its module (its weights); packed, with the first layer
    widened k times (freshly initialised with `seed`) and wrapped in `_parity.PackedParity`."""
    base = _torch_module(model, "a parity model")
    if model.fixed_batch:
        raise ValueError(f"{model.name} was exported for batches of exactly {model.fixed_batch}: export it with a "
                         "dynamic batch axis (torch.export.Dim) to train a parity model")
    module = _copy(base)
    if not packed:
        return module
    if model.in_shape is None:
        raise ValueError("a packed parity model needs the model's input shape (give input_shape or data)")
    if isinstance(module, torch.jit.ScriptModule):
        raise ValueError("--packed-parity needs an nn.Module whose layers can be replaced, not a TorchScript module")
    name, layer = _first_layer(module, model.in_shape)
    torch.manual_seed(seed)
    if isinstance(layer, torch.nn.Linear):
        new: torch.nn.Module = torch.nn.Linear(k * layer.in_features, layer.out_features, layer.bias is not None)
    else:
        new = type(layer)(k * layer.in_channels, layer.out_channels, layer.kernel_size, stride=layer.stride,
                          padding=layer.padding, dilation=layer.dilation, bias=layer.bias is not None,
                          padding_mode=layer.padding_mode)
    new = new.to(device=layer.weight.device, dtype=layer.weight.dtype)
    parent_name, _, attr = name.rpartition(".")
    setattr(module.get_submodule(parent_name) if parent_name else module, attr, new)
    return PackedParity(module, k)


def _copy(module: torch.nn.Module) -> torch.nn.Module:
    """A trainable copy: deepcopy, or for TorchScript a save and load (deepcopy's parameters are not leaves)."""
    if isinstance(module, torch.jit.ScriptModule):
        ref = next(iter(module.parameters()), None)
        buf = io.BytesIO()
        with warnings.catch_warnings():  # torch deprecates TorchScript; the user chose it
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(module, buf)
            buf.seek(0)
            return torch.jit.load(buf, map_location=ref.device if ref is not None else "cpu")
    return copy.deepcopy(module)


def _tensor(X: np.ndarray, module: torch.nn.Module) -> torch.Tensor:
    ref = next(iter(module.parameters()), None)
    dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.float32
    return torch.as_tensor(np.ascontiguousarray(X), dtype=dtype, device=ref.device if ref is not None else "cpu")


def _settings(k: int, packed: bool, epochs: int, per_epoch: int, seed: int) -> dict[str, Any]:
    return {**PARITY_TRAIN, "epochs": epochs, "per_epoch": per_epoch, "seed": seed, "k": k,
            **({"pack": True} if packed else {})}


def train_parity_model(model: Any, X: Any, k: int, out: str | os.PathLike, *, packed: bool = False,
                       epochs: int = EPOCHS, per_epoch: int = PARITY_TRAIN["per_epoch"], seed: int = 0,
                       progress: bool = True, resume: bool = True) -> dict[str, Any]:
    """Train the parity model of `model` (anything `gencc.as_model` takes) for k on training inputs X (n, *in
    shape); write its weights to `out` and its metadata to `meta_path(out)`; return the metadata (k, packed, the
    model's identity, the weights' sha256, held-out reconstruction figures under "held_out", training seconds).
    A tenth of X (at least k rows) is held out. Resumes `checkpoint_path(out)` when its settings match."""
    model = as_model(model)
    k = check_k(k)
    epochs = check_int("epochs", epochs, 1)
    per_epoch = check_int("per_epoch", per_epoch, 1)
    Xn = np.asarray(X, dtype=np.float64)
    if Xn.ndim < 2 or len(Xn) < max(MIN_INPUTS, 2 * k):
        raise ValueError(f"parity training needs at least {max(MIN_INPUTS, 2 * k)} training inputs (n, *input shape), "
                         f"got shape {Xn.shape}")
    if not np.isfinite(Xn).all():
        raise ValueError("the training inputs contain NaN or inf")
    model(Xn[:2])  # the input shape (or a clear error) before any slow work
    out = Path(out)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(Xn))
    n_hold = max(k, len(Xn) // 10)
    X_hold, X_train = Xn[perm[:n_hold]], Xn[perm[n_hold:]]
    hp = _settings(k, packed, epochs, per_epoch, seed)
    key = {"model": model.identity, "settings": hp, "n_train": len(X_train)}
    ckpt = checkpoint_path(out)
    state = None
    if resume and ckpt.exists():
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)
        state = saved["state"] if saved.get("key") == key else None
    t0 = time.perf_counter()
    with training_threads():
        base = _torch_module(model, "a parity model")
        module = parity_module(model, k, packed, seed)
        Xt = _tensor(X_train, base)
        with torch.no_grad():
            F = torch.cat([base(Xt[i : i + 4096]) for i in range(0, len(Xt), 4096)]).detach()

        def save(s: dict[str, Any]) -> None:
            atomic_write(ckpt, lambda tmp: torch.save({"key": key, "state": s}, tmp))

        label = f"parity model of {model.name} (k={k}{', packed' if packed else ''})"
        if state is not None and progress:
            print(f"resuming from {ckpt} at epoch {state['epoch']} of {epochs}")
        module = train_loop(module, Xt, F, k, hp, progress, label, state=state, save=save)
        figures = held_out(module, base, _tensor(X_hold, base), k)
    seconds = time.perf_counter() - t0
    atomic_write(out, lambda tmp: torch.save(module.state_dict(), tmp))
    meta = {"format": FORMAT, "model": model.identity, "k": k, "packed": bool(packed), "weights": out.name,
            "weights_sha256": file_sha256(out), "settings": hp, "held_out": figures, "n_train": len(X_train),
            "n_held_out": n_hold, "in_shape": list(model.in_shape), "out_shape": list(model.out_shape),
            "train_seconds": round(seconds, 3), "resumed": state is not None, "torch": torch.__version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_json(meta_path(out), meta)
    ckpt.unlink(missing_ok=True)
    return meta


def read_parity_meta(path: str | os.PathLike, k: int | None = None) -> dict[str, Any]:
    """The metadata of parity weights `path`, checked against the file (sha256) and `k`; no model needed."""
    path = Path(path)
    js = meta_path(path)
    if not path.is_file():
        raise ValueError(f"parity file {path} does not exist")
    if not js.is_file():
        raise ValueError(f"parity file {path} has no metadata {js.name} beside it (made by gencc parity train)")
    try:
        meta = read_json(js)
    except ValueError as err:
        raise ValueError(f"{js} is not valid JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{js} is not gencc parity metadata (format {FORMAT})")
    sha = file_sha256(path)
    if sha != meta.get("weights_sha256"):
        raise ValueError(f"parity weights {path} have sha256 {sha[:12]}, their metadata says "
                         f"{str(meta.get('weights_sha256'))[:12]}: the file changed or is not the one trained")
    if k is not None and int(meta["k"]) != int(k):
        raise ValueError(f"parity file {path} was trained for k={meta['k']}; this scheme needs k={k}")
    return meta


def load_parity_file(path: str | os.PathLike, model: Any, k: int | None = None,
                     packed: bool | None = None) -> Model:
    """The parity model saved at `path` for `model`, refused (ValueError) when it was made for another model
    (identity), another k or packing, or when its weights do not match their metadata. A batched Model with
    `k`, `packed`, `info` (the metadata) and `weights_path`; its factory is picklable."""
    model = as_model(model)
    meta = read_parity_meta(path, k)
    if meta["model"].rpartition("@sha256:")[2] != model.sha256:  # the weights decide, not the spec's spelling
        raise ValueError(f"parity file {path} was trained for model {meta['model']}, not {model.identity}")
    if packed is not None and bool(meta["packed"]) != bool(packed):
        raise ValueError(f"parity file {path} is {'' if meta['packed'] else 'not '}packed; "
                         f"{'packed' if packed else 'a plain'} parity model was asked for")
    return ParityFileFactory(str(Path(path).resolve()), model.factory, int(meta["k"]), bool(meta["packed"]),
                             meta["weights_sha256"])(model)


class ParityFileFactory:
    """Picklable factory of a saved parity model: the file's path and the model's factory travel."""

    def __init__(self, path: str, model_factory: Any, k: int, packed: bool, sha256: str) -> None:
        self.path, self.model_factory, self.k, self.packed, self.sha256 = path, model_factory, k, packed, sha256

    def __call__(self, model: Model | None = None) -> Model:
        meta = read_json(meta_path(self.path))
        model = as_model(model if model is not None else self.model_factory(), input_shape=meta["in_shape"])
        if file_sha256(self.path) != self.sha256:
            raise RuntimeError(f"parity weights {self.path} changed since the factory was made")
        module = parity_module(model, self.k, self.packed, int(meta["settings"]["seed"]))
        module.load_state_dict(torch.load(self.path, map_location="cpu", weights_only=True))
        in_shape = (self.k, *model.in_shape) if self.packed else model.in_shape
        parity = as_model(module, input_shape=in_shape, output_shape=model.out_shape,
                          name=f"parity-k{self.k}{'-packed' if self.packed else ''}({model.name})")
        parity.factory = self
        parity.k, parity.packed, parity.info, parity.weights_path = self.k, self.packed, meta, Path(self.path)
        return parity
