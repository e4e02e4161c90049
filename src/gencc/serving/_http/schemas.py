"""The request bodies of the HTTP front door as pydantic models, and the strict parser that uses them.

A body is UTF-8 JSON whose numbers are JSON numbers only (no booleans, no strings such as "0.5", no NaN or
Infinity literals), nested exactly as the model's input shape, each finite in float32, the dtype the workers
compute in (1e39 is finite in float64 but inf in float32). Parsing runs in pydantic-core's JSON parser, which
stops deep nesting at a fixed recursion limit, so a 10,000-deep body costs microseconds. The same models give
the OpenAPI schema its request bodies, limits included, so schema fuzzers reach the real inputs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ...errors import BadRequest

#: the largest finite float32; a number beyond it would reach the workers as inf
F32_MAX = float(np.finfo(np.float32).max)
Number = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-F32_MAX, le=F32_MAX)]


def _nested(shape: tuple[int, ...]) -> Any:
    t: Any = Number
    for n in reversed(shape):
        t = Annotated[list[t], Field(min_length=n, max_length=n)]
    return t


@dataclass(frozen=True)
class RequestSchemas:
    """The models of POST /predict (`one`: {"input": x}) and POST /predict/batch (`batch`: {"inputs": [x, ...]})
    for inputs of `in_shape`, at most `max_batch` per batch."""

    in_shape: tuple[int, ...]
    max_batch: int
    one: type[BaseModel]
    batch: type[BaseModel]

    def openapi(self, model: type[BaseModel]) -> dict[str, Any]:
        """The `openapi_extra` of a route whose JSON body is `model`."""
        return {"requestBody": {"required": True, "content": {"application/json": {
            "schema": model.model_json_schema()}}}}


def request_schemas(in_shape: tuple[int, ...], max_batch: int = 64) -> RequestSchemas:
    """The request models for a model taking inputs of `in_shape` (ValueError for an empty or non-positive shape
    or batch size)."""
    shape = tuple(int(n) for n in in_shape)
    if not shape or min(shape) < 1 or max_batch < 1:
        raise ValueError(f"need a non-empty input shape of positive sizes and max_batch >= 1, got {shape}, "
                         f"{max_batch}")
    config = ConfigDict(extra="forbid", strict=True)
    x = _nested(shape)
    one = create_model("PredictBody", __config__=config, input=(x, Field(description=f"one input of shape "
                                                                                      f"{list(shape)}")))
    batch = create_model("PredictBatchBody", __config__=config, inputs=(
        Annotated[list[x], Field(min_length=1, max_length=max_batch)],
        Field(description=f"1 to {max_batch} inputs, each of shape {list(shape)}")))
    return RequestSchemas(shape, int(max_batch), one, batch)


def _where(loc: tuple[Any, ...]) -> str:
    if not loc:
        return "the body"
    return f"'{loc[0]}'" + "".join(f"[{i}]" for i in loc[1:])


def _show(v: Any) -> str:
    try:
        s = json.dumps(v)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def explain(err: ValidationError, schemas: RequestSchemas, key: str) -> str:
    """One line naming the first problem pydantic found (and how many more there are)."""
    errors = err.errors(include_url=False)
    e = next((x for x in errors if x["type"] == "missing"), errors[0])  # a missing key before a stray one
    kind, where, shape = e["type"], _where(tuple(e["loc"])), list(schemas.in_shape)
    more = f" ({len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    example = f"{{\"{key}\": {'[<input>, ...]' if key == 'inputs' else '<nested list>'}}}"
    if kind == "json_invalid":
        why = str(e.get("ctx", {}).get("error", e["msg"]))
        if "recursion" in why:
            return f"the body nests too deep for JSON inputs of shape {shape} ({why})"
        return f"body must be UTF-8 JSON like {example} ({why})"
    if kind == "model_type":
        return f"body must be a JSON object with key '{key}'"
    if kind == "missing":
        return f"missing '{key}': send {example}, inputs of shape {shape}"
    if kind == "extra_forbidden":
        return f"unknown key {_where(tuple(e['loc']))}: the body takes only '{key}'{more}"
    if kind == "float_type" and isinstance(e.get("input"), (list, dict)):
        return (f"{where} nests deeper than inputs of shape {shape} (rank {len(shape)}): a number belongs there, "
                f"found {_show(e.get('input'))}{more}")
    if kind in ("float_type", "float_parsing"):
        return (f"{where} is the non-numeric value {_show(e.get('input'))}: send JSON numbers (not booleans, "
                f"strings or null){more}")
    if kind == "finite_number":
        return f"{where} is NaN, infinite or beyond float range: send finite numbers{more}"
    if kind in ("less_than_equal", "greater_than_equal"):
        return (f"{where} = {_show(e.get('input'))} is not finite in float32, the workers' dtype (|x| <= "
                f"{F32_MAX:.4g}){more}")
    if kind == "list_type":
        return f"{where} must be a list: inputs are nested lists of shape {shape} (found {_show(e.get('input'))})"
    if kind in ("too_short", "too_long"):
        n = e.get("ctx", {}).get("actual_length")
        if tuple(e["loc"]) == ("inputs",):
            return f"'inputs' must be a list of 1 to {schemas.max_batch} inputs, got {n}"
        return f"{where} has {n} items: this model takes inputs of shape {shape}"
    return f"{where}: {e['msg']}{more}"


def parse_one(body: bytes, schemas: RequestSchemas) -> np.ndarray:
    """The float32 input of a POST /predict body, or BadRequest (422) naming the problem. The model is the one
    check a request gets: nested exactly as the input shape, each number finite in float32."""
    try:
        m = schemas.one.model_validate_json(body)
    except ValidationError as e:
        raise BadRequest(422, explain(e, schemas, "input")) from None
    return np.asarray(m.input, dtype=np.float32)


def parse_batch(body: bytes, schemas: RequestSchemas) -> np.ndarray:
    """The float32 inputs (B, *in_shape) of a POST /predict/batch body, or BadRequest (422)."""
    try:
        m = schemas.batch.model_validate_json(body)
    except ValidationError as e:
        raise BadRequest(422, explain(e, schemas, "inputs")) from None
    return np.asarray(m.inputs, dtype=np.float32)


def body_bytes_bound(in_shape: tuple[int, ...], max_batch: int, per_number: int = 32) -> int:
    """A body size that any batch of `max_batch` inputs of `in_shape` fits in when each number is written in at
    most `per_number` characters (separators included), plus 4 KiB for keys and whitespace; at least 64 KiB."""
    return max(max_batch * math.prod(in_shape) * per_number + 4096, 64 * 1024)
