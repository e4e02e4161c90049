"""`gencc.model.as_model`: what a user has, as one batched model gencc can run, serve and train a parity model for.

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

from .core import Model, check_shape
from .spec import (
    code_sha256,
    export_input_shape,
    file_sha256,
    is_torch_module,
    load_file,
    looks_like_file,
    resolve_import,
    weights_sha256,
)


def _torch_model(module: Any, name: str, sha: str, factory: Callable, in_shape: Any, out_shape: Any,
                 fixed_batch: int | None = None) -> Model:
    return Model(module, name=name, sha256=sha, factory=factory, in_shape=in_shape, out_shape=out_shape,
                 module=module, fixed_batch=fixed_batch)


def from_spec(spec: str, input_shape: Any = None, output_shape: Any = None, *, root: str | None = None) -> Model:
    """The Model named by an import path "package.module:attr" or a model file (see `as_model`)."""
    in_shape, out_shape = check_shape(input_shape, "input_shape"), check_shape(output_shape, "output_shape")
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
    in_shape, out_shape = check_shape(input_shape, "input_shape"), check_shape(output_shape, "output_shape")
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
    if isinstance(getattr(obj, "model", None), Model):  # a gencc workload (or anything holding its Model)
        return as_model(obj.model, input_shape=in_shape, output_shape=out_shape)
    if not callable(obj):
        raise ValueError(f"cannot make a model of a {type(obj).__name__}: give a torch.nn.Module, a batch callable, "
                         "an import path 'package.module:attr' or a .pt2 / TorchScript file")
    if hasattr(obj, "factory") and hasattr(obj, "in_shape") and getattr(obj, "batched", False):
        return wrap_batched(obj, obj.factory, name or getattr(obj, "name", type(obj).__name__),
                            in_shape or obj.in_shape, out_shape or obj.out_shape, getattr(obj, "weights_path", None))
    label = name or f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    return Model(obj, name=label, sha256=code_sha256(obj), factory=ObjectFactory(obj, in_shape, out_shape, name),
                 in_shape=in_shape, out_shape=out_shape, per_row=getattr(obj, "batched", True) is False)


def wrap_batched(fn: Callable, factory: Callable, name: str, in_shape: Any, out_shape: Any,
                 weights: Any = None) -> Model:
    """A Model around a batched callable with known shapes and its own picklable factory (a gencc workload's
    function): the factory travels, and the sha256 is the weights file's (`weights`) or the callable's code's."""
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
