"""Analytic workloads: x sin x, a seeded random tanh MLP, and a degree-2 polynomial (for LCC).

Pure numpy, float64. A torch tensor input is computed through numpy and returned as a tensor on the input's
device, in its float dtype (non-float tensors give torch's default dtype).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._util.arrays import is_torch

N_TRAIN, N_TEST = 2000, 1000
XSINX_RANGE = (-3.0, 3.0)
TANH_SIZES = (8, 32, 32, 4)
TANH_SEED = 0
POLY_DIMS = (4, 3)
POLY_SEED = 0
DATA_SEED = 0


def _validate(name: str, x: Any, in_shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name}: input must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim != len(in_shape) + 1 or tuple(arr.shape[1:]) != in_shape:
        raise ValueError(
            f"{name}: expected a batch of shape (B, {', '.join(map(str, in_shape))}), got {tuple(arr.shape)}; "
            "add a leading batch axis for a single input"
        )
    return arr.astype(np.float64, copy=False)


class _Analytic:
    """Shared numpy/torch plumbing; subclasses define `name`, `in_shape`, `out_shape` and `_eval`."""

    batched = True
    name: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]

    def _eval(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, x: Any) -> Any:
        if is_torch(x):
            import torch

            out = self._eval(_validate(self.name, x.detach().cpu().numpy(), self.in_shape))
            dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
            return torch.as_tensor(out).to(device=x.device, dtype=dtype)
        return self._eval(_validate(self.name, x, self.in_shape))


@dataclass
class XSinX(_Analytic):
    """f(x) = x sin x, elementwise on (B, 1)."""

    name: str = "xsinx"
    in_shape: tuple[int, ...] = (1,)
    out_shape: tuple[int, ...] = (1,)

    def _eval(self, x: np.ndarray) -> np.ndarray:
        return x * np.sin(x)


@dataclass
class TanhMLP(_Analytic):
    """A random-weight tanh MLP: tanh hidden layers, linear output; weights N(0, 1/fan_in), biases N(0, 0.1^2)."""

    sizes: tuple[int, ...] = TANH_SIZES
    seed: int = TANH_SEED
    name: str = "tanh-mlp"
    weights: list[np.ndarray] = field(init=False, repr=False, compare=False)
    biases: list[np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.weights = [rng.standard_normal((a, b)) / np.sqrt(a) for a, b in zip(self.sizes[:-1], self.sizes[1:],
                                                                                   strict=True)]
        self.biases = [0.1 * rng.standard_normal(b) for b in self.sizes[1:]]
        self.in_shape = (self.sizes[0],)
        self.out_shape = (self.sizes[-1],)

    def _eval(self, x: np.ndarray) -> np.ndarray:
        h = x
        for i, (W, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ W + b
            if i < len(self.weights) - 1:
                h = np.tanh(h)
        return h


@dataclass
class Poly(_Analytic):
    """Degree-2 polynomial R^d -> R^m: f(x) = A (x * x) + B x + c, with A, B, c seeded standard normal."""

    dims: tuple[int, int] = POLY_DIMS
    seed: int = POLY_SEED
    name: str = "poly"
    degree: int = 2
    A: np.ndarray = field(init=False, repr=False, compare=False)
    B: np.ndarray = field(init=False, repr=False, compare=False)
    c: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        d, m = self.dims
        rng = np.random.default_rng(self.seed)
        self.A = rng.standard_normal((m, d))
        self.B = rng.standard_normal((m, d))
        self.c = rng.standard_normal(m)
        self.in_shape = (d,)
        self.out_shape = (m,)

    def _eval(self, x: np.ndarray) -> np.ndarray:
        return (x * x) @ self.A.T + x @ self.B.T + self.c


def _xsinx_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    lo, hi = XSINX_RANGE
    return rng.uniform(lo, hi, size=(n, 1))


def _normal_inputs(d: int) -> Any:
    return lambda rng, n: rng.standard_normal((n, d))


BUILDERS: dict[str, Any] = {"xsinx": XSinX, "tanh-mlp": TanhMLP, "poly": Poly}
INPUTS: dict[str, Any] = {
    "xsinx": _xsinx_inputs,
    "tanh-mlp": _normal_inputs(TANH_SIZES[0]),
    "poly": _normal_inputs(POLY_DIMS[0]),
}


@dataclass(frozen=True)
class AnalyticFactory:
    """Picklable builder of an analytic workload's callable."""

    name: str

    def __call__(self) -> _Analytic:
        return BUILDERS[self.name]()


def inputs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(X_train, X_test) for an analytic workload, from fixed seeds: N_TRAIN and N_TEST rows."""
    draw = INPUTS[name]
    Xtr = draw(np.random.default_rng([DATA_SEED, 0]), N_TRAIN)
    Xte = draw(np.random.default_rng([DATA_SEED, 1]), N_TEST)
    return Xtr, Xte
