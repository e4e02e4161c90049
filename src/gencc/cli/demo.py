"""`gencc demo`: coded inference of a digits CNN, simulated and then run on the embedded local runtime."""

from __future__ import annotations

import numpy as np
import typer

from ..codes import BACC, GCC, Replication
from ..faults import Bimodal
from ..faults.stragglers import FixedCount
from ..runtime.simulate import simulate, summarize
from .options import integer
from .options import seed as check_seed


def demo_command(
    batches: int = typer.Option(20, help="batches of K inputs per (N, S) point in the simulation table",
                                callback=integer(at_least=1)),
    trials: int = typer.Option(5, help="random straggler sets per batch", callback=integer(at_least=1)),
    jobs: int = typer.Option(40, help="jobs per scheme on the local runtime", callback=integer(at_least=1)),
    seed: int = typer.Option(0, help="seed for inputs, straggler sets and latencies", callback=check_seed),
) -> None:
    """Train (once, cached) a LeNet-style CNN on scikit-learn's digits, then compare GCC, BACC and
    replication: a simulation table of rel_mse / agreement / rel_acc, and real jobs on the local runtime with
    injected stragglers (latency percentiles and accuracy)."""
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    from ..runtime import Hedged, LocalExecutor, Replicated, Uncoded, stream
    from ..workloads import load

    console = Console()
    w = load("digits-cnn", progress=True)
    console.print(f"[bold]digits-cnn[/]: test accuracy {w.test_accuracy:.3f} on {len(w.y_test)} held-out digits")
    K = 10
    grid = [(15, 3), (20, 3), (40, 3), (80, 3)]
    rng = np.random.default_rng(seed)
    picks = [w.sample(K, rng) for _ in range(batches)]
    table = Table(title=f"Simulated coded inference, K={K}, S random stragglers, {batches}x{trials} draws")
    for col in ("N", "S", "scheme", "rel_mse", "agreement", "rel_acc"):
        table.add_column(col, justify="right")
    for N, S in track(grid, description="simulating", console=console):
        for make in (GCC, BACC, Replication):
            recs = []
            for b, (X, y) in enumerate(picks):
                recs += simulate(w.f, X, make(K, N), FixedCount(S), trials=trials, seed=seed + b, labels=y)
            s = summarize(recs)[0]
            table.add_row(str(N), str(S), s["scheme"], f"{s['rel_mse']:.2e}", f"{s['agreement']:.3f}",
                          f"{s['rel_acc']:.3f}")
    console.print(table)

    # Real jobs: threads compute f, a seeded latency model delays each result, the master stops early.
    K, N, wait = 8, 16, 12
    latency = Bimodal(p=0.05, factor=10.0, base=0.01)
    table = Table(title=f"Local runtime, K={K} inputs on N={N} workers for every scheme (uncoded uses K of them), "
                        f"bimodal latency (5% of tasks 10x slower), {jobs} jobs")
    for col in ("scheme", "workers used", "p50 ms", "p99 ms", "agreement"):
        table.add_column(col, justify="right")
    inputs = [w.sample(K, rng) for _ in range(jobs)]
    with LocalExecutor() as ex:
        for label, code, kw in (("uncoded", Uncoded(K), {}), ("replication", Replicated(K, N), {}),
                                ("hedged", Hedged(K, N), {}), ("gcc", GCC(K, N), {"wait_for": wait}),
                                ("bacc", BACC(K, N), {"wait_for": wait})):
            lat, agree = [], []
            results = stream(w.f, (X for X, _ in inputs), code, ex, max_in_flight=2, seed=seed, latency=latency,
                             **kw)
            for (X, _), r in track(zip(inputs, results, strict=True), total=jobs, description=label,
                                   console=console):
                lat.append(r.latency)
                agree.append(np.mean(np.argmax(r.outputs, 1) == np.argmax(w.f(X), 1)))
            table.add_row(label, f"{code.N} of {N}", f"{1e3 * np.percentile(lat, 50):.1f}",
                          f"{1e3 * np.percentile(lat, 99):.1f}", f"{np.mean(agree):.3f}")
    console.print(table)
