"""Adversary models: workers that return wrong but finite results (docs/design.md section 9), the one family of
wrong-result models in gencc.

`relative_noise(out, scale, rng)` is the per-result model of silent corruption (a bad accelerator, a mercurial
core): out + scale * rms(out) * z, z standard normal. The fault injection of jobs and serving applies it to the
result of each worker it corrupts; `RelativeNoise` applies it to A of the returned results.

Each model below corrupts A of the returned workers' results. Magnitudes are relative to `spread`, the standard
deviation of the honest results (over workers and output coordinates), so one model fits any f. A model
also states the bound a robust decode is told (`bound`, default A): `Honest(A)` corrupts nobody but tells
the decoder to expect up to A, which is how false alarms are measured.

- RandomValues: the result replaced by Gaussian values of `scale` x spread around the results' mean.
- SignFlip: y -> -y.
- Noise: y + Gaussian noise of `scale` x spread.
- Offset: y + `scale` x spread in every coordinate.
- RelativeNoise: y + Gaussian noise of `scale` x the rms of y itself (`relative_noise`, row by row).
- SmoothBump: A neighbouring workers (along the worker points) collude, adding a smooth bump of height
  `scale` x spread that vanishes at the block's ends, so each looks consistent with its fellow adversaries.
- Stealth: knows the code and the detector: A neighbouring workers where the decode leans hardest add a
  common offset, the largest (by bisection) that `code.robust_decode` does not flag.

A model with `per_result` makes a result wrong from itself alone; `perturb_one` is that, one result at a
time (what fault injection needs).

Plausible wrong results (`PLAUSIBLE`): finite, of the right magnitude, the kind real bugs and replays produce.
Those that need more than the results read it from a `Context` passed to `corrupt` (the function, the
returned workers' coded inputs, another job's results, a stale model):

- Replay: another returned worker's result, replayed (a routing or caching bug).
- NeighbourReplay: the adjacent worker's result (an off-by-one index: the closest replay there is).
- OtherJob: the same worker's result for another job (`Context.other`: a replay across jobs).
- StaleModel: a slightly different model's result on the right input (`Context.stale`, `Context.inputs`).
- WrongInput: f on a slightly wrong input, xt + `scale` x rms(xt) x z (`Context.f`, `Context.inputs`).
- Permute: the output coordinates shuffled within the row (a layout bug).
- SwapTop: the two largest outputs swapped (the predicted class changes, nothing else).
- Scaled: y times a factor c with |log c| uniform in [log(1 + scale), log 2], either direction.
- Truncated: y rounded to `bits` mantissa bits (default 7: bfloat16), a precision bug.
- ConstantVector: the results' mean over workers, the same for every liar (a default or cached value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import Adversary, Context, spread
from .plausible import (
    ConstantVector,
    NeighbourReplay,
    OtherJob,
    Permute,
    Replay,
    Scaled,
    StaleModel,
    SwapTop,
    Truncated,
    WrongInput,
)


@dataclass(frozen=True)
class Honest(Adversary):
    """Nobody lies; the decoder is still told to expect up to A wrong results (false-alarm runs)."""

    name = "honest"

    def _choose(self, Y, returned, rng, code) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class RandomValues(Adversary):
    """Results replaced by Gaussian values of `scale` x spread (default 3) around the results' mean."""

    scale: float = 3.0
    name = "random"

    def _perturb(self, Ya, s, rng):
        return Ya.mean() + self.scale * s * rng.standard_normal(Ya.shape)


@dataclass(frozen=True)
class SignFlip(Adversary):
    """Results negated."""

    name = "signflip"

    def _perturb(self, Ya, s, rng):
        return -Ya


@dataclass(frozen=True)
class Noise(Adversary):
    """Gaussian noise of `scale` x spread added."""

    name = "noise"

    def _perturb(self, Ya, s, rng):
        return Ya + self.scale * s * rng.standard_normal(Ya.shape)


@dataclass(frozen=True)
class Offset(Adversary):
    """`scale` x spread added to every coordinate."""

    name = "offset"

    def _perturb(self, Ya, s, rng):
        return Ya + self.scale * s


def relative_noise(out: Any, scale: float, rng: np.random.Generator) -> np.ndarray:
    """One wrong result: `out` (any shape, as float64) plus Gaussian noise of `scale` times its own root mean
    square, out + scale * rms(out) * z with z ~ N(0, 1) of out's shape (an all-zero result counts rms 1).
    Draws exactly one `rng.standard_normal(out.shape)`; scale must be finite and non-negative."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"wrong-result scale must be a finite non-negative number, got {scale!r}")
    out = np.asarray(out, dtype=float)
    rms = float(np.sqrt(np.mean(out**2))) or 1.0
    return out + float(scale) * rms * rng.standard_normal(out.shape)


@dataclass(frozen=True)
class RelativeNoise(Adversary):
    """Each corrupted result y becomes `relative_noise(y, scale, rng)`: noise relative to that result's own rms
    (not to the spread of all results), the model of the fault injection of jobs and serving."""

    name = "relative"

    def _perturb(self, Ya, s, rng):
        return np.stack([relative_noise(y, self.scale, rng) for y in Ya]) if len(Ya) else Ya


@dataclass(frozen=True)
class SmoothBump(Adversary):
    """A neighbouring workers collude: a smooth bump (a sine arch over the block) of height scale x spread."""

    name = "bump"

    def _choose(self, Y, returned, rng, code):
        start = int(rng.integers(0, len(returned) - self.A + 1))
        return np.arange(start, start + int(self.A))

    def _perturb(self, Ya, s, rng):
        arch = np.sin(np.pi * (np.arange(len(Ya)) + 1) / (len(Ya) + 1))
        return Ya + self.scale * s * arch.reshape(-1, *([1] * (Ya.ndim - 1)))


@dataclass(frozen=True)
class Stealth(Adversary):
    """Knows the code and its detector: the A neighbouring workers with the largest decoding weight add a
    common offset along the first output coordinate, the largest that `robust_decode` leaves unflagged
    (bisection on the magnitude, up to `scale` x spread)."""

    scale: float = 10.0
    name = "stealth"

    def corrupt(self, Y, returned, rng, code=None, context=None):
        if code is None:
            raise ValueError("the Stealth adversary needs the code (it attacks the code's own detector)")
        returned = np.asarray(returned)
        if self.A == 0:
            return np.array(Y, dtype=float, copy=True), np.zeros(0, dtype=np.int64)
        order = np.argsort(returned)
        D = code.decoding_matrix(returned, Y)  # Y: decoders that adapt to the results (lam by GCV, 'select')
        weight = np.linalg.norm(D, axis=0)[order]
        win = np.convolve(weight, np.ones(int(self.A)), mode="valid")
        start = int(np.argmax(win))
        pos = np.sort(order[start:start + int(self.A)])
        direction = np.zeros(Y.shape[1:])
        direction.flat[0] = 1.0
        s = spread(Y)

        def attacked(c: float) -> np.ndarray:
            Yc = np.array(Y, dtype=float, copy=True)
            Yc[pos] += c * s * direction
            return Yc

        def undetected(c: float) -> bool:
            return code.robust_decode(attacked(c), returned, adversaries=self.bound)[1].size == 0

        lo, hi = 0.0, float(self.scale)
        if undetected(hi):
            lo = hi
        else:
            for _ in range(30):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if undetected(mid) else (lo, mid)
        return attacked(lo), np.sort(returned[pos])


MODELS = {"honest": Honest, "random": RandomValues, "signflip": SignFlip, "noise": Noise, "offset": Offset,
          "relative": RelativeNoise, "bump": SmoothBump, "stealth": Stealth, "replay": Replay,
          "neighbour": NeighbourReplay, "other-job": OtherJob, "stale-model": StaleModel, "wrong-input": WrongInput,
          "permute": Permute, "swap-top": SwapTop, "scaled": Scaled, "truncated": Truncated, "constant": ConstantVector}
#: the plausible wrong results: finite, of the results' own magnitude, the kind real bugs and replays produce
PLAUSIBLE = ("replay", "neighbour", "other-job", "stale-model", "wrong-input", "permute", "swap-top", "scaled",
             "truncated", "constant")


def get_adversary(name: str, A: int, scale: float | None = None) -> Adversary:
    """An adversary model by name (one of MODELS), with A corrupted workers and an optional scale."""
    if name not in MODELS:
        raise ValueError(f"unknown adversary model {name!r}; choose one of {', '.join(MODELS)}")
    cls = MODELS[name]
    return cls(A) if scale is None else cls(A, scale)


__all__ = ["MODELS", "PLAUSIBLE", "Adversary", "ConstantVector", "Context", "Honest", "NeighbourReplay", "Noise",
           "Offset", "OtherJob", "Permute", "RandomValues", "RelativeNoise", "Replay", "Scaled", "SignFlip",
           "SmoothBump", "StaleModel", "Stealth", "SwapTop", "Truncated", "WrongInput", "get_adversary",
           "relative_noise", "spread"]
