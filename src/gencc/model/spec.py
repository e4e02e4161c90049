"""Where a model comes from: an import path "package.module:attr", a saved file (torch.export `.pt2`, TorchScript),
an in-memory torch module or callable, and the sha256 that names its weights. Used by
`gencc.model.as_model`; torch is imported only for torch models.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from ..errors import ModelError

#: file suffixes read with torch.export.load; every other file is read as TorchScript (torch.jit.load)
EXPORT_SUFFIXES = (".pt2",)


def is_torch_module(obj: Any) -> bool:
    """True for a torch.nn.Module (TorchScript and exported modules included), checked without importing torch."""
    return _is_module_type(type(obj))


@functools.lru_cache(maxsize=256)  # asked once per job of its f's type
def _is_module_type(t: type) -> bool:
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module" for c in t.__mro__)


def weights_sha256(module: Any) -> str:
    """sha256 over a module's state_dict: each entry's name, dtype, shape and raw bytes, in name order."""
    import torch

    h = hashlib.sha256()
    for key, value in sorted(module.state_dict().items()):
        if not isinstance(value, torch.Tensor):
            h.update(f"{key}={value!r};".encode())
            continue
        t = value.detach().cpu().contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def code_sha256(fn: Any) -> str:
    """sha256 naming a callable without weights: its code (bytecode and constants) or, failing that, its name."""
    call = vars(type(fn)).get("__call__")
    code = getattr(fn, "__code__", None) or getattr(call, "__code__", None)
    h = hashlib.sha256()
    if code is not None:
        h.update(code.co_code)
        h.update(repr(code.co_consts).encode())
    h.update(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}".encode())
    return h.hexdigest()


def looks_like_file(spec: str) -> bool:
    """A spec naming a file: it exists, or it has a path separator or a model file's suffix and no ':attr'."""
    if os.path.exists(spec):
        return True
    module, sep, attr = spec.rpartition(":")
    if sep and module and attr.replace(".", "").replace("_", "a").isalnum():
        return False
    return os.sep in spec or "/" in spec or Path(spec).suffix in (*EXPORT_SUFFIXES, ".pt", ".pth", ".ts", ".jit")


def import_attr(spec: str, root: str | None = None) -> Any:
    """The object named by "package.module:attr" (attr may be dotted), imported with `root` (default: the current
    directory) first on sys.path; a ModelError (a ValueError) saying what went wrong, where it looked, and the fix
    (a file's name "mymodel.py:make" is answered with its module form "mymodel:make")."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ModelError(f"model spec {spec!r}: expected an import path 'package.module:attr' or a model file "
                         "(.pt2 from torch.export.save, or a TorchScript file from torch.jit.save)")
    root = os.path.abspath(root or os.getcwd())
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        raise ModelError(_file_not_module(spec, module_name, attr, root))
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            what = f"{missing}.py" if "." not in module_name else f"the package {module_name.split('.')[0]}"
            raise ModelError(f"model spec {spec!r}: no module {missing!r} in {_folder(root)} or on PYTHONPATH; "
                             f"run from the folder holding {what}, or add that folder to PYTHONPATH") from None
        raise ModelError(f"model spec {spec!r}: importing {module_name!r} raised {one_line(err)}"
                         f"{raised_at(err, root)}") from None
    except Exception as err:  # noqa: BLE001 (a user's module may raise anything while it is imported)
        raise ModelError(f"model spec {spec!r}: importing {module_name!r} raised {one_line(err)}"
                         f"{raised_at(err, root)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ModelError(f"model spec {spec!r}: {module_name} has no attribute {attr!r}") from None
    return obj


def _folder(root: str) -> str:
    """`root` in words: "the current folder (/home/me/proj)" or "the folder /x"."""
    return f"the current folder, {root}," if root == os.path.abspath(os.getcwd()) else f"the folder {root}"


def _file_not_module(spec: str, module_name: str, attr: str, root: str) -> str:
    """Why a spec naming a file ("mymodel.py:make", "models/mymodel.py:make") is no import path, and its
    module form: "mymodel:make", imported from the folder holding mymodel.py."""
    path = Path(root, os.path.expanduser(module_name))
    stem = path.stem if path.suffix == ".py" else path.name
    fix = f"{stem}:{attr}"
    if not path.is_file() and path.suffix == ".py":
        return (f"model spec {spec!r}: an import path names a module, not a file, and there is no {path.name} in "
                f"{_folder(str(path.parent))}; write {fix!r}, run from the folder holding {path.name}")
    if path.parent == Path(root):
        return (f"model spec {spec!r}: an import path names a module, not a file: write {fix!r} (imported from "
                f"{_folder(root).rstrip(',')}, which holds {path.name})")
    return (f"model spec {spec!r}: an import path names a module, not a file: write {fix!r} and run from {path.parent} "
            f"(the folder holding {path.name}), or add that folder to PYTHONPATH")


def one_line(err: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = str(err).strip().splitlines() or [""]
    text = lines[0] if len(lines[0]) <= 300 else lines[0][:300] + " ..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def raised_at(err: BaseException, root: str | None = None) -> str:
    """Where in the user's code `err` was raised, as " (at mymodel.py:12 in make)": the innermost frame of its
    traceback in a file under `root` (default: the current directory), else the innermost one outside Python's
    and the installed packages' folders (gencc's and torch's); "" when there is none."""
    import sysconfig
    import traceback

    frames = traceback.extract_tb(err.__traceback__) if err.__traceback__ is not None else []
    base = os.path.abspath(root or os.getcwd())
    theirs = tuple(os.path.abspath(p) + os.sep for p in {*(sysconfig.get_paths()[k] for k in ("stdlib", "purelib",
                   "platlib")), str(Path(__file__).resolve().parent.parent)})
    mine = [f for f in frames if os.path.abspath(f.filename).startswith(base + os.sep)] or [
        f for f in frames if not os.path.abspath(f.filename).startswith(theirs) and not f.filename.startswith("<")]
    if not mine:
        return ""
    f = mine[-1]
    name = os.path.abspath(f.filename)
    shown = os.path.relpath(name, base) if name.startswith(base + os.sep) else f.filename
    return f" (at {shown}:{f.lineno} in {f.name})"


def _zero_arg(obj: Any) -> bool:
    """Whether `obj` can be called with no arguments (a factory) rather than needing a batch."""
    if isinstance(obj, type):
        return True
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values())


def resolve_import(spec: str, root: str | None = None) -> Any:
    """What an import path gives: a torch module (an instance, or built by a zero-argument factory or class)
    or a batch callable."""
    obj = import_attr(spec, root)
    if is_torch_module(obj):
        return obj
    if not callable(obj):
        raise ModelError(f"model spec {spec!r} names a {type(obj).__name__}, not a torch module, a zero-argument "
                         "factory returning one, or a batch callable")
    if _zero_arg(obj):
        try:
            built = obj()
        except Exception as err:  # noqa: BLE001 (a user's factory may raise anything: old weights, a missing file)
            raise ModelError(f"model {spec!r}: the factory raised {one_line(err)}{raised_at(err, root)}") from None
        if not (is_torch_module(built) or callable(built)):
            raise ModelError(f"model spec {spec!r}: the factory returned a {type(built).__name__}, not a torch "
                             "module or a callable")
        return built
    return obj


def load_file(path: str | os.PathLike) -> tuple[Any, Any]:
    """(module, exported program or None) from a torch.export `.pt2` or a TorchScript file, on the CPU."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file {str(path)!r} does not exist (or is a folder)")
    if path.suffix in EXPORT_SUFFIXES:
        try:
            ep = torch.export.load(str(path))
        except Exception as err:  # a corrupt or foreign file: torch raises many kinds
            raise ModelError(f"{path} is not a program saved by torch.export.save ({type(err).__name__}: "
                             f"{str(err)[:200]})") from None
        return ep.module(), ep
    try:
        with warnings.catch_warnings():  # torch deprecates TorchScript; the user chose it
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path), map_location="cpu"), None
    except Exception as err:
        raise ModelError(f"{path} is not a TorchScript file ({type(err).__name__}: {str(err)[:160]}); save the "
                         "model with torch.jit.save, or torch.export.save as .pt2, or give an import path "
                         "'package.module:attr'") from None


def export_input_shape(ep: Any) -> tuple[tuple[int, ...] | None, int | None]:
    """(input shape without the batch axis, fixed batch size or None) of an exported program's first input."""
    shapes = [n.meta["val"].shape for n in ep.graph.nodes
              if n.op == "placeholder" and n.name in set(ep.graph_signature.user_inputs) and "val" in n.meta]
    if len(shapes) != 1:
        raise ValueError(f"an exported model must take one input tensor (a batch), this one takes {len(shapes)}")
    dims = list(shapes[0])
    if not dims:
        raise ValueError("an exported model's input must have a batch axis")
    rest = tuple(int(d) for d in dims[1:]) if all(isinstance(d, int) for d in dims[1:]) else None
    return rest, dims[0] if isinstance(dims[0], int) else None
