"""Answered: what robust decoding catches of plausible wrong results on unseen models (docs/guides/robust.md).

Robust decoding against plausible wrong results (gencc.adversaries.PLAUSIBLE) on models gencc never saw:
recall, false alarms, rel_mse against the best possible, and the information limit.

    python benchmarks/investigations/robust_plausible.py                      # the three models trained here (minutes)
    python benchmarks/investigations/robust_plausible.py --models mlp-digits torch-cls mlp-regress cnn-digits
    python benchmarks/investigations/robust_plausible.py --trials 40 --honest 100 --models mlp-digits
    python benchmarks/investigations/robust_plausible.py --out docs/generated/robust-plausible.md

Models: `cnn-digits` (gencc's own digits CNN) and three trained here in seconds, independently of gencc:
`mlp-digits` (scikit-learn, a tanh MLP 64-40-10 on the digits, logits; its stale copy is the checkpoint 20
epochs before the last), `torch-cls` (torch, a GELU MLP 20-64-64-6 on generated classification data, logits,
run through `gencc.as_model`; stale: 100 steps before the last) and `mlp-regress` (scikit-learn, a ReLU MLP
6-64-32-5 regression on generated data; stale: 20 epochs before). GCC with K = 10, S = 2 random stragglers,
A of the returned workers lie (the plausible families), N = 40 and 80. Trial t draws everything from seed t.

Threshold: `robust.calibrate` per (model, N, A) on `--calibration` honest runs (`robust.honest_runs`, seeds
from CALIBRATION_SEED) for a nominal false-alarm rate `--false-alarm` (0.5%) at confidence 0.9, below the 1%
target so that the rate measured on a finite set of runs stays under it. False alarms are measured on
`--honest` other honest runs (seeds from HELD_OUT_SEED, disjoint from the calibration's): a run counts once if
it flags anyone, with a Clopper-Pearson 95% interval.

Information limit: a lie is *below the noise floor* when its error is smaller than what the others get wrong
predicting the true result at that point, ||e_i|| < ||r_i||, with r_i the honest leave-one-out residual of
worker i (the true results, the other liars left out; the oracle knows who lies). Such a lie moves its
worker's residual by no more than the residual itself, which honest workers show too: the others cannot tell
it from a right one. Recall is reported over all lies and over those above the floor; the harm of what is
missed is the rel_mse over the best possible.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import gencc
from gencc import adversaries as adv
from gencc.codes import robust
from gencc.codes.robust import robust_spread
from gencc.experiments.markdown import table
from gencc.rkhs.smoother_loo import downdate_residuals, loo_matrix
from gencc.runtime.metrics import rel_mse
from gencc.workloads import load

K, S = 10, 2
NS, AS = (40, 80), (1, 2, 3)
HONEST_A = 3


@dataclass
class Model:
    """A batched function, its stale copy, a sampler of K inputs and the input shape."""

    name: str
    f: Callable[[np.ndarray], np.ndarray]
    stale: Callable[[np.ndarray], np.ndarray] | None
    pool: np.ndarray

    def sample(self, rng: np.random.Generator, k: int = K) -> np.ndarray:
        return self.pool[rng.choice(len(self.pool), k, replace=False)]


def _mlp_forward(coefs: list[np.ndarray], intercepts: list[np.ndarray], act: str) -> Callable:
    """The forward pass of a fitted scikit-learn MLP up to its last layer's pre-activation (logits)."""
    coefs = [c.copy() for c in coefs]
    intercepts = [b.copy() for b in intercepts]
    g = np.tanh if act == "tanh" else (lambda z: np.maximum(z, 0.0))

    def f(X: np.ndarray) -> np.ndarray:
        h = np.asarray(X, dtype=float).reshape(len(X), -1)
        for i, (W, b) in enumerate(zip(coefs, intercepts, strict=True)):
            h = h @ W + b
            if i < len(coefs) - 1:
                h = g(h)
        return h

    f.batched = True  # type: ignore[attr-defined]
    return f


def _train(est, X: np.ndarray, y: np.ndarray, epochs: int, stale_gap: int, act: str) -> tuple[Callable, Callable]:
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    snaps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for _ in range(epochs):
            est.partial_fit(X, y, **({"classes": np.unique(y)} if y.ndim == 1 else {}))
            snaps.append(([c.copy() for c in est.coefs_], [b.copy() for b in est.intercepts_]))
    return _mlp_forward(*snaps[-1], act), _mlp_forward(*snaps[-1 - stale_gap], act)


def independent_models(seed: int = 0) -> list[Model]:
    """Two models trained here with scikit-learn (not gencc's): digits logits and a 5-output regression."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    d = load_digits()
    X = d.data / 16.0
    clf = MLPClassifier(hidden_layer_sizes=(40,), activation="tanh", random_state=seed, learning_rate_init=0.01)
    f, stale = _train(clf, X[:1200], d.target[:1200], 80, 20, "tanh")
    out = [Model("mlp-digits", f, stale, X[1200:])]
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((3000, 6))
    T = np.column_stack([np.sin(Z[:, 0] * Z[:, 1]), Z[:, 2] ** 2 - Z[:, 3], np.tanh(Z[:, 4] + Z[:, 5]),
                         Z[:, 0] * Z[:, 5], np.cos(Z[:, 1]) + Z[:, 3]])
    reg = MLPRegressor(hidden_layer_sizes=(64, 32), activation="relu", random_state=seed, learning_rate_init=0.003)
    f, stale = _train(reg, Z[:2000], T[:2000], 80, 20, "relu")
    out.append(Model("mlp-regress", f, stale, Z[2000:]))
    return out


def torch_model(seed: int = 0) -> Model:
    """A torch GELU MLP 20-64-64-6 trained here (Adam, full batch) on generated classification data, run
    through `gencc.as_model` (numpy in, numpy out); its stale copy is the weights 100 steps before the last."""
    import copy

    import torch
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=3000, n_features=20, n_informative=12, n_classes=6, n_clusters_per_class=2,
                               random_state=seed)
    X = ((X - X.mean(0)) / X.std(0)).astype(np.float32)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                              torch.nn.Linear(64, 6))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    Xt, yt = torch.from_numpy(X[:2000]), torch.from_numpy(y[:2000])
    steps, gap = 400, 100
    for step in range(steps):
        if step == steps - gap:
            stale = copy.deepcopy(net)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(Xt), yt).backward()
        opt.step()
    return Model("torch-cls", gencc.as_model(net, input_shape=(20,)), gencc.as_model(stale, input_shape=(20,)),
                 X[2000:].astype(float))


def builtin_model() -> Model:
    w = load("digits-cnn", progress=False)
    return Model("cnn-digits", w.f, None, w.X_test)


@dataclass
class Draw:
    Yt: np.ndarray          # true outputs (K, m)
    Y: np.ndarray           # returned workers' honest results (n, m)
    ret: np.ndarray         # returned workers, sorted
    ctx: adv.Context        # for the context-reading families
    rng: np.random.Generator


def draws(model: Model, code: gencc.Code, trials: int, start: int = 0) -> Iterator[Draw]:
    for t in range(start, start + trials):
        rng = np.random.default_rng(t)
        X = model.sample(rng)
        X = X[gencc.order_inputs(X)]
        X2 = model.sample(rng)
        X2 = X2[gencc.order_inputs(X2)]
        ret = np.sort(rng.choice(code.N, code.N - S, replace=False))
        Xt = code.encode(X)[ret]
        Y = model.f(Xt).reshape(len(ret), -1)
        other = model.f(code.encode(X2)[ret]).reshape(len(ret), -1)
        yield Draw(model.f(X).reshape(K, -1), Y, ret, adv.Context(f=model.f, inputs=Xt, other=other,
                                                                  stale=model.stale), rng)


def oracle_scores(code: gencc.GCC, d: Draw, Yc: np.ndarray, bad: np.ndarray, cal: robust.Calibration) -> np.ndarray:
    """Per lie: the detector's own score of that worker with every other liar already left out (the oracle's
    view: the downdated, gap-rescaled LOO residual's rms over the robust spread and the worker's weight)."""
    G = loo_matrix(code.beta[d.ret], code.kernel_for(len(d.ret)), 0.0)
    res = downdate_residuals(G, G @ Yc)
    pos = np.flatnonzero(np.isin(d.ret, bad))
    scale = robust_spread(Yc) * cal.weights[d.ret]
    out = [np.sqrt(np.mean(res([tuple(int(j) for j in pos if j != i)])[0][i] ** 2)) / scale[i] for i in pos]
    return np.array(out)


#: calibration runs draw from seeds CALIBRATION_SEED + r, the held-out honest runs from HELD_OUT_SEED + r, the
#: adversarial trials from t < MAX_RUNS: three disjoint sets
CALIBRATION_SEED, HELD_OUT_SEED, MAX_RUNS = 100_000, 200_000, 100_000


def measure(models: list[Model], Ns=NS, As=AS, families=adv.PLAUSIBLE, trials: int = 100, honest: int = 1000,
            calibration: int = 1000, false_alarm: float = 0.005, per_worker: bool = False, log=print
            ) -> tuple[list[dict], list[dict]]:
    """Rows per (model, N, A, family) and per (model, N, A) honest. The threshold is calibrated per (model, N,
    A) on `calibration` honest runs and its false alarms counted on `honest` others (see the module docstring)."""
    rows, hrows = [], []
    for model in models:
        for N in Ns:
            code = gencc.GCC(K, N)
            t0 = time.perf_counter()
            data = list(draws(model, code, trials))
            cal = list(robust.honest_runs(code, model.f, model.pool, calibration, S, CALIBRATION_SEED,
                                          gencc.order_inputs))
            held = list(robust.honest_runs(code, model.f, model.pool, honest, S, HELD_OUT_SEED, gencc.order_inputs))
            for A in As:
                thr = robust.calibrate(code, cal, adversaries=A, false_alarm=false_alarm, per_worker=per_worker)
                fa = {k: sum(code.robust_decode(Y, ret, adversaries=A, **kw)[1].size > 0 for Y, ret in held)
                      for k, kw in (("default", {}), ("calibrated", {"threshold": thr}))}
                hrows.append({"model": model.name, "N": N, "A": A, "runs": honest, "threshold": thr.threshold,
                              "fa_default": fa["default"], "fa_calibrated": fa["calibrated"]})
                for fam in families:
                    if fam == "stale-model" and model.stale is None:
                        continue
                    m = adv.get_adversary(fam, A)
                    acc: dict[str, list] = {k: [] for k in ("rec", "rec0", "above", "hon", "r", "r0", "rx")}
                    for d in data[:trials]:
                        Yc, bad = m.corrupt(d.Y, d.ret, np.random.default_rng(d.rng.integers(2**31)), code, d.ctx)
                        Yh, fl = code.robust_decode(Yc, d.ret, adversaries=A, threshold=thr)
                        Yh0, fl0 = code.robust_decode(Yc, d.ret, adversaries=A)
                        above = oracle_scores(code, d, Yc, bad, thr) >= thr.threshold
                        acc["rec"].extend(np.isin(bad, fl))
                        acc["rec0"].extend(np.isin(bad, fl0))
                        acc["above"].extend(above)
                        acc["hon"].append(np.setdiff1d(fl, bad).size)
                        keep = ~np.isin(d.ret, bad)
                        acc["r"].append(rel_mse(Yh, d.Yt))
                        acc["r0"].append(rel_mse(Yh0, d.Yt))
                        acc["rx"].append(rel_mse(code.decode(d.Y[keep], d.ret[keep]), d.Yt))
                    rec, above = np.array(acc["rec"]), np.array(acc["above"])
                    rows.append({"model": model.name, "N": N, "A": A, "family": fam, "trials": trials, "lies": rec.size,
                                 "recall": float(rec.mean()), "recall_default": float(np.mean(acc["rec0"])),
                                 "above_floor": float(above.mean()),
                                 "recall_above_floor": float(rec[above].mean()) if above.any() else float("nan"),
                                 "missed_below_floor": int(np.sum(~rec & ~above)),
                                 "honest_flagged": float(np.mean(acc["hon"])), "rel_mse": float(np.mean(acc["r"])),
                                 "rel_mse_default": float(np.mean(acc["r0"])), "excluded": float(np.mean(acc["rx"]))})
            log(f"{model.name} N={N}: {time.perf_counter() - t0:.0f} s")
    return rows, hrows


def _pool(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Rows pooled over what `keys` leaves out: recalls weighted by lies, the rest averaged."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, rs in groups.items():
        lies = np.array([r["lies"] for r in rs], dtype=float)
        above = np.array([r["above_floor"] for r in rs]) * lies
        hit_above = np.nan_to_num(np.array([r["recall_above_floor"] for r in rs])) * above
        out.append({**dict(zip(keys, key, strict=True)), "lies": int(lies.sum()),
                    "recall": float(np.sum([r["recall"] for r in rs] * lies) / lies.sum()),
                    "recall_default": float(np.sum([r["recall_default"] for r in rs] * lies) / lies.sum()),
                    "above_floor": float(above.sum() / lies.sum()),
                    "recall_above_floor": float(hit_above.sum() / above.sum()) if above.sum() else float("nan"),
                    "above": int(round(above.sum())), "missed_above": int(round(above.sum() - hit_above.sum())),
                    "harm": float(np.mean([r["rel_mse"] / r["excluded"] for r in rs])),
                    "harm_default": float(np.mean([r["rel_mse_default"] / r["excluded"] for r in rs]))})
    return out


def _f(v: float, digits: int = 3) -> str:
    return "n/a" if not np.isfinite(v) else f"{v:.{digits}f}"


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) `level` interval of a rate from k events in n runs."""
    from scipy.stats import beta

    a = (1 - level) / 2
    return (float(beta.ppf(a, k, n - k + 1)) if k else 0.0, float(beta.ppf(1 - a, k + 1, n - k)) if k < n else 1.0)


def _pct(k: int, n: int) -> str:
    lo, hi = clopper_pearson(k, n)
    return f"{k}/{n} ({100 * k / n:.2f}%; {100 * lo:.2f}-{100 * hi:.2f}%)"


def markdown(rows: list[dict], hrows: list[dict], command: str, args: argparse.Namespace) -> str:
    """The generated page: false alarms, recall per family, N and A (pooled over models), per model."""
    fams = sorted({r["family"] for r in rows}, key=list(adv.PLAUSIBLE).index)
    worst = max(hrows, key=lambda h: h["fa_calibrated"] / h["runs"])
    lines = [f"Generated by `{command}`; do not edit by hand.", "",
             f"GCC, K = {K}, S = {S} random stragglers, A of the returned workers return a plausible wrong result "
             f"(`gencc.adversaries.PLAUSIBLE`); models: {', '.join(sorted({r['model'] for r in rows}))} "
             f"(benchmarks/investigations/robust_plausible.py). Calibrated: `robust.calibrate` on {args.calibration} "
             f"honest runs "
             f"per (model, N, A) for a nominal false-alarm rate of {100 * args.false_alarm:g}% at confidence 0.9 "
             f"(the rate is at most that with probability 0.9 over the calibration draw); default: "
             f"the fixed threshold {robust.DEFAULT_THRESHOLD:g}. Above the floor: the lie's own score, with every "
             "other liar already left out, exceeds the calibrated threshold (the honest floor); below it the "
             "others cannot tell the lie from a right result at that false-alarm rate.", "",
             f"False alarms on held-out honest runs ({hrows[0]['runs']} per row, seeds disjoint from the "
             f"{args.calibration} calibration runs and from the trials) flagging anyone, with the Clopper-Pearson "
             "95% interval of the rate, and the threshold (a fraction of the results' robust spread):", ""]
    lines += table(["model", "N", "A", "calibrated threshold", "false alarms, calibrated", "false alarms, default"],
                   ([h["model"], str(h["N"]), str(h["A"]), f"{h['threshold']:.4f}",
                     _pct(h["fa_calibrated"], h["runs"]), _pct(h["fa_default"], h["runs"])] for h in hrows))
    tot = sum(h["runs"] for h in hrows)
    lines += ["", f"All rows: {_pct(sum(h['fa_calibrated'] for h in hrows), tot)} calibrated, "
              f"{_pct(sum(h['fa_default'] for h in hrows), tot)} default; worst calibrated row: {worst['model']}, "
              f"N = {worst['N']}, A = {worst['A']}: {_pct(worst['fa_calibrated'], worst['runs'])}.", "",
              f"Recall per family, N and A, pooled over the models ({rows[0]['trials']} trials per model): recall "
              "over every lie and over the lies above the floor (missed: how many of those), the share above the "
              "floor, and the harm: mean over models of robust rel_mse / the best possible (the liars as "
              "stragglers).", ""]
    pooled = sorted(_pool(rows, ("N", "A", "family")), key=lambda r: (r["N"], r["A"], fams.index(r["family"])))
    lines += table(["N", "A", "family", "lies", "above floor", "recall above floor (missed)", "recall, all",
                    "recall, default threshold", "harm", "harm, default"],
                   ([str(r["N"]), str(r["A"]), r["family"], str(r["lies"]), _f(r["above_floor"], 2),
                     f"{_f(r['recall_above_floor'])} ({r['missed_above']})", _f(r["recall"]),
                     _f(r["recall_default"]), f"{r['harm']:.2f}", f"{r['harm_default']:.2f}"] for r in pooled))
    per = sorted(_pool(rows, ("model", "N", "A")), key=lambda r: (r["model"], r["N"], r["A"]))
    lines += ["", "Per model, N and A, over every family:", ""]
    lines += table(["model", "N", "A", "lies", "above floor", "recall above floor (missed)", "recall, all",
                    "recall, default threshold"],
                   ([r["model"], str(r["N"]), str(r["A"]), str(r["lies"]), _f(r["above_floor"], 2),
                     f"{_f(r['recall_above_floor'])} ({r['missed_above']})", _f(r["recall"]),
                     _f(r["recall_default"])] for r in per))
    return "\n".join(lines) + "\n"


MODELS = ("mlp-digits", "torch-cls", "mlp-regress", "cnn-digits")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=60, help="adversarial trials per (model, N, A, family)")
    ap.add_argument("--honest", type=int, default=1000, help="held-out honest runs the false alarms are counted on")
    ap.add_argument("--models", nargs="+", default=list(MODELS[:3]), choices=MODELS,
                    help="default: the three trained here, independently of gencc")
    ap.add_argument("--families", nargs="+", default=list(adv.PLAUSIBLE), choices=adv.PLAUSIBLE)
    ap.add_argument("--N", nargs="+", type=int, default=list(NS))
    ap.add_argument("--calibration", type=int, default=1000, help="honest runs the threshold is calibrated on")
    ap.add_argument("--false-alarm", type=float, default=0.005, help="the nominal rate robust.calibrate is asked")
    ap.add_argument("--per-worker", action="store_true", help="calibrate per-worker weights (robust.calibrate)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if not 0 < args.false_alarm < 1:
        ap.error(f"--false-alarm must lie in (0, 1), got {args.false_alarm}")
    need = robust.runs_needed(args.false_alarm) + (args.calibration // 3 if args.per_worker else 0)
    if not 1 <= args.trials <= MAX_RUNS or not 1 <= args.honest <= MAX_RUNS or not need <= args.calibration <= MAX_RUNS:
        ap.error(f"trials and honest must lie in [1, {MAX_RUNS}], calibration in [{need}, {MAX_RUNS}] (a rate of "
                 f"{args.false_alarm:g} at confidence 0.9 needs {need} runs)")
    small = [n for n in args.N if n <= K or n - S < robust.min_results(gencc.GCC(K, n), max(AS))]
    if small:
        ap.error(f"N={small[0]} is too small: a robust decode of A = {max(AS)} from N - {S} results needs more")
    models = [m for m in independent_models() if m.name in args.models]
    if "torch-cls" in args.models:
        models.insert(1, torch_model())
    if "cnn-digits" in args.models:
        models.append(builtin_model())
    rows, hrows = measure(models, tuple(args.N), AS, tuple(args.families), args.trials, args.honest,
                          args.calibration, args.false_alarm, per_worker=args.per_worker)
    for r in rows:
        print(f"{r['model']:12s} N={r['N']} A={r['A']} {r['family']:12s} recall {r['recall']:.3f} "
              f"(default {r['recall_default']:.3f}) above-floor {r['above_floor']:.2f} recall(above) "
              f"{r['recall_above_floor']:.3f} honest/trial {r['honest_flagged']:.3f} rel {r['rel_mse']:.2e} "
              f"(default {r['rel_mse_default']:.2e}) best {r['excluded']:.2e}")
    if args.out:
        cmd = "python benchmarks/investigations/robust_plausible.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown(rows, hrows, cmd.strip(), args))
        print(f"wrote {args.out}")
    for h in hrows:
        print(f"honest {h['model']} N={h['N']} A={h['A']}: threshold {h['threshold']:.4f} false alarms "
              f"{h['fa_calibrated']}/{h['runs']} (default threshold: {h['fa_default']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
