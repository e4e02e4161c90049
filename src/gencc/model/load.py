"""A user's model loaded for a command (serve, run, parity train): built and tried once, before any slow work.

    model, X = load_model("mypkg.models:make", input_shape="3,10", data="train.npy")

Whatever fails is a `gencc.errors.ModelError` (a ValueError) naming the spec and what failed: the import or the
factory, the input shape, the data file, or the model's output on one probe batch. `ModelError.source` says which
of the user's inputs to fix ("model", "input_shape" or "data"), so a command line can name its option.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from .adapt import as_model
from .core import Model
from .data import load_inputs, parse_shape
from .spec import one_line, raised_at

#: rows of the probe batch a model is tried on when it is loaded
PROBE_ROWS = 2


def load_model(spec: str, input_shape: str | Sequence[int] | None = None,
               data: str | os.PathLike | None = None) -> tuple[Model, np.ndarray | None]:
    """(the Model of `spec`, its inputs from `data` or None), checked once: the model is built (an import path's
    factory called, a file read), then run on a probe batch of `input_shape` ("C,H,W" or a sequence; default:
    an exported program's, else read from `data`) and on the first rows of `data`. A `ModelError` naming the spec
    and what failed; its `source` is "model", "input_shape" or "data"."""
    shape_text = None
    shape = None
    if input_shape is not None:
        shape_text = input_shape if isinstance(input_shape, str) else ",".join(str(d) for d in input_shape)
        try:
            shape = parse_shape(shape_text)
        except ValueError as err:
            raise ModelError(f"model {spec!r}: {err}", "input_shape") from None
    try:
        model = as_model(spec, input_shape=shape)
    except ModelError:
        raise
    except ValueError as err:  # a shape that contradicts an exported program's
        raise ModelError(f"model {spec!r}: {err}", "input_shape" if "input_shape" in str(err) else "model") from None
    except Exception as err:  # noqa: BLE001 (loading a user's file or module may raise anything)
        raise ModelError(f"model {spec!r}: loading it raised {one_line(err)}{raised_at(err)}", "model") from None
    if model.in_shape is not None:
        given = shape_text is not None
        what = f"input shape {shape_text}" if given else f"its declared input shape {model.in_shape}"
        _probe(model, spec, np.random.default_rng(0).standard_normal((PROBE_ROWS, *model.in_shape)), what,
               "input_shape" if given else "model")
    X = None
    if data is not None:
        try:
            X = load_inputs(data, model.in_shape)
        except ValueError as err:
            raise ModelError(f"model {spec!r}: {err}", "data") from None
        _probe(model, spec, X[:PROBE_ROWS], f"inputs of shape {X.shape[1:]} from {os.fspath(data)}", "data")
    if model.in_shape is None:
        raise ModelError(f"model {spec!r}: its input shape is unknown: give the shape of one input (--input-shape "
                     "C,H,W) or training inputs (--data FILE.npy)", "input_shape")
    return model, X


def _probe(model: Model, spec: str, X: Any, what: str, source: str) -> None:
    """Run `model` on the batch X once; a ModelError naming the spec, the inputs and what the model raised."""
    try:
        model(X)
    except Exception as err:  # noqa: BLE001 (the user's model may raise anything on inputs it cannot take)
        raise ModelError(f"model {spec!r}: its output for {what} failed: {one_line(err)}{raised_at(err)}",
                         source) from None
