"""Answer by the deadline: the most Poisson load each scheme carries with 99% (and 99.9%) of its requests answered
inside a latency bound, in virtual time (the simulator: machine-independent, the same arrivals and slow periods
for every scheme per seed).

    python benchmarks/run.py deadlines --out docs/generated/deadlines.md      # the docs' table (a few minutes)
    python benchmarks/run.py deadlines --duration 20 --seeds 1               # a quick look
    python benchmarks/run.py deadlines --real --duration 20 --seeds 3 --out docs/generated/deadlines-real.md

Setting: W = 12 workers for every scheme, K = 8, 50 ms service, each worker slow x10 about 10% of the time
(exponential periods, mean 1 s); load is a fraction of uncoded's capacity W / E[task time], about 126 requests
per second. Every request carries a latency target of 2x or 4x the service time (100 or 200 ms) and is answered
by it: exactly, decoded from what has arrived (`degraded`), or 504. Requests wait earliest deadline first
(`schedule="edf"`); the "(fifo)" rows are the same schemes queueing in arrival order at the workers, for
comparison.

Schemes: uncoded; hedged requests at their best hedge delay (the observed quantile q of latency, q from 0.5 to
0.99: the q that carries the most load, per bound, shown); replication (2 copies); the default, sgcc, and
sgcc-parity (the default with a parity model), each with its gate calibrated as a service calibrates it. The
coded schemes' workers run the model (digits-cnn: the coded tasks on the real mixed inputs, in virtual time),
so each degraded answer is checked against the model's own top-1 on its input; the baselines run timing only.
Per scheme and bound: the largest load of the grid up to which every load keeps >= 99% (99.9%) inside, and at
that load the share answered exactly inside and the top-1 agreement of the degraded answers with the model.

`--real`: a real `gencc serve` per scheme in its own process, loaded from an HTTP client in this one, several
arrival draws pooled per load, every answer checked against the model computed here, the latest answer against
its target (client- and server-side) and the server's CPU per request beside its misses: see deadlines_real.py.

`--frontier`: the equal-work view, in virtual time and without a latency target (every request is answered, as a
service without `--deadline-ms` answers it): per setting of each scheme, p99.9 latency against the tasks run per
request, at `--frontier-loads` (default 0.3 and 0.6 of uncoded's capacity); `--png` draws it, one panel per load.

    python benchmarks/run.py deadlines --frontier --duration 30 --seeds 2 --out docs/generated/frontier.md \
        --png docs/figures/frontier.png

Settings: uncoded; replication (2 copies); hedged requests with the hedge sent after the observed quantile q of
latency, q = 0.5, 0.75, 0.9, 0.95, 0.99; sgcc (the default: K = 8, load-adaptive redundancy) at K = 4, 6, 8, 10
(on 12 workers N = min(W, 1.5 K) must exceed K, so K = 12 cannot run), and at K = 4 and 8 with every coded task
sent ("full"); gcc at K = 8. The coded schemes run digits-cnn with their gates calibrated per K, as a service
calibrates them. Tasks run count every task a worker started (a queued copy cancelled before it started is not
work; a started one runs to its end); tasks sent count those too.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # measure.py, when run as a script

from measure import generated_by, machine  # noqa: E402

from gencc.engine import VirtualWorkers  # noqa: E402
from gencc.faults import PersistentStragglers, ServiceTimes  # noqa: E402
from gencc.serving import SCHEMES, Gate, calibrate_gate, make_dispatcher, simulate_load  # noqa: E402

SUITE = "deadlines"
LOADS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
HEDGE_QS = [0.5, 0.75, 0.9, 0.95, 0.99]
BOUNDS = (2, 4)  # latency targets, in service times
ROWS = ["uncoded", "uncoded (fifo)", "hedged", "replication", "sgcc", "sgcc (fifo)", "sgcc-parity",
        "sgcc-parity (fifo)"]


CODED = ("sgcc", "sgcc-parity")


class Coded:
    """What a coded scheme runs in the simulator: the workload's functions (the model, f on its inputs looked up
    from a table computed once; the parity model), its decoder calibration and its calibrated gate threshold."""

    def __init__(self, scheme: str, a: argparse.Namespace, X: np.ndarray):
        from gencc.serving import Memo
        from gencc.serving.parity import calibrate_sgcc, coded_workers, parity_k, service_model

        pk = parity_k(scheme, a.K, a.workers, 2)
        _, X_train, self.parity, w = service_model(a.model, pk, False, scheme=scheme)
        self.functions = {"f": Memo(w.f, X)}
        self.calibration = None
        if self.parity is not None:
            self.functions["parity"] = self.parity
            self.calibration = calibrate_sgcc(w, a.K, coded_workers(a.K, a.workers), self.parity)
        self.scheme = scheme
        cal = calibrate_gate(lambda g: (lambda e: self.make(e, a.K, gate=g)), {**self.functions, "f": w.f},
                             X_train[:2000], workers=a.workers, service_ms=a.service_ms, slow_fraction=a.F,
                             slow_factor=a.X)
        self.threshold = float(cal.threshold)

    def make(self, env, K: int, **kw):
        return make_dispatcher(self.scheme, env, K=K, parity=self.parity, calibration=self.calibration, **kw)


def add_arguments(ap) -> None:
    ap.add_argument("--model", default="digits-cnn", help="the workload the coded schemes run (default digits-cnn)")
    ap.add_argument("--duration", type=float, default=60.0, help="virtual seconds of arrivals per run (default 60)")
    ap.add_argument("--seeds", type=int, default=3, help="arrival and slowdown draws pooled per point (default 3)")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--service-ms", type=float, default=50.0)
    ap.add_argument("--F", type=float, default=0.1, help="share of the time a worker is slow (default 0.1)")
    ap.add_argument("--X", type=float, default=10.0, help="slowdown factor (default 10)")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables (markdown) to this file")
    ap.add_argument("--real", action="store_true", help="a real server from an HTTP client instead (see above)")
    ap.add_argument("--real-loads", type=float, nargs="+", default=[0.3, 0.5, 0.7, 1.2, 2.0],
                    help="--real: loads, fractions of uncoded's capacity (default 0.3 0.5 0.7 1.2 2)")
    ap.add_argument("--real-schemes", nargs="+", default=["sgcc", "hedged", "uncoded"],
                    help="--real: the schemes served, one server each (default sgcc hedged uncoded)")
    ap.add_argument("--frontier", action="store_true",
                    help="the equal-work view instead: p99.9 against tasks per request per setting (see above)")
    ap.add_argument("--frontier-loads", type=float, nargs="+", default=[0.3, 0.6],
                    help="--frontier: loads, fractions of uncoded's capacity (default 0.3 0.6)")
    ap.add_argument("--frontier-settings", nargs="+", default=None, metavar="SETTING",
                    help="--frontier: only these settings, named as in its table (default: all; e.g. "
                         "'hedged q=0.9' 'sgcc K=8')")
    ap.add_argument("--png", type=Path, default=None, help="--frontier: also draw the figure to this PNG")


def capacity(a: argparse.Namespace) -> float:
    """Uncoded's capacity, requests per second."""
    return a.workers / (a.service_ms / 1000 * (1 - a.F + a.F * a.X))


def run_point(row: str, q: float | None, load: float, bound: int, a, coded: dict[str, Coded], X: np.ndarray,
              top: np.ndarray) -> dict:
    """One scheme at one load and bound, seeds pooled: inside share, exact inside share, degraded agreement."""
    scheme = row.split(" ")[0]
    schedule = "fifo" if row.endswith("(fifo)") else "edf"
    n = inside = exact = deg = agree = tasks = 0
    for seed in range(a.seeds):
        c = coded.get(scheme)
        model = c is not None
        env = VirtualWorkers(a.workers, ServiceTimes(a.service_ms / 1000),
                             PersistentStragglers(a.workers, a.F, a.X, 1.0, seed=seed), seed=seed,
                             functions=c.functions if model else None)
        kw: dict = {"schedule": schedule, "seed": seed, "request_timeout": 60.0}
        if scheme == "hedged":
            kw["quantile"] = q
        if model:
            kw["gate"] = Gate(c.threshold)

        def make(e, kw=kw, c=c):
            return c.make(e, a.K, **kw) if c is not None else make_dispatcher(scheme, e, K=a.K, **kw)

        reqs = simulate_load(make, env, load * capacity(a), a.duration, inputs=X if model else None, seed=seed,
                             drain=120.0, deadline_ms=bound * a.service_ms)
        late = max(r.t_done - r.deadline for r in reqs)
        if late > 1e-6:
            raise RuntimeError(f"{row} answered {late * 1000:.3f} ms after a deadline")
        n += len(reqs)
        tasks += len(env.executed)
        for r in reqs:
            if r.in_target:
                inside += 1
                if r.degraded:
                    deg += 1
                    agree += int(np.argmax(r.output) == top[r.id % len(X)])
                else:
                    exact += 1
    return {"inside": inside / n, "exact": exact / n, "degraded": deg / n,
            "agree": agree / deg if deg else math.nan, "tasks": tasks / n, "n": n}


def carried(curve: dict[float, dict], share: float) -> float:
    """The largest grid load up to which every load keeps at least `share` inside (0: not even the lowest)."""
    best = 0.0
    for load in LOADS:
        if curve[load]["inside"] < share:
            break
        best = load
    return best


def fmt_share(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.3f}"


#: --frontier's settings: (label, scheme, K, hedge quantile, redundancy "adaptive" (the default) / "full")
FRONTIER = ([("uncoded", "uncoded", None, None, None), ("replication", "replication", None, None, None)]
            + [(f"hedged q={q:g}", "hedged", None, q, None) for q in HEDGE_QS]
            + [(f"sgcc K={k}", "sgcc", k, None, "adaptive") for k in (4, 6, 8, 10)]
            + [(f"sgcc K={k} full", "sgcc", k, None, "full") for k in (4, 8)]
            + [("gcc K=8", "gcc", 8, None, "adaptive")])
DEFAULT_SETTING = "sgcc K=8"


def frontier_point(setting: tuple, load: float, a: argparse.Namespace, coded: dict, X: np.ndarray) -> dict:
    """One setting at one load, seeds pooled, no latency target: p50 / p99 / p99.9 (ms), tasks run and sent per
    request."""
    label, scheme, K, q, red = setting
    c = coded.get((scheme, K))
    lat, run, sent, n = [], 0, 0, 0
    for seed in range(a.seeds):
        env = VirtualWorkers(a.workers, ServiceTimes(a.service_ms / 1000),
                             PersistentStragglers(a.workers, a.F, a.X, 1.0, seed=seed), seed=seed,
                             functions=c.functions if c is not None else None)
        kw: dict = {"seed": seed, "request_timeout": 120.0}
        if q is not None:
            kw["quantile"] = q
        if c is not None:
            kw["gate"] = Gate(c.threshold)
            if red == "full":
                kw["redundancy"] = None

        def make(e, kw=kw, c=c, K=K):
            return c.make(e, K, **kw) if c is not None else make_dispatcher(scheme, e, K=a.K, **kw)

        reqs = simulate_load(make, env, load * capacity(a), a.duration, inputs=X if c is not None else None,
                             seed=seed, drain=300.0)
        if any(r.status != 200 for r in reqs):
            raise RuntimeError(f"{label}: {sum(r.status != 200 for r in reqs)} requests not answered 200")
        lat.append(np.array([r.latency for r in reqs]) * 1000)
        run += len(env.executed)
        sent += len(env.executed) + env.dropped
        n += len(reqs)
    p50, p99, p999 = (float(v) for v in np.percentile(np.concatenate(lat), [50, 99, 99.9]))
    return {"setting": label, "scheme": scheme, "load": load, "p50": p50, "p99": p99, "p999": p999,
            "tasks": run / n, "sent": sent / n, "n": n}


def frontier_table(rows: list[dict], a: argparse.Namespace, argv: list[str], coded: dict) -> str:
    """Markdown: per load, one line per setting; for a hedged one, the coded settings that run no more tasks per
    request and have a lower p99.9."""
    lines = [generated_by(SUITE, argv), "",
             f"Virtual time, no latency target; {machine()} W = {a.workers}, {a.service_ms:g} ms service, slow "
             f"x{a.X:g} {a.F:.0%} of the time; {a.seeds} seeds x {a.duration:g} s per point, pooled; load as a "
             f"fraction of uncoded's capacity ({capacity(a):.0f} requests/s); coded schemes on {a.model}, gate "
             "thresholds " + ", ".join(f"{s} K={k} {c.threshold:.3g}" for (s, k), c in coded.items())
             + f". {DEFAULT_SETTING} (load-adaptive redundancy) is the default. Tasks run: tasks a worker started, "
             "per request; sent: those and the queued copies cancelled before they started. Last column, for a "
             "hedged setting: the coded settings with no more tasks run per request and a lower p99.9 at that "
             "load.", "",
             "| load | setting | tasks run / request | tasks sent / request | p50 (ms) | p99 (ms) | p99.9 (ms) | "
             "coded, <= tasks and lower p99.9 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        beat = ""
        if r["scheme"] == "hedged":
            better = [o["setting"] for o in rows if o["load"] == r["load"] and o["scheme"] in ("sgcc", "gcc")
                      and o["tasks"] <= r["tasks"] and o["p999"] < r["p999"]]
            beat = ", ".join(better) or "none"
        name = r["setting"] + (" (default)" if r["setting"] == DEFAULT_SETTING else "")
        lines.append(f"| {r['load']:g} | {name} | {r['tasks']:.3f} | {r['sent']:.3f} | {r['p50']:,.0f} | "
                     f"{r['p99']:,.0f} | {r['p999']:,.0f} | {beat} |")
    return "\n".join(lines) + "\n"


def frontier_figure(rows: list[dict], a: argparse.Namespace, path: Path) -> None:
    """p99.9 against tasks run per request, one marker per setting, the default ringed; one panel per load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    loads = list(dict.fromkeys(r["load"] for r in rows))
    fig, axes = plt.subplots(1, len(loads), figsize=(5.6 * len(loads), 4.4), sharey=True, squeeze=False)
    style = {"uncoded": ("s", "black"), "replication": ("D", "grey"), "hedged": ("o", "tab:blue"),
             "sgcc": ("^", "tab:orange"), "gcc": ("v", "tab:green")}
    for ax, load in zip(axes[0], loads, strict=True):
        seen = set()
        for r in (r for r in rows if r["load"] == load):
            marker, color = style[r["scheme"]]
            full = r["setting"].endswith("full")
            family = r["scheme"] + (" (every coded task)" if full else "")
            ax.scatter(r["tasks"], r["p999"], marker=marker, s=46, label=None if family in seen else family,
                       facecolors="none" if full else color, edgecolors=color)
            seen.add(family)
            short = r["setting"].removeprefix(r["scheme"]).strip() or r["scheme"]
            ax.annotate(short, (r["tasks"], r["p999"]), textcoords="offset points", xytext=(5, 3), fontsize=7)
            if r["setting"] == DEFAULT_SETTING:
                ax.scatter(r["tasks"], r["p999"], marker="o", s=260, facecolors="none", edgecolors="red",
                           linewidths=1.6, label="the default (sgcc K=8)")
        ax.set_title(f"load {load:g} of uncoded's capacity", fontsize=10)
        ax.set_xlabel("tasks run per request")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("p99.9 latency (ms)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Equal work: W = {a.workers}, {a.service_ms:g} ms service, {a.F:.0%} of the time slow x{a.X:g} "
                 f"(virtual time, {a.seeds} seeds x {a.duration:g} s)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def frontier(a: argparse.Namespace, argv: list[str]) -> str:
    """`--frontier`: every setting of FRONTIER at every load (see above); returns the table, draws `--png`."""
    import copy

    from gencc.workloads import load as load_workload

    t0 = time.perf_counter()
    w = load_workload(a.model, progress=False)
    X = np.asarray(w.X_test[:2000], dtype=np.float32)
    settings = [s for s in FRONTIER if a.frontier_settings is None or s[0] in a.frontier_settings]
    coded = {}
    for _, scheme, K, _, _ in settings:
        if scheme in ("sgcc", "gcc") and (scheme, K) not in coded:
            b = copy.copy(a)
            b.K = K
            coded[(scheme, K)] = Coded(scheme, b, X)
            print(f"{scheme} K={K}: gate threshold {coded[(scheme, K)].threshold:.3g} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = []
    for load in a.frontier_loads:
        for setting in settings:
            rows.append(frontier_point(setting, load, a, coded, X))
            r = rows[-1]
            print(f"load {load:g} {r['setting']}: tasks {r['tasks']:.3f} p99.9 {r['p999']:.0f} ms", flush=True)
    if a.png is not None:
        frontier_figure(rows, a, a.png)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return frontier_table(rows, a, argv, coded)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    if a.seeds < 1 or not a.duration > 0:
        ap.error("--seeds must be >= 1 and --duration positive")
    if a.frontier and (a.real or not all(0 < x < 3 for x in a.frontier_loads)):
        ap.error("--frontier runs in virtual time (not with --real), at --frontier-loads in (0, 3)")
    if a.real and not all(0 < x < 3 for x in a.real_loads):
        ap.error("--real-loads are fractions of uncoded's capacity in (0, 3)")
    if a.real and not set(a.real_schemes) <= set(SCHEMES):
        ap.error(f"unknown --real-schemes {sorted(set(a.real_schemes) - set(SCHEMES))[0]!r}; choose among "
                 + ", ".join(SCHEMES))
    unknown = sorted(set(a.frontier_settings or []) - {s[0] for s in FRONTIER})
    if unknown:
        ap.error(f"unknown --frontier-settings {unknown[0]!r}; choose among " + ", ".join(s[0] for s in FRONTIER))
    print(machine(), flush=True)
    if a.frontier:
        text = frontier(a, argv or [])
        print(text)
        if a.out is not None:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(text)
        return 0
    if a.real:
        from deadlines_real import real

        text = real(a, argv or [])
        print(text)
        if a.out is not None:
            a.out.write_text(text)
        return 0
    t0 = time.perf_counter()
    from gencc.workloads import load as load_workload

    w = load_workload(a.model, progress=False)
    X = np.asarray(w.X_test[:2000], dtype=np.float32)  # served inputs: held-out, never calibrated on
    top = np.argmax(np.asarray(w.f(X)).reshape(len(X), -1), axis=1)
    coded = {}
    for scheme in CODED:
        coded[scheme] = Coded(scheme, a, X)
        print(f"{scheme}: gate threshold {coded[scheme].threshold:.3g} (calibrated on training inputs; "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    curves: dict[tuple[str, float | None, int], dict[float, dict]] = {}
    for bound in BOUNDS:
        for row in ROWS:
            for q in (HEDGE_QS if row == "hedged" else [None]):
                curve = curves[(row, q, bound)] = {}
                for load in LOADS:
                    curve[load] = run_point(row, q, load, bound, a, coded, X, top)
                    if curve[load]["inside"] < 0.9:  # past its capacity for both shares: the rest is lower still
                        for rest in LOADS[LOADS.index(load) + 1:]:
                            curve[rest] = {**curve[load], "inside": 0.0}
                        break
                print(f"bound {bound}x {row} q={q}: " + " ".join(f"{ld:g}:{c['inside']:.4f}"
                                                                  for ld, c in curve.items()), flush=True)
    lines = [generated_by(SUITE, argv or []), "",
             f"Virtual time; {machine()} W = {a.workers}, K = {a.K}, {a.service_ms:g} ms service, slow x{a.X:g} "
             f"{a.F:.0%} of the time; {a.seeds} seeds x {a.duration:g} s per point; loads {LOADS[0]:g} to "
             f"{LOADS[-1]:g} of uncoded's capacity ({capacity(a):.0f} requests/s); model {a.model}, gate "
             f"thresholds " + ", ".join(f"{k} {c.threshold:.3g}" for k, c in coded.items()) + ". Each cell: the "
             "largest load carried with 99% / 99.9% inside the bound (0: not even the lowest load); at that 99% "
             "load (or the lowest), the share answered exactly inside and the top-1 agreement of the degraded "
             "answers with the model's own.", ""]
    head = "| scheme | " + " | ".join(f"{b}x: load 99% / 99.9% | {b}x: exact, agreement" for b in BOUNDS) + " |"
    lines += [head, "|" + "---|" * (1 + 2 * len(BOUNDS))]
    for row in ROWS:
        cells = []
        for bound in BOUNDS:
            qs = HEDGE_QS if row == "hedged" else [None]
            q = max(qs, key=lambda q: (carried(curves[(row, q, bound)], 0.99),
                                       carried(curves[(row, q, bound)], 0.999)))
            curve = curves[(row, q, bound)]
            l99, l999 = carried(curve, 0.99), carried(curve, 0.999)
            at = curve[l99] if l99 else curve[LOADS[0]]
            name = f"q={q:g}: " if q is not None else ""
            cells += [f"{name}{l99:g} / {l999:g}", f"{at['exact']:.3f}, {fmt_share(at['agree'])}"]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += ["", "Share answered inside the bound, per load (2x bound; hedged at its best q):", ""]
    lines += ["| scheme | " + " | ".join(f"{ld:g}" for ld in LOADS) + " |", "|" + "---|" * (1 + len(LOADS))]
    for row in ROWS:
        qs = HEDGE_QS if row == "hedged" else [None]
        q = max(qs, key=lambda q: (carried(curves[(row, q, 2)], 0.99), carried(curves[(row, q, 2)], 0.999)))
        curve = curves[(row, q, 2)]
        lines.append(f"| {row} | " + " | ".join(f"{curve[ld]['inside']:.4f}" for ld in LOADS) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if a.out is not None:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
