"""`Model`: a user's batched model with known shapes, a picklable factory and an identity (name and weights
sha256). `gencc.model.as_model` makes one of what a user has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._util.arrays import is_torch, to_numpy

#: rows per forward pass of a torch module (bounds memory for very large batches)
CHUNK = 8192


def check_shape(value: Any, what: str) -> tuple[int, ...] | None:
    """`value` (the shape of one input or output, without the batch axis) as a tuple of positive ints, or None."""
    if value is None:
        return None
    try:
        shape = tuple(int(d) for d in value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a sequence of positive integers, got {value!r}") from None
    if not shape or min(shape) < 1:
        raise ValueError(f"{what} must be a non-empty sequence of positive integers, got {value!r}")
    return shape


class Model:
    """A batched model: (B, *in_shape) -> (B, *out_shape). numpy in gives float64 numpy out; a torch tensor in
    gives a tensor out on the input's device and in its float dtype. A torch module runs in eval mode under
    no_grad on its own device and dtype. Raises a ValueError for a batch of the wrong shape and for non-finite
    outputs. Pickling sends the factory."""

    batched = True

    def __init__(self, fn: Callable, *, name: str, sha256: str, factory: Callable[[], Model],
                 in_shape: tuple[int, ...] | None = None, out_shape: tuple[int, ...] | None = None,
                 module: Any = None, fixed_batch: int | None = None, per_row: bool = False) -> None:
        self.fn, self.name, self.sha256, self.factory = fn, name, sha256, factory
        self.module, self.fixed_batch, self.per_row = module, fixed_batch, per_row
        self._in, self._out = in_shape, out_shape
        if module is not None:
            import torch

            try:
                module.eval()
            except Exception:  # noqa: BLE001 (an exported module may refuse eval(); it has no train mode then)
                pass
            ref = next(iter(module.parameters()), None)
            if ref is None:
                ref = next(iter(module.buffers()), None)
            self.device = ref.device if ref is not None else torch.device("cpu")
            self.dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.float32

    @property
    def identity(self) -> str:
        """The model's name and the sha256 of its weights (of the file, for a saved file)."""
        return f"{self.name}@sha256:{self.sha256}"

    @property
    def in_shape(self) -> tuple[int, ...] | None:
        """The shape of one input (None until declared or read from the first call)."""
        return self._in

    @property
    def out_shape(self) -> tuple[int, ...] | None:
        """The shape of one output: declared, seen, or found by one call on a zero input once in_shape is known."""
        if self._out is None and self._in is not None:
            self(np.zeros((1, *self._in)))
        return self._out

    def __reduce__(self) -> tuple:
        return (_rebuild, (self.factory, self._in, self._out))

    def __repr__(self) -> str:
        return f"Model({self.identity[:len(self.name) + 20]}..., in_shape={self._in}, out_shape={self._out})"

    def _check_input(self, shape: tuple[int, ...]) -> None:
        if len(shape) < 1:
            raise ValueError(f"{self.name}: expected a batch (B, *input shape), got a scalar")
        if self._in is None:
            if len(shape) < 2:
                raise ValueError(f"{self.name}: expected a batch (B, *input shape), got shape {shape}; add a "
                                 "leading batch axis for a single input")
            self._in = tuple(int(d) for d in shape[1:])
        elif tuple(shape[1:]) != self._in:
            raise ValueError(f"{self.name}: expected a batch of shape (B, {', '.join(map(str, self._in))}), got "
                             f"{tuple(shape)}; add a leading batch axis for a single input")

    def _forward(self, x: Any) -> Any:
        import torch

        x = x.detach().to(device=self.device, dtype=self.dtype)
        step = self.fixed_batch or CHUNK
        parts = []
        with torch.no_grad():
            for i in range(0, len(x), step):
                xi = x[i : i + step]
                if self.fixed_batch and len(xi) < step:  # an export with a fixed batch size: pad the last chunk
                    pad = torch.zeros((step - len(xi), *xi.shape[1:]), dtype=xi.dtype, device=xi.device)
                    parts.append(self.fn(torch.cat([xi, pad]))[: len(xi)])
                else:
                    parts.append(self.fn(xi))
        if not parts:
            return torch.zeros((0, *(self._out or ())), dtype=self.dtype)
        return torch.cat(parts).detach()

    def __call__(self, X: Any) -> Any:
        torch_in = is_torch(X)
        if not torch_in:
            X = np.asarray(X)
            if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
                raise ValueError(f"{self.name}: input must be a numeric array, got dtype {X.dtype}")
        self._check_input(tuple(X.shape))
        if self.module is not None:
            import torch

            x = X if torch_in else torch.from_numpy(np.ascontiguousarray(X))
            out: Any = self._forward(x)
        elif self.per_row:
            out = np.stack([np.asarray(to_numpy(self.fn(X[i])), dtype=float) for i in range(len(X))])
        else:
            out = self.fn(X)
        shape = tuple(out.shape) if hasattr(out, "shape") else np.shape(out)
        if len(shape) == 0 or shape[0] != len(X):
            got = "a scalar" if len(shape) == 0 else f"{shape[0]} outputs"
            raise ValueError(f"{self.name} returned {got} for {len(X)} inputs: a model must return one row per input")
        if self._out is None:
            self._out = tuple(int(d) for d in shape[1:])
        elif tuple(shape[1:]) != self._out:
            raise ValueError(f"{self.name} returned outputs of shape {tuple(shape[1:])}, expected {self._out}")
        if torch_in:
            return self._as_torch(out, X)
        arr = np.asarray(to_numpy(out), dtype=np.float64)
        if not np.isfinite(arr).all():
            raise ValueError(f"{self.name} returned non-finite outputs (NaN or inf) for "
                             f"{int((~np.isfinite(arr.reshape(len(arr), -1))).any(axis=1).sum())} of {len(arr)} inputs")
        return arr

    def _as_torch(self, out: Any, X: Any) -> Any:
        import torch

        dtype = X.dtype if X.is_floating_point() else torch.get_default_dtype()
        t = out.detach() if is_torch(out) else torch.as_tensor(np.asarray(out))
        t = t.to(device=X.device, dtype=dtype)
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{self.name} returned non-finite outputs (NaN or inf)")
        return t


def _rebuild(factory: Callable[[], Model], in_shape: Any, out_shape: Any) -> Model:
    model = factory()
    model._in = model._in or in_shape
    model._out = model._out or out_shape
    return model
