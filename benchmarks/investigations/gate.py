"""Answered: which schemes the calibrated gate lets send decoded answers (docs/guides/serving.md, the gate).

The serving gate's frontier: top-1 agreement of the degraded answers sent against the latency tail, as the
gate's threshold varies, per model and scheme, in the virtual-time serving simulator.

    python benchmarks/investigations/gate.py --out docs/generated/gate_frontier.md
    python benchmarks/investigations/gate.py --models mlp --schemes gcc --duration 20        # a quick look
    python benchmarks/investigations/gate.py --real --frontier --schemes sgcc sgcc-parity --duration 30 --repeat 3 \
        --timeline 4 --out docs/generated/gate_real.md                         # real threads, wall clock
    python benchmarks/investigations/gate.py --seeds 3 --schemes sgcc sgcc-parity --out docs/generated/gate_seeds.md
    python benchmarks/investigations/gate.py --schemes sgcc-hedge sgcc-parity-hedge --out docs/generated/gate_hedge.md

W = 12 workers, K = 8, 40 ms service, persistent stragglers (10% of the time slow x10, periods of 1 s), Poisson
arrivals at 30% of uncoded capacity. Models: digits-cnn (gencc's) and "mlp", a model gencc does not ship: a
two-layer tanh MLP on the flattened sklearn digits (64 inputs), trained here in seconds, with a parity model of
its own (same architecture, trained here with MSE so that F_P(x_1 + x_2) ~ f(x_1) + f(x_2)). Per scheme the gate
is calibrated on *training* inputs (`gencc.serving.calibrate_gate`, its own seed), then every threshold is
served test inputs: the calibrated one, multiples of it, 0 (every decode sent, the deadline copies kept), inf
(no decode sent) and no gate at all. Target: agreement >= 0.95 among degraded answers sent, and a (p99.9 - p50)
gap at most 0.3 of uncoded's. --seeds N: the calibration itself at N seeds, each threshold served. --real: the
service's own gate (and with --frontier the thresholds around it) on worker threads, each row --repeat times;
--timeline N prints the N slowest requests of each row task by task, with garbage-collector pauses, the load
average and the workers' lags (on a shared machine, one stall of the process delays a whole group at once).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from gencc.engine import ThreadBackend, VirtualWorkers, Workers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import (
    CALIBRATION_RUNS,
    Gate,
    Memo,
    Service,
    ServiceConfig,
    Slowdown,
    calibrate_gate,
    freeze_heap,
    make_dispatcher,
    service_gate,
    simulate_load,
)
from gencc.serving.parity import calibrate_sgcc, coded_workers

W, K, SERVICE_MS, SLOW_F, SLOW_X, LOAD = 12, 8, 40.0, 0.1, 10.0, 0.3
SCHEMES = ("gcc", "sgcc", "bacc", "sgcc-parity")
#: every coded scheme --schemes takes (the coded hedges and ParM too)
CODED = (*SCHEMES, "parm", "gcc-hedge", "sgcc-hedge", "sgcc-parity-hedge", "parm-hedge")
BAR_AGREEMENT, BAR_GAP = 0.95, 0.3
COMMAND = "python benchmarks/investigations/gate.py --out docs/generated/gate_frontier.md"


class TorchModel:
    """A torch module as a batched numpy callable (float64 out), the way a user wraps their own model."""

    batched = True

    def __init__(self, module: torch.nn.Module):
        self.module = module.eval()

    def __call__(self, X: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.module(torch.as_tensor(np.asarray(X, dtype=np.float32))).double().numpy()



class UserModel:
    """Workload-like: what the serving code needs of a model (f, X_train, name)."""

    def __init__(self, name: str, f, X_train: np.ndarray, X_test: np.ndarray, parity=None):
        self.name, self.f, self.X_train, self.X_test, self.parity = name, f, X_train, X_test, parity


def _mlp(d: int, hidden: int = 48) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden),
                               torch.nn.Tanh(), torch.nn.Linear(hidden, 10))


def mlp_model(seed: int = 0) -> UserModel:
    """The MLP of the module docstring and its parity model (k = 2), trained on sklearn digits."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    Xtr, Xte, ytr, _ = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)
    torch.manual_seed(seed)
    net = _mlp(64)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    Xt, yt = torch.as_tensor(Xtr), torch.as_tensor(ytr)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(Xt), yt).backward()
        opt.step()
    f = TorchModel(net)
    par = _mlp(64)
    par.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(par.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        Ft = net(Xt)
    for _ in range(3000):
        i, j = torch.randint(len(Xt), (2, 256), generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(par(Xt[i] + Xt[j]), Ft[i] + Ft[j]).backward()
        opt.step()
    return UserModel("mlp", f, Xtr, Xte, TorchModel(par))


def cnn_model() -> UserModel:
    from gencc.workloads import load, load_parity

    w = load("digits-cnn", progress=False)
    return UserModel("digits-cnn", w.f, w.X_train, w.X_test, load_parity("digits-cnn", 2, progress=False))


def _env(m: UserModel, X: np.ndarray, seed: int) -> VirtualWorkers:
    fns = {"f": Memo(m.f, X), "parity": m.parity}
    return VirtualWorkers(W, ServiceTimes(SERVICE_MS / 1000), PersistentStragglers(W, SLOW_F, SLOW_X, 1.0, seed=seed),
                          functions=fns, seed=seed)


def _rate() -> float:
    return LOAD * W / (SERVICE_MS / 1000 * (1 - SLOW_F + SLOW_F * SLOW_X))


def measure(m: UserModel, scheme: str, gate: Gate | None, duration: float, seed: int, cal) -> dict:
    """One served run on test inputs: latency percentiles, degraded answers sent and their agreement."""
    X = m.X_test
    env = _env(m, X, seed)
    extra = {} if scheme == "uncoded" else {"gate": gate, "parity": m.parity, "calibration": cal}
    reqs = simulate_load(lambda e: make_dispatcher(scheme, e, K=K, seed=seed, **extra), env, _rate(), duration,
                         inputs=None if scheme == "uncoded" else X, seed=seed)
    lat = np.array([r.latency for r in reqs if r.status == 200]) * 1000
    top = np.argmax(env.functions["f"](X).reshape(len(X), -1), axis=1)
    deg = [r for r in reqs if r.degraded]
    agree = float(np.mean([np.argmax(r.output) == top[r.id % len(X)] for r in deg])) if deg else math.nan
    p50, p999 = np.percentile(lat, [50, 99.9])
    return {"n": len(reqs), "ok": int(lat.size), "degraded": len(deg) / len(reqs), "agreement": agree,
            "held": sum(r.gate == "held" for r in reqs) / len(reqs), "p50": p50, "p999": p999, "gap": p999 - p50}


def measure_real(m: UserModel, scheme: str, duration: float, seed: int, timeline=None, freeze: bool = True,
                 threshold: float | None = None, run: int = 0) -> dict:
    """The same conditions on the engine's worker threads (wall clock): the service's own gate (calibrated in
    the background on training inputs; waited for; or, given `threshold`, a gate at it), Poisson arrivals of test
    inputs for `duration` seconds; `run` varies the arrivals and slow periods (not the calibration)."""
    cfg = ServiceConfig(scheme=scheme, workers=W, K=K, seed=seed)
    slow = Slowdown(service_ms=SERVICE_MS, slow_fraction=SLOW_F, slow_factor=SLOW_X)
    cal = (calibrate_sgcc(m.f, K, coded_workers(K, W), m.parity, data=m.X_train) if scheme.startswith("sgcc-parity")
           else None)
    fns = {"f": m.f} if m.parity is None else {"f": m.f, "parity": m.parity}

    def make(gate):
        extra = {} if scheme == "uncoded" else {"gate": gate, "parity": m.parity, "calibration": cal}
        return lambda env: make_dispatcher(scheme, env, K=K, seed=seed, max_wait=cfg.max_wait_ms / 1000, **extra)

    gate = service_gate(cfg, slow, make, fns, m.X_train, key=m.name)
    if gate is not None:
        gate.ready.wait()
    calibrated = math.nan if gate is None else gate.threshold
    if gate is not None and threshold is not None:
        gate = Gate(threshold, calibration=gate.calibration)
        gate.ready.set()
    seed = seed + 1000 * run
    pool = Workers(W, ThreadBackend(fns, dtype=np.float32), slow.service_times(), slow.stragglers(W, seed), seed=seed)
    svc = Service(pool, make(gate))
    if freeze:
        freeze_heap()  # as `gencc serve` does: a full collection scanning the models' objects stalls every thread
    pauses = GcPauses()
    rng = np.random.default_rng([seed, 5])
    gaps = rng.exponential(1 / _rate(), size=int(_rate() * duration * 1.3) + 10)
    idx = rng.integers(len(m.X_test), size=gaps.size)
    futs, t0, t = [], time.monotonic(), 0.0
    try:
        for g, i in zip(gaps, idx, strict=True):
            t += g
            if t > duration:
                break
            time.sleep(max(0.0, t0 + t - time.monotonic()))
            futs.append((i, svc.submit(m.X_test[i])))
        reqs = [(i, f.result(timeout=120)) for i, f in futs]
    finally:
        svc.close()
        pauses.stop()
        gc.unfreeze()
    if timeline is not None:
        timeline(scheme, [r for _, r in reqs], pool, pauses)
    top = np.argmax(m.f(m.X_test), axis=1)
    lat = np.array([r.latency for _, r in reqs if r.status == 200]) * 1000
    deg = [(i, r) for i, r in reqs if r.degraded]
    agree = float(np.mean([np.argmax(r.output) == top[i] for i, r in deg])) if deg else math.nan
    p50, p999 = np.percentile(lat, [50, 99.9])
    return {"n": len(reqs), "degraded": len(deg) / len(reqs), "agreement": agree,
            "held": sum(r.gate == "held" for _, r in reqs) / len(reqs), "p50": p50, "p999": p999, "gap": p999 - p50,
            "threshold": math.nan if gate is None else gate.threshold, "calibrated": calibrated,
            "load": os.getloadavg()[0]}


class GcPauses:
    """The garbage collector's pauses while installed (wall-clock start, seconds)."""

    def __init__(self):
        self.pauses: list[tuple[float, float]] = []
        self._t0 = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.monotonic()
        else:
            self.pauses.append((self._t0, time.monotonic() - self._t0))

    def stop(self) -> None:
        gc.callbacks.remove(self._cb)


def _span(t, t0: float) -> str:
    """A task as `kind@worker[slow] sent+start..end` in ms after the request's arrival t0 (x: cancelled)."""
    f = lambda v: "-" if math.isnan(v) else f"{(v - t0) * 1000:.0f}"  # noqa: E731
    return (f"{t.kind}{'/' + str(t.slot) if t.kind == 'coded' else ''}@{t.worker}{'S' if t.slow else ''}"
            f"{'x' if t.cancelled and math.isnan(t.t_end) else ''} {f(t.t_sent)}>{f(t.t_start)}..{f(t.t_end)}")


def print_timelines(n: int):
    """A `timeline` hook for measure_real: the n slowest requests' task timelines and the workers' lags."""
    def show(scheme: str, reqs: list, pool, pauses: GcPauses) -> None:
        ok = sorted((r for r in reqs if r.status == 200), key=lambda r: -r.latency)
        gcs = [d for _, d in pauses.pauses]
        print(f"--- {scheme}: {n} slowest of {len(ok)}; load average {os.getloadavg()[0]:.1f}; gc pauses "
              f"{len(gcs)}, max {max(gcs, default=0) * 1000:.1f} ms; lags (post/timer/pickup p99, max ms): "
              + ", ".join(f"{k} {np.percentile(v, 99) * 1000:.1f}/{max(v) * 1000:.1f}"
                          for k, v in pool.lags.items() if v))
        for r in ok[:n]:
            g = r.group
            mine = [] if g is None else g.tasks
            print(f"  {r.latency * 1000:.0f} ms {'degraded' if r.degraded else 'own'} gate={r.gate or '-'} "
                  f"z={r.gate_score:.2f} members={len(g.members) if g else 0}: "
                  + "; ".join(_span(t, r.t_arrival) for t in r.tasks + mine))
    return show


def _settings(t: float, frontier: bool) -> list[tuple[str, float | None]]:
    """The gate settings of a real-thread row: the calibrated one, and with `frontier` 0, 2 x and inf."""
    if not frontier:
        return [(f"calibrated {t:.2f}", None)]
    if not math.isfinite(t):
        return [("0", 0.0), ("calibrated inf", None), *((f"{x:.2f} (calibration: none qualifies)", x) for x in (2, 4))]
    more = (f"2 x cal = {2 * t:.2f}", 2 * t) if t > 0 else ("1.00", 1.0)
    return [*([("0", 0.0)] if t > 0 else []), (f"**calibrated {t:.2f}**", None), more, ("inf", math.inf)]


def run_real(args: argparse.Namespace) -> list[list[str]]:
    rows = []
    hook = print_timelines(args.timeline) if args.timeline else None
    for name in args.models:
        m = mlp_model() if name == "mlp" else cnn_model()
        for run in range(args.repeat):
            base = None
            for scheme in ("uncoded", *args.schemes):
                cal = measure_real(m, scheme, args.duration, args.seed, hook, not args.no_freeze, run=run)
                settings = [("", None)] if scheme == "uncoded" else _settings(cal["calibrated"], args.frontier)
                for label, thr in settings:
                    r = cal if thr is None else measure_real(m, scheme, args.duration, args.seed, hook,
                                                             not args.no_freeze, thr, run)
                    base = base or r
                    ratio = r["gap"] / base["gap"]
                    meets = scheme != "uncoded" and ratio <= BAR_GAP and (
                        r["degraded"] == 0 or (not math.isnan(r["agreement"]) and r["agreement"] >= BAR_AGREEMENT))
                    rows.append([name, str(run + 1), scheme, label, str(r["n"]), f"{r['agreement']:.3f}",
                                 f"{r['degraded']:.3f}", f"{r['held']:.3f}", f"{r['p50']:.1f}", f"{r['p999']:.1f}",
                                 f"{r['gap']:.1f}", f"{ratio:.2f}",
                                 "" if scheme == "uncoded" else ("yes" if meets else "no"), f"{r['load']:.1f}"])
                    print(" | ".join(rows[-1]), flush=True)
    return rows


HEAD_REAL = ["model", "run", "scheme", "gate threshold", "requests", "agreement of degraded sent", "degraded sent",
             "held", "p50 ms", "p99.9 ms", "gap ms", "gap / uncoded", "meets targets", "load average (1 min)"]


def _calibrate(m: UserModel, scheme: str, seed: int, duration: float):
    """(the gate's calibration on training inputs at calibration seed `seed`, SGCC's parity prior or None)."""
    cal = (calibrate_sgcc(m.f, K, coded_workers(K, W), m.parity, data=m.X_train) if scheme.startswith("sgcc-parity")
           else None)

    def make(gate):
        return lambda env: make_dispatcher(scheme, env, K=K, seed=seed, gate=gate, parity=m.parity, calibration=cal)

    return calibrate_gate(make, {"f": m.f, "parity": m.parity}, m.X_train, workers=W, service_ms=SERVICE_MS,
                     slow_fraction=SLOW_F, slow_factor=SLOW_X, load=LOAD, duration=duration, seed=seed), cal


def run_seeds(args: argparse.Namespace) -> list[list[str]]:
    """Per model and scheme, the gate calibrated at `args.seeds` calibration seeds, each threshold served."""
    rows = []
    for name in args.models:
        m = mlp_model() if name == "mlp" else cnn_model()
        base = measure(m, "uncoded", None, args.duration, args.seed, None)
        for scheme in args.schemes:
            for j in range(args.seeds):
                gc, cal = _calibrate(m, scheme, args.seed + 100 + 10 * j, args.cal_duration)
                r = measure(m, scheme, Gate(gc.threshold), args.duration, args.seed, cal)
                lo, hi = gc.spread()
                ratio = r["gap"] / base["gap"]
                meets = ratio <= BAR_GAP and (r["degraded"] == 0 or r["agreement"] >= BAR_AGREEMENT)
                rows.append([name, scheme, str(args.seed + 100 + 10 * j), f"{gc.threshold:.2f}",
                             f"{lo:.2f} - {hi:.2f}", str(gc.candidates), f"{r['agreement']:.3f}",
                             f"{r['degraded']:.3f}", f"{ratio:.2f}", "yes" if meets else "no"])
                print(" | ".join(rows[-1]), flush=True)
    return rows


HEAD_SEEDS = ["model", "scheme", "calibration seed", "threshold", "bootstrap quartiles", "degraded requests in "
              "calibration", "agreement of degraded sent (test inputs)", "degraded sent", "gap / uncoded",
              "meets targets"]


def run(args: argparse.Namespace) -> list[list[str]]:
    rows = []
    for name in args.models:
        t0 = time.time()
        m = mlp_model() if name == "mlp" else cnn_model()
        base = measure(m, "uncoded", None, args.duration, args.seed, None)
        rows.append([name, "uncoded", "", "", "0", "", "", f"{base['p50']:.1f}", f"{base['p999']:.1f}",
                     f"{base['gap']:.1f}", "1.00", ""])
        for scheme in args.schemes:
            gc, cal = _calibrate(m, scheme, args.seed + 100, args.cal_duration)
            t = gc.threshold
            settings = [("no gate", None), ("0", 0.0)]
            if math.isfinite(t):
                settings += [(f"0.5 x cal = {0.5 * t:.2f}", 0.5 * t), (f"**calibrated {t:.2f}**", t),
                             (f"2 x cal = {2 * t:.2f}", 2 * t)]
            else:
                settings += [(f"{x:.2f} (calibration: none qualifies)", x) for x in (2.0, 4.0)]
            settings.append(("inf", math.inf))
            for label, thr in settings:
                r = measure(m, scheme, None if thr is None else Gate(thr), args.duration, args.seed, cal)
                ratio = r["gap"] / base["gap"]
                meets = ratio <= BAR_GAP and (r["degraded"] == 0 or r["agreement"] >= BAR_AGREEMENT)
                rows.append([name, scheme, label, f"{r['agreement']:.3f}", f"{r['degraded']:.3f}", f"{r['held']:.3f}",
                             str(gc.candidates),
                             f"{r['p50']:.1f}", f"{r['p999']:.1f}", f"{r['gap']:.1f}", f"{ratio:.2f}",
                             "yes" if meets else "no"])
                print(" | ".join(rows[-1]), flush=True)
        print(f"{name}: {time.time() - t0:.0f} s", file=sys.stderr)
    return rows


HEAD = ["model", "scheme", "gate threshold", "agreement of degraded sent", "degraded sent", "held",
        "degraded requests in calibration", "p50 ms", "p99.9 ms", "gap ms", "gap / uncoded", "meets targets"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["digits-cnn", "mlp"], choices=["digits-cnn", "mlp"])
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(CODED))
    ap.add_argument("--duration", type=float, default=90.0, help="virtual seconds served per point (default 90)")
    ap.add_argument("--cal-duration", type=float, default=60.0,
                    help="virtual seconds of the calibration run on training inputs (default 60)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--real", action="store_true",
                    help="serve on real worker threads (wall clock) instead of the simulator: uncoded and each scheme "
                         "with its calibrated gate, --duration seconds each")
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="--real: print the task timelines of each row's N slowest requests")
    ap.add_argument("--seeds", type=int, default=0, metavar="N",
                    help="virtual time: calibrate each scheme at N calibration seeds and serve each threshold")
    ap.add_argument("--frontier", action="store_true",
                    help="--real: each scheme also at gate thresholds 0, 2 x calibrated and inf")
    ap.add_argument("--repeat", type=int, default=1,
                    help="--real: serve every row this many times (other arrivals and slow periods, same calibration)")
    ap.add_argument("--no-freeze", action="store_true",
                    help="--real: leave the heap to the garbage collector (gencc serve freezes it after start-up)")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = ap.parse_args(argv)
    if not (args.duration > 0 and args.cal_duration > 0):
        ap.error("--duration and --cal-duration must be positive")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.seeds and args.real:
        ap.error("--seeds is a virtual-time table; leave out --real")
    torch.set_num_threads(1)
    rows = run_real(args) if args.real else run_seeds(args) if args.seeds else run(args)
    if args.out is not None:
        cmd = COMMAND if argv is None and sys.argv[1:] == ["--out", str(args.out)] else \
            "python benchmarks/investigations/gate.py " + " ".join(sys.argv[1:] if argv is None else argv)
        where = "real worker threads, wall clock, on a shared 2-core machine" if args.real else "virtual time"
        head = HEAD_REAL if args.real else HEAD_SEEDS if args.seeds else HEAD
        lines = [f"Generated by `{cmd}`", "",
                 f"W = {W}, K = {K}, {SERVICE_MS:g} ms service, {SLOW_F:.0%} of workers slow x{SLOW_X:g}, load "
                 f"{LOAD:g}, {args.duration:g} s served per row ({where}), gate calibrated on training inputs "
                 f"({CALIBRATION_RUNS} runs of {args.cal_duration:g} s of virtual time). Targets: agreement >= "
                 f"{BAR_AGREEMENT} and gap <= {BAR_GAP} x uncoded's.", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
