"""Serving: coded against uncoded prediction serving at equal resources, in the simulator (virtual time).

W workers, groups of K = 8 requests, service time `--service-ms`, persistent stragglers (each worker slow x`--X`
about `--F` of the time, in exponential periods of mean 1 s), Poisson arrivals at a fraction of uncoded capacity
W / E[task time] for `--duration` seconds of virtual time; the same arrivals and slow periods for every scheme.
Figures: p50 and p99 latency of each scheme against uncoded's (the floor: one task per request, no redundancy),
per load. Virtual time, so the figures do not depend on the machine's load; the simulator charges service times,
not f's compute (it runs no model here).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from measure import Figure

from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import make_dispatcher, simulate_load

SUITE = "serving"
K = 8
SCHEMES = ("gcc", "replication", "hedged")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workers", type=int, default=12, help="workers W (default 12)")
    ap.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.5],
                    help="offered loads, fractions of uncoded capacity in (0, 1) (default 0.3 0.5)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of virtual arrivals per point (default 60)")
    ap.add_argument("--service-ms", type=float, default=40.0, help="healthy service time, ms (default 40)")
    ap.add_argument("--F", type=float, default=0.1, help="slow fraction in [0, 1) (default 0.1)")
    ap.add_argument("--X", type=float, default=10.0, help="slow factor >= 1 (default 10)")


def check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse errors (exit 2) for values the simulator would refuse only later."""
    bad = [x for x in args.loads if not 0 < x < 1]
    if bad:
        ap.error(f"--loads must lie in (0, 1), got {bad[0]:g}")
    if not 1 <= args.X < math.inf:
        ap.error(f"--X must be a finite number of at least 1, got {args.X:g}")
    if not 0 <= args.F < 1:
        ap.error(f"--F must lie in [0, 1), got {args.F:g}")
    for name in ("workers", "duration", "service_ms"):
        if not 0 < getattr(args, name) < math.inf:
            ap.error(f"--{name.replace('_', '-')} must be a positive finite number, got {getattr(args, name):g}")
    if args.workers < K:
        ap.error(f"--workers must be at least K = {K}, got {args.workers}")


def point(scheme: str, load: float, args: argparse.Namespace, seed: int = 0) -> tuple[float, float]:
    """(p50, p99) latency in ms of answered requests for one scheme at one load."""
    s = args.service_ms / 1000
    rate = load * args.workers / (s * (1 - args.F + args.F * args.X))
    slow = PersistentStragglers(args.workers, args.F, args.X, 1.0, seed=seed)
    env = VirtualWorkers(args.workers, ServiceTimes(s), slow, seed=seed)
    reqs = simulate_load(lambda e: make_dispatcher(scheme, e, K=K, seed=seed), env, rate, args.duration, seed=seed)
    lat = np.array([r.latency for r in reqs if r.status == 200]) * 1000
    if lat.size == 0:
        raise RuntimeError(f"{scheme} answered no request at load {load:g}")
    p50, p99 = np.percentile(lat, [50, 99])
    return float(p50), float(p99)


def run(args: argparse.Namespace) -> list[Figure]:
    figs = []
    for load in args.loads:
        base = point("uncoded", load, args)
        for scheme in SCHEMES:
            got = point(scheme, load, args)
            for i, q in enumerate(("p50", "p99")):
                figs.append(Figure(SUITE, f"{q}, {scheme}, load {load:g}, W={args.workers}, {args.F:.0%} slow "
                                          f"x{args.X:g}", got[i], base[i], "uncoded, same load"))
    return figs
