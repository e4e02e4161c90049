"""Scale: what a job costs as N grows, and how many threads the process holds meanwhile, on the threads backend.

For (K, N) in `SIZES` (GCC, order=False, wait for 90% of the workers, an identity-like f on inputs of
`DIM` features): the median time per job of `gencc.run` on the default executor, with a per-input f and with a
batched f, against the floor (the job's own work with no runtime: encode, f on the N coded inputs in one call,
and the decode of a straggler pattern seen for the first time, D_F built cold, as every job of a real cluster
meets one; the code, and so E, is built once per size); and the most threads alive in the process while f ran
(`threading.active_count()`, sampled in f). The per-input job is also given against the batched one (whose
results come back as one block, so its decode meets the same straggler pattern every job and is cached: the
per-input job's results arrive in their own order, so it also pays a cold decode). Last, the cold decode (a new
straggler pattern, D_F built) at `CLIFF` = (K, N) = (250, 500), which GCC's auto kernel fits with the Matern 3/2
kernel (at most `gencc.codes.gcc.AUTO_DENSE_MAX` points; its state-space band path from
`gencc.smoothing.MATERN_BANDED_THRESHOLD` points, the dense solve below), against the same at (500, 1000), fitted
with the cubic spline on its banded path.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from measure import Figure, median

import gencc
from gencc.runtime import LocalExecutor

SUITE = "scale"
SIZES = ((50, 100), (500, 1000), (1000, 10_000))  # (K, N)
DIM = 8
WAIT = 0.9  # the share of the workers a job waits for
CLIFF = ((250, 500), (500, 1000))  # the cold decode on the dense path, and at twice the size on the banded one


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--scale-jobs", type=int, default=5, help="timed jobs per size and f (default 5)")


class Counted:
    """f = X * 2, per input or batched, noting the most threads alive while it ran."""

    def __init__(self, batched: bool) -> None:
        self.batched, self.threads = batched, 0

    def __call__(self, X: np.ndarray) -> np.ndarray:
        n = threading.active_count()
        if n > self.threads:
            self.threads = n
        return np.asarray(X) * 2.0


def _floor(code, X: np.ndarray, rng: np.random.Generator) -> float:
    """Seconds of the job's own work: encode, f on every coded input in one call, a cold decode."""
    t = time.perf_counter()
    Z = code.encode(X)
    Y = Z * 2.0
    used = np.sort(rng.choice(code.N, round(WAIT * code.N), replace=False))
    code.decode(Y[used], used)
    return time.perf_counter() - t


def run(args: argparse.Namespace) -> list[Figure]:
    figs = []
    rng = np.random.default_rng(0)
    for K, N in SIZES:
        wait_for = round(WAIT * N)
        jobs = [rng.normal(size=(K, DIM)) for _ in range(args.scale_jobs + 1)]
        per: dict[str, list[float]] = {"floor": [], "per-input f": [], "batched f": []}
        fs = {"per-input f": Counted(False), "batched f": Counted(True)}
        code = gencc.GCC(K, N)
        code.encode(jobs[0])  # E built once, as a code serving many jobs holds it; each D_F is built cold
        with LocalExecutor() as ex:
            for j, X in enumerate(jobs):
                floor = _floor(code, X, rng)
                for name, f in fs.items():
                    t = time.perf_counter()
                    gencc.run(f, X, code, ex, wait_for=wait_for, order=False)
                    if j:  # the first job of each kind starts the threads: untimed
                        per[name].append(time.perf_counter() - t)
                if j:
                    per["floor"].append(floor)
        what = f"GCC K={K}, N={N}, first {wait_for}, default executor"
        for name, f in fs.items():
            figs.append(Figure(SUITE, f"time per job, {what}, {name}", 1e3 * median(per[name]),
                               1e3 * median(per["floor"]), "encode + f + cold decode, no runtime"))
            figs.append(Figure(SUITE, f"threads in the process, {what}, {name}", float(f.threads), float(N),
                               "N (a thread per worker)", unit="threads"))
        figs.append(Figure(SUITE, f"time per job, {what}, per-input f vs batched f", 1e3 * median(per["per-input f"]),
                           1e3 * median(per["batched f"]), "the batched f's job"))
    figs.append(_cliff(args.scale_jobs, rng))
    return figs


def _cliff(repeat: int, rng: np.random.Generator) -> Figure:
    """The median cold decode (first 90% of the workers, a new pattern each time) at CLIFF's two sizes,
    alternated."""
    codes = [gencc.GCC(K, N) for K, N in CLIFF]
    Ys = [code.encode(rng.normal(size=(code.K, DIM))) for code in codes]
    times: list[list[float]] = [[], []]
    for _ in range(repeat + 1):
        for i, (code, Y) in enumerate(zip(codes, Ys, strict=True)):
            used = np.sort(rng.choice(code.N, round(WAIT * code.N), replace=False))
            t = time.perf_counter()
            code.decode(Y[used], used)
            times[i].append(time.perf_counter() - t)
    (k1, n1), (k2, n2) = CLIFF
    return Figure(SUITE, f"cold decode, GCC K={k1}, N={n1} (Matern 3/2 fit), first {round(WAIT * n1)}",
                  1e3 * median(times[0][1:]), 1e3 * median(times[1][1:]),
                  f"the same at K={k2}, N={n2} (cubic spline fit)")
