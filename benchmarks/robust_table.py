"""Robust decoding against wrong results on the digits CNN (issue 9): accuracy, recall, false alarms, cost.

    python benchmarks/robust_table.py [--trials 100] [--honest-trials 300] [--N 20 40 80] [--section all]

K = 10, S = 2 random stragglers, A in {1, 2, 3} corrupted workers chosen uniformly among the returned ones,
inputs ordered by order_inputs (chain). Every magnitude is in units of the standard deviation of the honest
results (see gencc.adversaries): sign flips, Gaussian random values (3 sd), Gaussian noise (1 sd), a constant
offset (1 sd). Trial t draws its inputs, stragglers and adversaries from seed t, the same for every scheme.
Sections: `main` (robust GCC against the decode with the adversaries treated as stragglers, ApproxIFER on
BACC, BACC's own LOO search), `honest` (false alarms), `tried` (the detectors tried on the way), `smart`
(the Stealth adversary and colluding neighbours), `cost` (robust decode time / plain decode time, N = 80).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gencc
from gencc import adversaries as adv
from gencc.codes import robust
from gencc.metrics import rel_mse
from gencc.workloads import load

K, S = 10, 2
MODELS = ("signflip", "random", "noise", "offset")


def draws(w, code, trials):
    """Per trial: (ordered true outputs, every worker's result, returned workers, rng for the adversary)."""
    for t in range(trials):
        rng = np.random.default_rng(t)
        X, _ = w.sample(K, rng)
        X = X[gencc.order_inputs(X)]
        returned = np.sort(rng.choice(code.N, code.N - S, replace=False))
        yield w.f(X), w.f(code.encode(X)), returned, rng


def main_section(w, Ns, trials):
    print("### Robust GCC against the best possible and against ApproxIFER on BACC\n")
    print("| N | A | adversary | robust GCC rel_mse | adversaries as stragglers | target met | recall | "
          "honest flagged / trial | ApproxIFER (BACC) | BACC, LOO search | BACC, adversaries as stragglers |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for N in Ns:
        gcc, bacc = gencc.GCC(K, N), gencc.BACC(K, N)
        data = list(draws(w, gcc, trials))
        bdata = list(draws(w, bacc, trials))
        for A in (1, 2, 3):
            for name in MODELS:
                model = adv.get_adversary(name, A)
                r, rx, rec, fa, ra, rb, rbx = [], [], [], [], [], [], []
                for (Yt, Y, ret, rng), (Ytb, Yb, retb, _) in zip(data, bdata, strict=True):
                    seed = int(rng.integers(2**31))
                    Yc, bad = model.corrupt(Y[ret], ret, np.random.default_rng(seed), gcc)
                    Yh, fl = gcc.robust_decode(Yc, ret, adversaries=A)
                    keep = ~np.isin(ret, bad)
                    r.append(rel_mse(Yh, Yt))
                    rx.append(rel_mse(gcc.decode(Y[ret[keep]], ret[keep]), Yt))
                    rec.append(np.isin(bad, fl).mean())
                    fa.append(np.setdiff1d(fl, bad).size)
                    Ycb, badb = model.corrupt(Yb[retb], retb, np.random.default_rng(seed), bacc)
                    ra.append(rel_mse(bacc.robust_decode(Ycb, retb, adversaries=A, method="approxifer")[0], Ytb))
                    rb.append(rel_mse(bacc.robust_decode(Ycb, retb, adversaries=A)[0], Ytb))
                    kb = ~np.isin(retb, badb)
                    rbx.append(rel_mse(bacc.decode(Yb[retb[kb]], retb[kb]), Ytb))
                m, mx = np.mean(r), np.mean(rx)
                print(f"| {N} | {A} | {name} | {m:.2e} | {mx:.2e} | {'yes' if m <= 2 * mx + 1e-4 else 'NO'} | "
                      f"{np.mean(rec):.3f} | {np.mean(fa):.3f} | {np.mean(ra):.2e} | {np.mean(rb):.2e} | "
                      f"{np.mean(rbx):.2e} |", flush=True)


def honest_section(w, Ns, trials):
    print(f"\n### False alarms: all-honest runs ({trials} trials per cell): fraction of trials flagging anyone\n")
    print("| N | A = 1 | A = 2 | A = 3 | mean rel_mse robust / plain |")
    print("|---|---|---|---|---|")
    for N in Ns:
        code = gencc.GCC(K, N)
        flags = {A: [] for A in (1, 2, 3)}
        ratio = []
        for Yt, Y, ret, _ in draws(w, code, trials):
            plain = rel_mse(code.decode(Y[ret], ret), Yt)
            for A in (1, 2, 3):
                Yh, fl = code.robust_decode(Y[ret], ret, adversaries=A)
                flags[A].append(fl.size > 0)
                if A == 3:
                    ratio.append((rel_mse(Yh, Yt), plain))
        rr = np.mean([a for a, _ in ratio]) / np.mean([b for _, b in ratio])
        print(f"| {N} | {np.mean(flags[1]):.3f} | {np.mean(flags[2]):.3f} | {np.mean(flags[3]):.3f} | {rr:.2f} |",
              flush=True)


def greedy(code, Y, ret, A, rule):
    """Detectors tried first: remove the top LOO score while it breaks `rule`, recomputing after each."""
    t = code.beta[ret]
    G = robust.loo_matrix(t, code.kernel_for(t.size), 0.0)
    res = robust.downdate_residuals(G, G @ Y)
    scale = robust.robust_spread(Y)
    out: list[int] = []
    for _ in range(A):
        sc = np.sqrt(np.mean(res([tuple(out)] if out else [()])[0] ** 2, axis=1))
        sc[out] = 0.0
        live = np.setdiff1d(np.arange(t.size), out)
        limit = 6 * np.median(sc[live]) if rule == "median" else robust.DEFAULT_THRESHOLD * scale
        j = int(np.argmax(sc))
        if sc[j] <= limit:
            break
        out.append(j)
    return ret[np.sort(np.asarray(out, dtype=np.int64))]


def tried_section(w, Ns, trials):
    print("\n### Detectors tried (GCC; recall over signflip + offset, false alarms over all-honest runs)\n")
    print("| detector | N | recall, A = 2 | recall, A = 3 | honest runs flagging anyone (A = 3) |")
    print("|---|---|---|---|---|")
    variants = [("greedy, flag above 6 x median LOO residual", lambda c, Y, r, A: greedy(c, Y, r, A, "median")),
                (f"greedy, flag above {robust.DEFAULT_THRESHOLD} x robust spread",
                 lambda c, Y, r, A: greedy(c, Y, r, A, "spread")),
                ("subset search, energy drop, gap-rescaled (the default)",
                 lambda c, Y, r, A: c.robust_decode(Y, r, adversaries=A)[1])]
    for label, detect in variants:
        for N in Ns:
            code = gencc.GCC(K, N)
            rec = {2: [], 3: []}
            fa = []
            for _, Y, ret, rng in draws(w, code, trials):
                fa.append(detect(code, Y[ret], ret, 3).size > 0)
                for A in (2, 3):
                    for name in ("signflip", "offset"):
                        Yc, bad = adv.get_adversary(name, A).corrupt(Y[ret], ret, rng, code)
                        rec[A].append(np.isin(bad, detect(code, Yc, ret, A)).mean())
            print(f"| {label} | {N} | {np.mean(rec[2]):.3f} | {np.mean(rec[3]):.3f} | {np.mean(fa):.3f} |",
                  flush=True)


def smart_section(w, Ns, trials):
    print("\n### Smart adversaries: harm left undetected, against uncoded\n")
    print("Stealth: the A neighbouring workers the decode leans on most add a common offset to one output "
          "coordinate, the largest robust GCC does not flag; uncoded: the same A workers each spoil their own "
          "answer by that offset (the harm uncoded cannot even detect). bump: A colluding neighbours add a "
          "smooth arch of height 1 sd.\n")
    print("| N | A | stealth offset (sd) | robust GCC rel_mse | adversaries as stragglers | uncoded, same offset "
          "| bump: recall | bump: rel_mse / as stragglers |")
    print("|---|---|---|---|---|---|---|---|")
    for N in Ns:
        code = gencc.GCC(K, N)
        for A in (1, 2, 3):
            mag, r, rx, ru, brec, br, brx = [], [], [], [], [], [], []
            for Yt, Y, ret, rng in draws(w, code, trials):
                Yc, bad = adv.Stealth(A).corrupt(Y[ret], ret, rng, code)
                pos = np.isin(ret, bad)
                mag.append(np.abs(Yc[pos] - Y[ret][pos]).max() / adv.spread(Y[ret]))
                r.append(rel_mse(code.robust_decode(Yc, ret, adversaries=A)[0], Yt))
                rx.append(rel_mse(code.decode(Y[ret[~pos]], ret[~pos]), Yt))
                ru.append(A * (mag[-1] * adv.spread(Y[ret])) ** 2 / np.sum(Yt**2))
                Yb, badb = adv.SmoothBump(A).corrupt(Y[ret], ret, rng, code)
                Yh, fl = code.robust_decode(Yb, ret, adversaries=A)
                brec.append(np.isin(badb, fl).mean())
                kb = ~np.isin(ret, badb)
                br.append(rel_mse(Yh, Yt))
                brx.append(rel_mse(code.decode(Y[ret[kb]], ret[kb]), Yt))
            print(f"| {N} | {A} | {np.mean(mag):.3f} | {np.mean(r):.2e} | {np.mean(rx):.2e} | {np.mean(ru):.2e} | "
                  f"{np.mean(brec):.3f} | {np.mean(br):.2e} / {np.mean(brx):.2e} |", flush=True)


def cost_section(w, reps=100):
    """CPU time of this thread (time.thread_time, BLAS on one thread): on a shared machine wall-clock time
    mostly measures the other jobs; CPU time does not count the time the process waits for a core."""
    from threadpoolctl import threadpool_limits

    print("\n### Cost at N = 80 (median of interleaved repetitions, CPU ms on one thread; 'new': a new straggler "
          "pattern, every cache cleared (D_F, and the robust decode's LOO factorization); 'cached': the same "
          "pattern again)\n")
    print("| A | plain, new | robust honest, new | robust attacked, new | ratio to plain, new: honest / attacked | "
          "plain, cached | robust honest, cached | robust attacked, cached |")
    print("|---|---|---|---|---|---|---|---|")
    code = gencc.GCC(K, 80)
    Yt, Y, ret, rng = next(draws(w, code, 1))
    Yr = Y[ret]

    def clear():
        code._cache.clear()
        code.__dict__.get("_robust_cache", {}).clear()

    for A in (1, 2, 3):
        Yc, _ = adv.SignFlip(A).corrupt(Yr, ret, rng, code)
        runs = {"plain": lambda: code.decode(Yr, ret),
                "honest": lambda A=A: code.robust_decode(Yr, ret, adversaries=A),
                "attacked": lambda A=A, Yc=Yc: code.robust_decode(Yc, ret, adversaries=A)}
        times = {(k, c): [] for k in runs for c in ("new", "cached")}
        with threadpool_limits(1):
            for _ in range(reps):
                for k, run in runs.items():
                    clear()
                    t = time.thread_time()
                    run()
                    times[(k, "new")].append(time.thread_time() - t)
                    t = time.thread_time()
                    run()
                    times[(k, "cached")].append(time.thread_time() - t)
        m = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
        new = {k: m[(k, "new")] for k in runs}
        print(f"| {A} | {new['plain']:.2f} | {new['honest']:.2f} | {new['attacked']:.2f} | "
              f"{new['honest'] / new['plain']:.1f} / {new['attacked'] / new['plain']:.1f} | "
              f"{m[('plain', 'cached')]:.3f} | {m[('honest', 'cached')]:.2f} | {m[('attacked', 'cached')]:.2f} |",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--honest-trials", type=int, default=300)
    ap.add_argument("--N", type=int, nargs="+", default=[20, 40, 80])
    ap.add_argument("--section", choices=["all", "main", "honest", "tried", "smart", "cost"], default="all")
    args = ap.parse_args()
    t0 = time.perf_counter()
    w = load("digits-cnn", progress=False)
    print(f"digits CNN, K={K}, S={S} random stragglers, threshold {robust.DEFAULT_THRESHOLD} x robust spread\n")
    sec = args.section
    if sec in ("all", "main"):
        main_section(w, args.N, args.trials)
    if sec in ("all", "honest"):
        honest_section(w, args.N, args.honest_trials)
    if sec in ("all", "tried"):
        tried_section(w, [n for n in args.N if n >= 40] or args.N, min(args.trials, 50))
    if sec in ("all", "smart"):
        smart_section(w, [n for n in args.N if n >= 40] or args.N, min(args.trials, 30))
    if sec in ("all", "cost"):
        cost_section(w)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
