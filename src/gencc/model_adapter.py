"""`gencc.as_model`: what a user has, as one batched model gencc can run, serve and train a parity model for.

    model = gencc.as_model(my_module)                       # a torch.nn.Module: eval, no_grad, its device/dtype
    model = gencc.as_model("mypkg.models:net")              # an import path (instance, factory or batch callable)
    model = gencc.as_model("net.pt2")                       # torch.export.save's file, or a TorchScript file
    model = gencc.as_model(f, input_shape=(1, 8, 8))        # any callable on batches (numpy or torch)
    Y = model(X)                                            # numpy in: float64 numpy out; torch in: torch out

A Model knows its shapes (declared, or read from the first call: the input shape from the first batch, the
output shape from one call), has a picklable `factory` (the import path or file travels, not the weights) and
an `identity` (the spec's name and the sha256 of its weights) that parity files are checked against.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._arrays import is_torch, to_numpy
from .model_spec import (
    code_sha256,
    export_input_shape,
    file_sha256,
    is_torch_module,
    load_file,
    looks_like_file,
    resolve_import,
    weights_sha256,
)

#: rows per forward pass of a torch module (bounds memory for very large batches)
CHUNK = 8192


def _shape(value: Any, what: str) -> tuple[int, ...] | None:
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


def _torch_model(module: Any, name: str, sha: str, factory: Callable, in_shape: Any, out_shape: Any,
                 fixed_batch: int | None = None) -> Model:
    return Model(module, name=name, sha256=sha, factory=factory, in_shape=in_shape, out_shape=out_shape,
                 module=module, fixed_batch=fixed_batch)


def from_spec(spec: str, input_shape: Any = None, output_shape: Any = None, *, root: str | None = None) -> Model:
    """The Model named by an import path "package.module:attr" or a model file (see `as_model`)."""
    in_shape, out_shape = _shape(input_shape, "input_shape"), _shape(output_shape, "output_shape")
    root = os.path.abspath(root or os.getcwd())
    if looks_like_file(spec):
        path = os.path.abspath(os.path.join(root, os.path.expanduser(spec)))
        module, ep = load_file(path)
        sha = file_sha256(path)
        fixed = None
        if ep is not None:
            declared, fixed = export_input_shape(ep)
            if in_shape is not None and declared is not None and declared != in_shape:
                raise ValueError(f"{spec}: input_shape {in_shape} differs from the exported input shape {declared}")
            in_shape = in_shape or declared
        factory = SpecFactory(path, root, sha, in_shape, out_shape)
        return _torch_model(module, os.path.basename(path), sha, factory, in_shape, out_shape, fixed)
    obj = resolve_import(spec, root)
    if is_torch_module(obj):
        sha = weights_sha256(obj)
        return _torch_model(obj, spec, sha, SpecFactory(spec, root, sha, in_shape, out_shape), in_shape, out_shape)
    sha = code_sha256(obj)
    return Model(obj, name=spec, sha256=sha, factory=SpecFactory(spec, root, sha, in_shape, out_shape),
                 in_shape=in_shape, out_shape=out_shape, per_row=getattr(obj, "batched", True) is False)


def as_model(obj: Any, *, input_shape: Any = None, output_shape: Any = None, name: str | None = None) -> Model:
    """`obj` as a batched `Model` (see the module docstring).

    obj: a torch.nn.Module; a callable on batches (numpy or torch; one marked `batched = False` is called per
    input); an import path "package.module:attr", imported from the current directory and PYTHONPATH (attr: a
    module instance, a zero-argument factory or class returning one, or a batch callable); a file saved by
    torch.export.save (`.pt2`) or torch.jit.save (any other suffix); a gencc workload (`gencc.workloads.load`);
    or a Model (returned as it is unless shapes are given). input_shape / output_shape: the shape of one input /
    output without the batch axis (default: read from the first call, or from an exported program). name: the
    name in `identity` (default: the spec, or the module's class). The factory of an in-memory module pickles the
    module with its weights (its class must be importable where it is unpickled); an import path's or a file's
    factory carries only the spec.
    """
    in_shape, out_shape = _shape(input_shape, "input_shape"), _shape(output_shape, "output_shape")
    if isinstance(obj, Model):
        if in_shape is not None and obj.in_shape is not None and in_shape != obj.in_shape:
            raise ValueError(f"input_shape {in_shape} differs from the model's {obj.in_shape}")
        obj._in, obj._out = obj._in or in_shape, obj._out or out_shape
        return obj
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    if isinstance(obj, str):
        return from_spec(obj, in_shape, out_shape)
    if is_torch_module(obj):
        label = name or f"{type(obj).__module__}.{type(obj).__qualname__}"
        factory = ObjectFactory(obj, in_shape, out_shape, name)
        return _torch_model(obj, label, weights_sha256(obj), factory, in_shape, out_shape)
    if hasattr(obj, "f") and hasattr(obj, "X_train") and hasattr(obj, "factory"):  # a gencc workload
        return _wrap_builtin(obj.f, obj.factory, name or obj.name, obj.in_shape, obj.out_shape,
                             getattr(obj, "weights_path", None))
    if not callable(obj):
        raise ValueError(f"cannot make a model of a {type(obj).__name__}: give a torch.nn.Module, a batch callable, "
                         "an import path 'package.module:attr' or a .pt2 / TorchScript file")
    if hasattr(obj, "factory") and hasattr(obj, "in_shape") and getattr(obj, "batched", False):
        return _wrap_builtin(obj, obj.factory, name or getattr(obj, "name", type(obj).__name__),
                             in_shape or obj.in_shape, out_shape or obj.out_shape, getattr(obj, "weights_path", None))
    label = name or f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    return Model(obj, name=label, sha256=code_sha256(obj), factory=ObjectFactory(obj, in_shape, out_shape, name),
                 in_shape=in_shape, out_shape=out_shape, per_row=getattr(obj, "batched", True) is False)


def _wrap_builtin(fn: Callable, factory: Callable, name: str, in_shape: Any, out_shape: Any, weights: Any) -> Model:
    """A Model around a gencc workload's batched callable (its own factory travels)."""
    sha = file_sha256(weights) if weights is not None and os.path.exists(weights) else code_sha256(fn)
    return Model(fn, name=name, sha256=sha, factory=_BuiltinFactory(factory, name, sha), in_shape=tuple(in_shape),
                 out_shape=tuple(out_shape))


class _BuiltinFactory:
    """Picklable: a workload's factory, its result wrapped as a Model with the same name and sha256."""

    def __init__(self, factory: Callable, name: str, sha: str) -> None:
        self.factory, self.name, self.sha = factory, name, sha

    def __call__(self) -> Model:
        fn = self.factory()
        return Model(fn, name=self.name, sha256=self.sha, factory=self, in_shape=tuple(fn.in_shape),
                     out_shape=tuple(fn.out_shape))


def resolve(f: Any) -> Any:
    """f as the entry points (run, stream, simulate, serving, calibration) take it: a Model for a torch module, an
    import path, a model file or a workload; other callables (and None) unchanged."""
    if f is None or isinstance(f, Model) or (callable(f) and not is_torch_module(f)):
        return f
    return as_model(f)


@dataclass
class SpecFactory:
    """Picklable factory of a Model named by an import path or a file: the spec and the folder it is imported
    from travel, not the weights; it refuses a model whose weights differ from the ones it was made for (an
    unseeded factory, a changed file)."""

    spec: str
    root: str
    sha256: str
    input_shape: tuple[int, ...] | None = None
    output_shape: tuple[int, ...] | None = None

    def __call__(self) -> Any:
        model = from_spec(self.spec, self.input_shape, self.output_shape, root=self.root)
        if model.sha256 != self.sha256:
            raise RuntimeError(f"the model built from {self.spec!r} here has weights sha256 {model.sha256[:12]}, "
                               f"the factory was made for {self.sha256[:12]}: seed the factory or load saved "
                               "weights, so that every worker computes the same function")
        return model


@dataclass
class ObjectFactory:
    """Picklable factory of a Model around an in-memory torch module or callable: it holds the object itself,
    so pickling it pickles the module with its weights (its class must be importable where it is unpickled);
    each call returns a Model on a deep copy (a torch module) or on the same callable."""

    obj: Any
    input_shape: tuple[int, ...] | None = None
    output_shape: tuple[int, ...] | None = None
    spec: str | None = None
    options: dict = field(default_factory=dict)

    def __call__(self) -> Any:
        obj = copy.deepcopy(self.obj) if is_torch_module(self.obj) else self.obj
        return as_model(obj, input_shape=self.input_shape, output_shape=self.output_shape, name=self.spec,
                        **self.options)
