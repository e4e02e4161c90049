"""What the serving path's wrong-result checks buy and cost, in the simulator with the real digits CNN.

W = 16 workers, K = 8, N = 12 (gcc, sgcc-parity), 40 ms service, 10% of workers slow x10, Poisson load 50%.
Wrong results (`WrongResults`, out + scale x rms(out) x standard normal): none; one bad worker on every task (a
broken accelerator); each task with probability 1% (a mercurial core). Per scheme and check (off / on /
strict): latency, answers computed from a wrong result (exact answers that differ from f; decoded answers whose
decode used a wrong result), top-1 agreement with f, tasks per request, verification copies, answers no check
covered, quarantined workers. Uncoded is the reference: one bad result spoils one answer.

    python benchmarks/serving_checks.py --duration 20 --scale 1 --load 0.5 --checks off on
    python benchmarks/serving_checks.py --duration 20 --scale 1 --load 0.3 --checks on strict
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gencc.engine import VirtualWorkers as SimEnv  # noqa: E402
from gencc.faults import PersistentStragglers, ServiceTimes, WrongResults  # noqa: E402
from gencc.serving import simulate_load  # noqa: E402
from gencc.serving.parity import calibrate_sgcc  # noqa: E402
from gencc.serving.service import make_dispatcher  # noqa: E402
from gencc.workloads import load, load_parity  # noqa: E402

W, K = 16, 8


def tainted(r, sys: list[int]) -> bool:
    """A decoded answer whose decode used a result the env corrupted (a pad slot holds its member's result)."""
    g = r.group
    by_slot = {t.slot: t for t in g.tasks if t.ok}
    for slot, m in [(m.slot, m) for m in g.members] + [(sys[k], g.members[g.source[k]])
                                                         for k in range(len(g.members), K)]:
        for t in m.tasks:
            if t.kind == "systematic" and t.ok:
                by_slot[slot] = t
    return any(s in by_slot and by_slot[s].wrong for s in r.decoded_from or ())


def robust_decode_at_serving_size(w, trials: int = 200) -> str:
    """The robust decode of `gencc.codes.robust` on serving's GCC (K = 8, N = 12, ordered groups of test
    inputs): how often an all-honest group flags someone, and how often one noisy result is found."""
    from gencc import GCC, order_inputs

    code = GCC(K, 12, decoder="interpolate")
    rng = np.random.default_rng(0)
    alarms = found = 0
    for _ in range(trials):
        X = w.X_test[rng.choice(len(w.X_test), K, replace=False)]
        Y = w.f(code.encode(X[order_inputs(X)]))
        alarms += code.robust_decode(Y, np.arange(12), adversaries=1)[1].size > 0
        bad = int(rng.integers(12))
        Y[bad] += np.sqrt(np.mean(Y[bad] ** 2)) * rng.standard_normal(Y.shape[1])
        found += bad in code.robust_decode(Y, np.arange(12), adversaries=1)[1]
    return (f"robust_decode(adversaries=1), GCC K=8 N=12, {trials} groups: all-honest groups flagging someone "
            f"{alarms / trials:.3f}; one result + 1 rms noise found {found / trials:.3f}")


def run(scheme, check, wrong, w, parity, calib, load_frac, duration):
    env = SimEnv(W, ServiceTimes(0.04), PersistentStragglers(W, 0.1, 10, 1.0, seed=1),
                 functions={"f": w.f, "parity": parity}, wrong=wrong, seed=0)
    box = {}

    def mk(e):
        box["d"] = make_dispatcher(scheme, e, K=K, parity=parity, calibration=calib, check=check,
                                   check_data=(w.f, w.X_train))
        return box["d"]

    reqs = simulate_load(mk, env, rate=load_frac * W / 0.04, duration=duration, inputs=w.X_test)
    d = box["d"]
    F = w.f(np.stack([r.x for r in reqs]))
    ok = [r for r in reqs if r.status == 200]
    lat = np.array([r.latency for r in ok]) * 1e3
    bad = sum(not np.allclose(r.output, F[r.id], rtol=1e-3, atol=1e-3) for r in ok if not r.degraded)
    bad += sum(tainted(r, d.sys) for r in ok if r.degraded)
    agree = np.mean([np.argmax(r.output) == np.argmax(F[r.id]) for r in ok])
    return {"n": len(reqs), "ok": len(ok), "p50": np.percentile(lat, 50), "p99": np.percentile(lat, 99),
            "p999": np.percentile(lat, 99.9), "wrong": bad, "agree": agree, "tasks": d.tasks_sent / len(reqs),
            "verify": getattr(d, "verifications", 0), "unchecked": getattr(d, "unchecked", None),
            "quarantined": sorted(getattr(d, "quarantined", ())), "bad_tasks": sum(t.wrong for t in env.executed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0, help="virtual seconds of arrivals per run")
    ap.add_argument("--load", type=float, default=0.5, help="offered load (fraction of W / service time)")
    ap.add_argument("--scale", type=float, default=1.0, help="wrong results: noise in units of rms(output)")
    ap.add_argument("--checks", nargs="+", default=["off", "on"], choices=["off", "on", "strict"],
                    help="check modes to run for gcc and sgcc-parity")
    a = ap.parse_args()
    if not (a.duration > 0 and 0 < a.load < 1 and a.scale > 0):
        ap.error("need --duration > 0, 0 < --load < 1 and --scale > 0")
    w = load("digits-cnn", progress=False)
    parity = load_parity("digits-cnn", 2, progress=False)
    calib = calibrate_sgcc(w, K, 12, parity)
    models = {"none": None, "bad worker 3": WrongResults(workers=[3], scale=a.scale),
              "1% of tasks": WrongResults(p=0.01, scale=a.scale)}
    print(robust_decode_at_serving_size(w) + "\n")
    print(f"W={W} K={K} N=12, load {a.load}, {a.duration:.0f} s virtual, wrong-result scale {a.scale}\n")
    print("| wrong results | scheme | check | p50 ms | p99 ms | p99.9 ms | answers from wrong results (tasks wrong) "
          "| top-1 agreement | tasks/request | verification copies | unchecked answers | quarantined |")
    print("|" + "---|" * 12)
    for mname, wrong in models.items():
        for scheme, check in [("uncoded", "off")] + [(s, c) for s in ("gcc", "sgcc-parity") for c in a.checks]:
            t0 = time.perf_counter()
            m = run(scheme, check, wrong, w, parity, calib, a.load, a.duration)
            unchecked = "" if m["unchecked"] is None else f"{m['unchecked'] / m['n']:.1%}"
            print(f"| {mname} | {scheme} | {check} | {m['p50']:.1f} | {m['p99']:.1f} | {m['p999']:.1f} | "
                  f"{m['wrong']} of {m['ok']} ({m['bad_tasks']}) | {m['agree']:.4f} | {m['tasks']:.2f} | "
                  f"{m['verify']} | {unchecked} | {m['quarantined'] or ''} |", flush=True)
            print(f"<!-- {time.perf_counter() - t0:.0f} s -->", file=sys.stderr)


if __name__ == "__main__":
    main()
