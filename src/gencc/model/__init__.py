"""Bring your own model: what a user has, as one batched `Model` gencc runs, serves and trains parity models for.

    from gencc.model import as_model
    model = as_model(my_module)                 # a torch.nn.Module, a batch callable, "pkg.mod:attr", a .pt2 file
    Y = model(X)                                # (B, *in_shape) -> (B, *out_shape); numpy in, float64 numpy out

The package's parts: `core` (`Model`), `adapt` (`as_model`, `resolve`, the picklable factories), `spec` (where a
model comes from: an import path, a saved file, the sha256 that names its weights), `data` (input files and
shapes), `call` (the batch calling convention every front end uses: `apply_batch`, `apply_one`) and `load`
(`load_model`: a model loaded for a command and tried once, failures as `gencc.errors.ModelError`).
"""

from ..errors import ModelError
from .adapt import ObjectFactory, SpecFactory, as_model, from_spec, resolve, wrap_batched
from .call import apply_batch, apply_one
from .core import Model
from .data import load_inputs, parse_shape
from .load import load_model

__all__ = [
    "Model", "ModelError", "ObjectFactory", "SpecFactory", "apply_batch", "apply_one", "as_model", "from_spec",
    "load_inputs", "load_model", "parse_shape", "resolve", "wrap_batched",
]
