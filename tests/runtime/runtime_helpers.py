"""Functions the runtime tests send to workers (module level, so they pickle to processes and Ray actors)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np


def smooth(X):
    """A smooth batched function R^d -> R^3."""
    X = np.asarray(X, dtype=float).reshape(len(X), -1)
    return np.stack([np.sin(X.sum(axis=1)), np.cos(X[:, 0]), X[:, 1] * X[:, -1]], axis=1)


smooth.batched = True


def smooth_one(x):
    """The same function, one input at a time (not batched)."""
    return smooth(np.asarray(x)[None])[0]


class Faulty:
    """Batched f that misbehaves on chosen inputs: raise, nan, garbage (finite but wrong), shape, hang (sleeps),
    crash (kills the process).

    triggers: list of (input row, kind); an input matching a row (allclose) triggers that kind.
    """

    batched = True

    def __init__(self, triggers, hang_s: float = 30.0):
        self.triggers = [(np.asarray(x, dtype=float), kind) for x, kind in triggers]
        self.hang_s = hang_s

    def __call__(self, X):
        X = np.asarray(X, dtype=float)
        Y = smooth(X)
        for i, x in enumerate(X):
            for row, kind in self.triggers:
                if row.shape == x.shape and np.allclose(row, x):
                    if kind == "raise":
                        raise RuntimeError("injected fault")
                    if kind == "nan":
                        Y[i] = np.nan
                    if kind == "garbage":  # finite, plausible-looking, wrong
                        Y[i] = -3.0 * Y[i] + 1.5
                    if kind == "shape":
                        return Y[:, :-1]
                    if kind == "hang":
                        time.sleep(self.hang_s)
                    if kind == "crash":
                        os._exit(1)
        return Y


class Flaky:
    """Batched f that raises the first `times` calls that see each input in `rows`, then works."""

    batched = True

    def __init__(self, rows, times: int = 1):
        self.rows = [np.asarray(r, dtype=float) for r in rows]
        self.seen: dict[int, int] = {}
        self.times = times
        self.lock = threading.Lock()

    def __call__(self, X):
        X = np.asarray(X, dtype=float)
        for x in X:
            for j, r in enumerate(self.rows):
                if np.allclose(r, x):
                    with self.lock:
                        self.seen[j] = self.seen.get(j, 0) + 1
                        fail = self.seen[j] <= self.times
                    if fail:
                        raise RuntimeError("flaky first call")
        return smooth(X)


class TinyNet:
    """A factory that builds a small seeded torch MLP R^6 -> R^4 once (as a worker or actor does)."""

    def __call__(self):
        import torch

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).double()
        net.eval()

        def f(X):
            with torch.no_grad():
                return net(torch.as_tensor(np.asarray(X, dtype=float))).numpy()

        f.batched = True
        f.pid = os.getpid()
        return f


def reference(code, X, returned, f=smooth, perm=None):
    """What a correct runtime outputs: the decode of the workers' results on exactly `returned`."""
    X = np.asarray(X, dtype=float)
    perm = np.arange(len(X)) if perm is None else perm
    Xt = code.encode(X[perm])
    returned = np.asarray(sorted(returned))
    Yp = code.decode(f(Xt[returned]), returned)
    out = np.empty_like(Yp)
    out[perm] = Yp
    return out


LINEAR_A = np.random.default_rng(11).normal(size=(3, 4))


def linear(X):
    """Batched linear f: R^4 -> R^3, so the exact parity model of ParM is f itself."""
    return np.asarray(X, dtype=float).reshape(len(X), -1) @ LINEAR_A.T


linear.batched = True


class LinearFactory:
    """Builds `linear` (on the worker, for executors built from a factory)."""

    def __call__(self):
        return linear


class OffsetParity:
    """A parity model that is `linear` plus `offset`, so where it was used shows in the outputs."""

    batched = True

    def __init__(self, offset: float = 0.0):
        self.offset = offset

    def __call__(self, X):
        return linear(X) + self.offset


class PackedOffsetParity:
    """A packed parity model: the sum of `linear` over the stacked members (B, k, ...) plus `offset`."""

    batched, packed = True, True

    def __init__(self, k: int, offset: float = 0.0):
        self.k, self.offset = k, offset

    def __call__(self, Z):
        Z = np.asarray(Z, dtype=float)
        return linear(Z.reshape(-1, *Z.shape[2:])).reshape(len(Z), Z.shape[1], -1).sum(axis=1) + self.offset
