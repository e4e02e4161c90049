"""Parity-model training settings compared on held-out reconstruction (issue 10: mnist1d's k = 4 parity model).

    python benchmarks/parity_recipes.py --workload mnist1d-cnn --k 4 --variants base mean wide --epochs 10

Each variant is PARITY_TRAIN with the changes in VARIANTS (and --epochs / --per-epoch when given), trained on
the workload's training inputs exactly as `load_parity` trains (`_parity.fit_parity`, one thread, fixed seeds),
not cached. Printed per variant: training seconds, and reconstruction rel_mse (agreement) of F_P(query) - sum of
the others against f of the first member, on 4000 k-tuples of the test inputs (held out): random ones (the
figures `load_parity` stores) and consecutive groups of chain-ordered sets (as ParM and SystematicGCC's coded
workers query the parity model); and on random k-tuples of the training inputs (under- or over-fitting).
Two untrained references come first: F_P = f on the sum (ParM's untrained reading) and F_P(s) = k f(s / k)
(the mean's reading). Packed variants query F_P with the k members stacked instead of their sum.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from gencc.workloads import _parity as P
from gencc.workloads import load
from gencc.workloads._torch import RECIPES, dataset, load_module, training_threads

WIDE = {"kind": "cnn1d", "channels": [128, 128, 128], "length": 40, "classes": 10, "hidden": 256}
VARIANTS: dict[str, dict[str, Any]] = {
    "recipe": {},  # the workload's current parity recipe (PARITY_TRAIN with its PARITY_OVERRIDES entry)
    "base": {},  # PARITY_TRAIN as it is (digits' recipe; mnist1d's before issue 10)
    "scratch": {"init": "scratch"},
    "mean": {"scale": "mean"},
    "mean-lr1e-3": {"scale": "mean", "lr": 1e-3},
    "lr1e-2": {"lr": 1e-2},
    "wd1e-4": {"weight_decay": 1e-4},
    "mean-scratch": {"scale": "mean", "init": "scratch"},
    "wide": {"scale": "mean", "init": "scratch", "arch": WIDE},
    "wide-sum": {"init": "scratch", "arch": WIDE},
    "wide-lr1e-3": {"scale": "mean", "init": "scratch", "arch": WIDE, "lr": 1e-3},
    "wide-b256": {"scale": "mean", "init": "scratch", "arch": WIDE, "batch": 256},
    "chain": {"chain_set": 8},
    "chain-mean": {"chain_set": 8, "scale": "mean"},
    "chain-wide": {"chain_set": 8, "scale": "mean", "init": "scratch", "arch": WIDE},
    # packed: the k members stacked as input channels instead of their sum (a coded worker receives k inputs)
    "recipe-packed": {"pack": True},  # the workload's recipe, packed (what `load_parity(..., packed=True)` trains)
    "packed": {"pack": True},
    "packed-scratch": {"pack": True, "init": "scratch"},
    "chain-packed": {"chain_set": 8, "pack": True},
}


def _row(label: str, seconds: float, module: torch.nn.Module, base: torch.nn.Module, X: torch.Tensor,
         Xt: torch.Tensor, k: int, chain: int) -> str:
    figs = [P.held_out(module, base, Xt, k), P.held_out(module, base, Xt, k, chain), P.held_out(module, base, X, k)]
    cells = " | ".join(f"{f['rel_mse']:.3f} ({f['agreement']:.3f})" for f in figs)
    return f"| {label} | {seconds:.0f} | {cells} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", default="mnist1d-cnn", choices=sorted(RECIPES))
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--variants", nargs="+", default=["base", "mean", "wide"], choices=sorted(VARIANTS))
    ap.add_argument("--epochs", type=int, default=None, help="override every variant's epochs")
    ap.add_argument("--per-epoch", type=int, default=None, help="override every variant's k-tuples per epoch")
    ap.add_argument("--chain-set", type=int, default=None,
                    help="set size of the chain-group held-out column (default 2k: K = 8 for k = 4)")
    ap.add_argument("--no-references", action="store_true", help="skip the two untrained reference rows")
    args = ap.parse_args()
    if args.k < 1 or any(v is not None and v < 1 for v in (args.epochs, args.per_epoch)):
        ap.error("need --k, --epochs and --per-epoch >= 1")
    if args.chain_set is not None and args.chain_set < args.k:
        ap.error(f"--chain-set must be at least --k ({args.k}), got {args.chain_set}")
    w = load(args.workload, progress=False)
    base = load_module(args.workload, w.weights_path)
    Xtr, _, Xte, _ = dataset(args.workload)
    X, Xt = torch.as_tensor(Xtr, dtype=torch.float32), torch.as_tensor(Xte, dtype=torch.float32)
    k = args.k
    print(f"{args.workload}, k = {k}: held-out = {len(Xt)} test inputs, training = {len(X)} training inputs")
    chain = args.chain_set or 2 * k
    if chain > min(len(X), len(Xt)):
        ap.error(f"--chain-set must be at most the {min(len(X), len(Xt))} held-out inputs, got {chain}")
    print("| variant | training s | held-out random k-tuples | held-out chain groups (sets of "
          f"{chain}) | training inputs, random k-tuples |")
    print("|---|---|---|---|---|")
    if not args.no_references:
        for label, module in (("untrained: F_P = f", base), ("untrained: k f(sum / k)", P.MeanParity(base, k))):
            print(_row(label, 0.0, module, base, X, Xt, k, chain), flush=True)
    for name in args.variants:
        if name.startswith("recipe"):
            hp = P.settings(args.workload, packed=name == "recipe-packed")
        else:
            hp = {**P.PARITY_TRAIN, **VARIANTS[name]}
        if args.epochs is not None:
            hp["epochs"] = args.epochs
        if args.per_epoch is not None:
            hp["per_epoch"] = args.per_epoch
        with training_threads():
            module, seconds = P.fit_parity(args.workload, k, hp, base, X)
            row = _row(f"{name} ({hp['epochs']} x {hp['per_epoch']})", seconds, module, base, X, Xt, k, chain)
        print(row, flush=True)


if __name__ == "__main__":
    main()
