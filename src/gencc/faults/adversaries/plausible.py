"""Plausible wrong results (gencc.adversaries.PLAUSIBLE): finite, of the results' own magnitude, the kind real
bugs and replays produce. See gencc.adversaries for the list."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Adversary, _as_rows


@dataclass(frozen=True)
class Replay(Adversary):
    """Another returned worker's result (chosen at random, not itself), replayed."""

    name = "replay"

    def _wrong(self, Y, pos, ctx, rng):
        src = [int(rng.choice(np.setdiff1d(np.arange(len(Y)), [p]))) for p in pos]
        return Y[src].copy()


@dataclass(frozen=True)
class NeighbourReplay(Adversary):
    """The result of the adjacent returned worker along the worker points (left or right at random)."""

    name = "neighbour"

    def _wrong(self, Y, pos, ctx, rng):
        step = np.where(rng.random(pos.size) < 0.5, -1, 1)
        src = np.where((pos + step < 0) | (pos + step >= len(Y)), pos - step, pos + step)
        return Y[src].copy()


@dataclass(frozen=True)
class OtherJob(Adversary):
    """The same worker's result for another job (`Context.other`)."""

    name = "other-job"
    needs = ("other",)

    def _wrong(self, Y, pos, ctx, rng):
        return _as_rows(np.asarray(ctx.other, dtype=float)[pos], Y[pos])


@dataclass(frozen=True)
class StaleModel(Adversary):
    """A slightly different model (`Context.stale`) applied to the right coded input."""

    name = "stale-model"
    needs = ("stale", "inputs")

    def _wrong(self, Y, pos, ctx, rng):
        return _as_rows(ctx.stale(np.asarray(ctx.inputs)[pos]), Y[pos])


@dataclass(frozen=True)
class WrongInput(Adversary):
    """f on a slightly wrong input: xt + `scale` x rms(xt) x z, z standard normal (default scale 0.1)."""

    scale: float = 0.1
    name = "wrong-input"
    needs = ("f", "inputs")

    def _wrong(self, Y, pos, ctx, rng):
        X = np.asarray(ctx.inputs, dtype=float)[pos]
        rms = np.sqrt(np.mean(X.reshape(len(pos), -1) ** 2, axis=1)).reshape(-1, *([1] * (X.ndim - 1)))
        return _as_rows(ctx.f(X + self.scale * rms * rng.standard_normal(X.shape)), Y[pos])


@dataclass(frozen=True)
class Permute(Adversary):
    """The output coordinates of each corrupted row shuffled (a random permutation that moves something)."""

    name = "permute"

    def _perturb(self, Ya, s, rng):
        flat = Ya.reshape(len(Ya), -1)
        out = flat.copy()
        for i, row in enumerate(flat):
            if row.size > 1:
                perm = rng.permutation(row.size)
                while np.all(perm == np.arange(row.size)):
                    perm = rng.permutation(row.size)
                out[i] = row[perm]
        return out.reshape(Ya.shape)


@dataclass(frozen=True)
class SwapTop(Adversary):
    """The two largest outputs of each corrupted row swapped: the argmax moves, the values stay plausible."""

    name = "swap-top"

    def _perturb(self, Ya, s, rng):
        flat = Ya.reshape(len(Ya), -1).copy()
        if flat.shape[1] > 1:
            top = np.argsort(-flat, axis=1)[:, :2]
            r = np.arange(len(flat))
            flat[r, top[:, 0]], flat[r, top[:, 1]] = flat[r, top[:, 1]], flat[r, top[:, 0]].copy()
        return flat.reshape(Ya.shape)


@dataclass(frozen=True)
class Scaled(Adversary):
    """y times c, |log c| uniform in [log(1 + scale), log 2] and either sign (default scale 0.1: 10% to 2x)."""

    scale: float = 0.1
    name = "scaled"

    def _perturb(self, Ya, s, rng):
        lo = np.log1p(self.scale)
        mag = rng.uniform(min(lo, np.log(2)), np.log(2), size=len(Ya)) * rng.choice([-1.0, 1.0], size=len(Ya))
        return Ya * np.exp(mag).reshape(-1, *([1] * (Ya.ndim - 1)))


@dataclass(frozen=True)
class Truncated(Adversary):
    """y rounded to `bits` bits of mantissa (default 7, bfloat16; 10 is float16's)."""

    scale: float = 7.0
    name = "truncated"

    def _perturb(self, Ya, s, rng):
        m, e = np.frexp(Ya)
        q = 2.0 ** (int(self.scale) + 1)
        return np.ldexp(np.round(m * q) / q, e)


@dataclass(frozen=True)
class ConstantVector(Adversary):
    """The results' mean over the returned workers, the same vector for every corrupted worker."""

    name = "constant"

    def _wrong(self, Y, pos, ctx, rng):
        return np.broadcast_to(Y.mean(axis=0), Y[pos].shape).copy()


