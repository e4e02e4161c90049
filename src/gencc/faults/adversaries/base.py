"""The base of the adversary models (gencc.adversaries): `Adversary`, the unit of magnitudes `spread`, and the
`Context` that plausible models read beyond the results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from ...codes.base import Code


@dataclass(frozen=True)
class Adversary:
    """Base: A corrupted workers, chosen uniformly among the returned ones."""

    A: int
    scale: float = 1.0

    name = "adversary"

    def __post_init__(self):
        if isinstance(self.A, bool) or int(self.A) != self.A or self.A < 0:
            raise ValueError(f"the number of adversaries A must be a non-negative integer, got {self.A!r}")
        if not (np.isfinite(self.scale) and self.scale >= 0):
            raise ValueError(f"adversary scale must be a finite non-negative number, got {self.scale!r}")

    @property
    def bound(self) -> int:
        """The number of wrong results the robust decode is told to expect."""
        return int(self.A)

    def describe(self) -> dict:
        return {"adversary": self.name, "A": int(self.A), "adv_scale": float(self.scale)}

    def corrupt(self, Y: np.ndarray, returned: np.ndarray, rng: np.random.Generator,
                code: Code | None = None, context: Context | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(corrupted copy of Y, sorted worker indices that were corrupted); Y[i] is worker returned[i].
        `context`: what the models of `NEEDS` read beyond the results (rows in the order of Y)."""
        if self.A > len(returned):
            raise ValueError(f"A={self.A} adversaries but only {len(returned)} workers returned")
        pos = self._choose(Y, returned, rng, code)
        Yc = np.array(Y, dtype=float, copy=True)
        if pos.size:
            ctx = _checked(context, self, len(Y)) if self.needs else context
            Yc[pos] = self._wrong(np.asarray(Y, dtype=float), pos, ctx, rng)
        return Yc, np.sort(np.asarray(returned)[pos])

    #: the `Context` fields this model reads
    needs: ClassVar[tuple[str, ...]] = ()

    def perturb_one(self, out: Any, unit: float, rng: np.random.Generator) -> np.ndarray:
        """One result `out` (any shape) made wrong on its own, magnitudes in `unit` (what fault injection
        calls, one result at a time); only for models with `per_result` (the others need the group)."""
        if not self.per_result:
            raise ValueError(f"adversary {self.name!r} needs the other results or a context: it cannot corrupt "
                             "one result on its own")
        out = np.asarray(out, dtype=float)
        return self._perturb(out.reshape(1, *out.shape), float(unit), rng)[0]

    @property
    def per_result(self) -> bool:
        """True when a result is made wrong from itself alone (`_perturb`, no `_wrong` or `_choose` of its own)."""
        cls = type(self)
        return not self.needs and cls._wrong is Adversary._wrong and cls._choose is Adversary._choose \
            and cls.corrupt is Adversary.corrupt and cls._perturb is not Adversary._perturb

    def _wrong(self, Y: np.ndarray, pos: np.ndarray, ctx: Context | None, rng: np.random.Generator) -> np.ndarray:
        """The wrong results of the rows `pos` of Y (n, ...): by default each row perturbed on its own."""
        return self._perturb(Y[pos].copy(), spread(Y), rng)

    def _choose(self, Y, returned, rng, code) -> np.ndarray:
        return np.sort(rng.choice(len(returned), size=int(self.A), replace=False))

    def _perturb(self, Ya: np.ndarray, s: float, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


def spread(Y: np.ndarray) -> float:
    """Standard deviation of the results over workers and coordinates (the unit of every magnitude)."""
    s = float(np.std(np.asarray(Y, dtype=float)))
    return s if s > 0 else 1.0


@dataclass(frozen=True)
class Context:
    """What a plausible adversary may read beyond the results, rows in the order of the results Y: `f` (the
    batched function), `inputs` (the returned workers' coded inputs), `other` (their results for another job),
    `stale` (a slightly different model, batched: an older checkpoint, a retrained copy)."""

    f: Callable | None = None
    inputs: Any = None
    other: Any = None
    stale: Callable | None = None


def _checked(ctx: Context | None, model: Adversary, n: int) -> Context:
    missing = [k for k in model.needs if ctx is None or getattr(ctx, k) is None]
    if missing:
        raise ValueError(f"adversary {model.name!r} needs context with {', '.join(missing)} "
                         "(gencc.adversaries.Context)")
    for k in ("inputs", "other"):
        v = getattr(ctx, k)
        if k in model.needs and len(v) != n:
            raise ValueError(f"context.{k} must hold one row per returned result ({n}), got {len(v)}")
    return ctx  # type: ignore[return-value]


def _as_rows(out: Any, like: np.ndarray) -> np.ndarray:
    out = np.asarray(out, dtype=float)
    if out.size != like.size:
        raise ValueError(f"a context model returned shape {out.shape} for results of shape {like.shape}")
    return out.reshape(like.shape)


