"""Answered: which gap rule and length scale keep GCC's worst case at or below BACC's (docs/design.md section 3).

GCC against BACC at high straggler fractions: the worst case and random stragglers. It chose GCC's bounded rule
for gaps, gaps="auto"'s thresholds and the length scale at few inputs (docs/guides/codes.md shows a run).

For each (K, N, S) row and each scheme: the worst case over every contiguous block of S workers by position
(edges included) together with gencc's own searches (`FixedCount(S, "worst")` and `FixedCount(S,
"worst-agreement")` through `simulate`), and the mean over random straggler sets. Scored on trained
classifiers: a digits MLP this script defines and trains itself (scikit-learn, a model gencc does not ship) and
the trained workloads named by --workload, several input sets each (K test inputs drawn per set). The worst-case
rel_mse of a set is the largest found; agreement is the smallest over the same candidates; each is averaged over
the sets and the workloads.

    python benchmarks/investigations/worst_case.py
    python benchmarks/investigations/worst_case.py --schemes gcc:gaps=fit,bacc --rows 50,100,20

A scheme is a code name with options separated by semicolons (`gcc:gaps=bridge`); `gcc` is GCC's default
(gaps="auto"), `gcc:gaps=fit` the fit everywhere, `gcc:gaps=bridge` every gap of two or more data points bridged.
`gcc:ell=0.6` (short for GCC's option `gcc:length_scale=0.6`) is GCC with its auto kernel at length scale 0.6, not its
default (`gencc.codes.gcc.auto_length_scale`: 0.3, or 2.4 / K at K <= 7 on N >= 4 K workers):

    python benchmarks/investigations/worst_case.py --workload digits-cnn \
        --schemes gcc,gcc:ell=0.6,gcc:ell=0.9,bacc --rows 5,20,4
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import gencc
from gencc import metrics as M
from gencc.codes import make_code
from gencc.codes.registry import parse_option

#: the default rows: (K, N, S), straggler fractions from 0.1 to 0.2
ROWS = ((10, 40, 8), (16, 24, 4), (20, 60, 10), (32, 80, 8), (50, 100, 20))


def script_mlp() -> tuple[Callable, np.ndarray, np.ndarray]:
    """(f, X_test, y_test): a 64-64-10 ReLU MLP trained here on scikit-learn's digits; f gives its logits."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))
    train, test = idx[:1400], idx[1400:]
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=300, random_state=0).fit(X[train], y[train])
    W1, W2 = clf.coefs_
    b1, b2 = clf.intercepts_

    def f(Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=float).reshape(len(Z), -1)
        return np.maximum(Z @ W1 + b1, 0.0) @ W2 + b2

    f.batched = True
    return f, X[test], y[test]


def workload(name: str) -> tuple[Callable, np.ndarray, np.ndarray]:
    if name == "script-mlp":
        return script_mlp()
    from gencc.workloads import load

    w = load(name)
    return w.f, np.asarray(w.X_test), np.asarray(w.y_test)


def parse_scheme(text: str) -> tuple[str, dict]:
    """(code name, options) of a scheme spec; ValueError naming what is wrong."""
    name, _, rest = text.partition(":")
    opts: dict = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        if name == "gcc" and key == "ell":
            try:
                ell = float(value)
            except ValueError:
                ell = -1.0
            if not (ell > 0 and np.isfinite(ell)):
                raise ValueError(f"gcc:ell needs a positive length scale, got {value!r} (e.g. gcc:ell=0.6)")
            opts["length_scale"] = ell  # the short name of GCC's option length_scale
        else:
            opts[key] = parse_option(name, key, value)
    return name, opts


def build(name: str, K: int, N: int, opts: dict) -> gencc.Code:
    """The code of a parsed scheme (its options already checked by the registry in `parse_scheme`)."""
    return make_code(name, K, N, **opts)


def worst(f: Callable, X: np.ndarray, code: gencc.Code, S: int) -> tuple[float, float]:
    """(worst rel_mse, smallest agreement) over every contiguous block of S workers and gencc's own searches (for
    the largest rel_mse and for the least agreement)."""
    rec = gencc.simulate(f, X, code, gencc.FixedCount(S, "worst"), trials=1)[0]
    least = gencc.simulate(f, X, code, gencc.FixedCount(S, "worst-agreement"), trials=1)[0]
    perm = gencc.order_inputs(X)
    Xp = X[perm]
    Y_all = np.asarray(f(code.encode(Xp)))
    Y_true = np.asarray(f(X))
    rel, agr = [rec["rel_mse"], least["rel_mse"]], [rec["agreement"], least["agreement"]]
    for s in range(code.N - S + 1):
        returned = np.setdiff1d(np.arange(code.N), np.arange(s, s + S))
        Yhat = np.empty_like(Y_true)
        Yhat[perm] = code.decode(Y_all[returned], returned)
        rel.append(M.rel_mse(Yhat, Y_true))
        agr.append(M.agreement(Yhat, Y_true))
    return float(max(rel)), float(min(agr))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemes", default="gcc,gcc:gaps=fit,gcc:gaps=bridge,bacc",
                    help="comma-separated schemes (default gcc,gcc:gaps=fit,gcc:gaps=bridge,bacc)")
    ap.add_argument("--workload", default="script-mlp,digits-cnn",
                    help="script-mlp (defined here) and/or gencc workloads (default script-mlp,digits-cnn)")
    ap.add_argument("--rows", nargs="*", default=None, help="K,N,S rows (default: the five of ROWS)")
    ap.add_argument("--sets", type=int, default=3, help="input sets per workload (default 3)")
    ap.add_argument("--trials", type=int, default=30, help="random straggler draws per set (default 30)")
    args = ap.parse_args()
    bad_row = "each row is K,N,S with 1 <= K < N and 1 <= S < N (e.g. --rows 5,20,4)"
    try:  # everything checked before any model is trained or loaded
        try:
            rows = [tuple(int(v) for v in r.split(",")) for r in args.rows] if args.rows else ROWS
        except ValueError:
            raise ValueError(bad_row) from None
        if any(len(r) != 3 or not 1 <= r[2] < r[1] or r[0] >= r[1] or r[0] < 1 for r in rows):
            raise ValueError(bad_row)
        schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
        parsed = {s: parse_scheme(s) for s in schemes}
        for name, opts in parsed.values():
            build(name, 4, 8, opts)
        names = [w for w in args.workload.split(",") if w]
        from gencc.workloads import WORKLOADS

        bad = [w for w in names if w != "script-mlp" and w not in WORKLOADS]
        if bad or not names:
            raise ValueError(f"unknown workload {bad[0] if bad else ''!r}; choose script-mlp or {', '.join(WORKLOADS)}")
        if args.sets < 1 or args.trials < 1:
            raise ValueError("--sets and --trials must be at least 1")
    except ValueError as e:
        ap.error(str(e))
    loads = {name: workload(name) for name in names}
    print(f"workloads {', '.join(loads)}; {args.sets} input sets each; random: {args.trials} draws per set")
    print("| K, N, S | scheme | worst rel_mse | worst agreement | random rel_mse | random RelAcc | seconds |")
    print("|---|---|---|---|---|---|---|")
    for K, N, S in rows:
        for scheme in schemes:
            t0 = time.perf_counter()
            name, opts = parsed[scheme]
            code = build(name, K, N, opts)
            w_rel, w_agr, r_rel, r_acc = [], [], [], []
            for f, X_test, y_test in loads.values():
                for s in range(args.sets):
                    pick = np.random.default_rng(1000 * s + K).choice(len(X_test), K, replace=False)
                    X, y = X_test[pick], y_test[pick]
                    a, b = worst(f, X, code, S)
                    w_rel.append(a)
                    w_agr.append(b)
                    recs = gencc.simulate(f, X, code, gencc.FixedCount(S, "random"), trials=args.trials, seed=s,
                                          labels=y)
                    r_rel.append(np.mean([r["rel_mse"] for r in recs]))
                    r_acc.append(np.nanmean([r["rel_acc"] for r in recs]))
            print(f"| {K}, {N}, {S} | {scheme} | {np.mean(w_rel):.4g} | {np.mean(w_agr):.3f} | {np.mean(r_rel):.4g} "
                  f"| {np.mean(r_acc):.4f} | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
