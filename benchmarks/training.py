"""Straggler-resilient training at equal N: time to a target test accuracy and final accuracy per scheme, with
the compute per worker beside it, under transient and persistent stragglers.

    python benchmarks/run.py training                   # digits-logreg (full batch), digits-cnn, mnist1d-cnn
    python benchmarks/run.py training --workloads digits-logreg --seeds 0 1 2 3 4 --out docs/generated/training.md
    python benchmarks/run.py training --slope --out docs/generated/training-slope.md   # gcc's error against N

Stragglers (gencc.faults, applied by the engine): "transient" is a Bimodal latency (each worker, each step,
delayed base x factor with probability p); "persistent" is PersistentStragglers with periods far longer than
the run (the same slow workers throughout), on by-label shards (fixed non-iid placement: the data a slow
worker holds are not held elsewhere). Compute is modelled as `sample_s` seconds per sample (injected service
time, slowed by persistent stragglers), on top of the real compute. Every scheme plans for S = 1 straggler.
The table (medians over seeds) is printed and written to --out, its first line the command that made it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from measure import generated_by, machine

from gencc.faults import Bimodal, PersistentStragglers
from gencc.training import TRAINING_SCHEMES, train
from gencc.training.workloads import train_workload

SUITE = "training"
N = 8
SETTINGS = {  # name -> (straggler model for seed s, placement)
    "transient": (lambda s: Bimodal(p=0.1, factor=10.0, base=0.01), "stratified"),
    "persistent": (lambda s: PersistentStragglers(N, fraction=0.125, factor=8.0, mean_slow_s=1e4, seed=s),
                   "by-label"),
}
WORKLOADS = {  # name -> (steps, eval_every, sample_s, target accuracy)
    "digits-logreg": (100, 5, 1e-4, 0.92),
    "digits-cnn": (120, 10, 1e-3, 0.9),
    "mnist1d-cnn": (200, 10, 1e-3, 0.6),  # 4,000 1-D signals, batch 400: 20 epochs in 200 steps
}


def run_one(workload: str, setting: str, scheme: str, seed: int) -> dict:
    steps, every, sample_s, target = WORKLOADS[workload]
    w = train_workload(workload, seed)
    model_fn, placement = SETTINGS[setting]
    res = train(w.model, (w.X, w.y), scheme=scheme, workers=N, stragglers=model_fn(seed), tolerate=1,
                steps=steps, batch_size=w.batch_size, lr=w.lr, seed=seed, eval_data=(w.X_test, w.y_test),
                eval_every=every, optimizer=w.optimizer, placement=placement, sample_s=sample_s,
                track_grad_error=True)
    return {"tta": res.time_to_accuracy(target), "final": res.final_accuracy(), "compute": res.compute_per_worker,
            "wall": res.history[-1]["wall_s"], "err": float(np.median([h["grad_rel_err"] for h in res.history])),
            "curve": [(h["wall_s"], h["eval_acc"]) for h in res.history if "eval_acc" in h]}


def slow_note(setting: str, seeds: list[int]) -> str:
    """For persistent stragglers: how many workers each seed makes slow at the start (they stay slow)."""
    if setting != "persistent":
        return ""
    counts = []
    for s in seeds:
        m = SETTINGS[setting][0](s)
        counts.append(sum(m.slow(w, 0.0) for w in range(N)))
    return f"; slow workers per seed: {counts}"


def fmt_t(x: float) -> str:
    return "never" if not np.isfinite(x) else f"{x:.2f}"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--schemes", nargs="+", default=list(TRAINING_SCHEMES), choices=list(TRAINING_SCHEMES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    ap.add_argument("--plot", type=Path, default=None, help="write accuracy-vs-time curves here (PNG)")
    ap.add_argument("--slope", action="store_true", help="instead: gradient error against N at fixed K and S")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    head = generated_by(SUITE, argv)
    print(machine(), flush=True)
    if args.slope:
        text = slope_table(head, args.seeds)
        print(text)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
        return 0
    lines = [head, "", machine(), "",
             f"N = {N} workers, every scheme planning for S = 1 straggler; medians over seeds {args.seeds}. "
             "Time: wall-clock seconds of training (evaluation excluded) to the first evaluation at or above the "
             "target, median over seeds (never: the median run did not reach it); reached: seeds that did; "
             "compute: samples each worker processes per step; grad err: median grad_rel_err.", ""]
    curves: dict = {}
    t0 = time.perf_counter()
    for wl in args.workloads:
        target = WORKLOADS[wl][3]
        for st in args.settings:
            lines += [f"**{wl}, {st} stragglers** (target test accuracy {target}{slow_note(st, args.seeds)})", "",
                      "| scheme | time to target (s) | reached | final accuracy | wall (s) | compute | grad err |",
                      "|---|---|---|---|---|---|---|"]
            for sc in args.schemes:
                rs = [run_one(wl, st, sc, s) for s in args.seeds]
                curves[(wl, st, sc)] = [r["curve"] for r in rs]
                reached = sum(np.isfinite(r["tta"]) for r in rs)
                row = (f"| {sc} | {fmt_t(float(np.median([r['tta'] for r in rs])))} | {reached}/{len(rs)} | "
                       f"{np.median([r['final'] for r in rs]):.3f} | {np.median([r['wall'] for r in rs]):.2f} | "
                       f"{rs[0]['compute']} | {np.median([r['err'] for r in rs]):.1e} |")
                lines.append(row)
                print(f"[{time.perf_counter() - t0:6.0f} s] {wl} {st} {row}", flush=True)
            lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.plot is not None:
        plot(curves, args.plot)
    return 0


def slope_table(head: str, seeds: list[int]) -> str:
    """Mean grad_rel_err of gcc, bacc (K = 4 partitions) and ignore against N at S = 1, on digits-logreg in
    float64 (6 steps per seed, the S held-back workers drawn per step), with the fitted slope of log error
    against log N."""
    Ns = [6, 8, 12, 16, 24]
    errs: dict[str, list[float]] = {}
    for sc in ("gcc", "bacc", "ignore"):
        errs[sc] = []
        for n in Ns:
            e = []
            for seed in seeds:
                w = train_workload("digits-logreg", seed, torch.float64)
                r = train(w.model, (w.X, w.y), scheme=sc, workers=n, stragglers=1, steps=6, lr=0.5, seed=seed,
                          track_grad_error=True, delay_s=0.5, partitions=4 if sc != "ignore" else None)
                e += [h["grad_rel_err"] for h in r.history]
            errs[sc].append(float(np.mean(e)))
    lines = [head, "",
             "digits-logreg, full batch, float64, S = 1, K = 4 for the coded schemes; "
             f"mean grad_rel_err over 6 steps x seeds {seeds}.", "",
             "| scheme | " + " | ".join(f"N = {n}" for n in Ns) + " | fitted slope (log err vs log N) |",
             "|---|" + "---|" * (len(Ns) + 1)]
    for sc, e in errs.items():
        slope = float(np.polyfit(np.log(Ns), np.log(e), 1)[0])
        lines.append(f"| {sc} | " + " | ".join(f"{x:.1e}" for x in e) + f" | {slope:.2f} |")
    return "\n".join(lines)


def plot(curves: dict, path: Path) -> None:
    """Median test accuracy against wall-clock time per scheme (band: min..max over seeds), one panel per
    workload and setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(wl, st) for wl, st, _ in curves})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (wl, st) in zip(axes[0], panels, strict=True):
        for (w, s, sc), runs in curves.items():
            if (w, s) != (wl, st):
                continue
            t = np.median([[p[0] for p in r] for r in runs], axis=0)
            a = np.array([[p[1] for p in r] for r in runs])
            ax.plot(t, np.median(a, axis=0), label=sc)
            ax.fill_between(t, a.min(axis=0), a.max(axis=0), alpha=0.15)
        ax.set(title=f"{wl}, {st}", xlabel="wall-clock time (s)", ylabel="test accuracy")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
