"""Answered: why few degraded answers agree with the upstreams benchmark's fleet model (docs/guides/upstreams.md).

benchmarks/upstreams.py's replicas serve `classify` (tanh of a random linear map, 16 -> 10, weights N(0, 1/4)) on
inputs drawn N(0, 1) independently; with the gate off, about half of gencc's degraded (decoded) answers had the
model's top-1 there. This script runs the same scheme in virtual time (sgcc, K = 8 over W = 12 workers, 50 ms a
task, each worker slow x10 10% of the time in periods of 1 s on average, Poisson arrivals at 30% of capacity;
`gencc.serving.simulate_load`, so no replica is needed) and measures, per variant of the model and the code:

- gate off: the share of requests answered degraded and how many of those agree with the model on top-1;
- gate on: the threshold the gate's calibration finds (on other inputs of the same distribution, the default
  target) and the share of requests it would answer degraded then (`GateCalibration.frontier`);
- the model's smoothness at the scale of the inputs' spacing: for random pairs of inputs, how far the output at
  their midpoint (what a coded worker runs: the mean of its group's inputs) is from the mean of their outputs,
  relative to half the distance between their outputs (0 for a linear map);
- the model's top-1 margin (top-1 minus top-2 output) against the spread of its outputs: how small a decoding
  error flips the top-1.

Variants: the benchmark's model; the same map with its weights scaled down (x0.5, x0.1: the tanh leaves
saturation, the map gets nearer linear); the default code's prior with other length scales (0.1, 1, 3; default
0.3) and with the length scale and rho that `SystematicGCC.calibrated` fits to this model; and K = 6 and K = 10.

    python benchmarks/investigations/fleet_agreement.py --out docs/generated/fleet-agreement.md   # a few minutes
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from upstreams import _WEIGHTS, D_IN, MEAN_SLOW_S, SERVICE_MS, SLOW_F, SLOW_X  # noqa: E402

from gencc.codes.ordering import order_inputs  # noqa: E402
from gencc.codes.systematic import DEFAULT_RHO, SystematicGCC  # noqa: E402
from gencc.engine import VirtualWorkers  # noqa: E402
from gencc.faults import PersistentStragglers, ServiceTimes  # noqa: E402
from gencc.rkhs.kernels import Matern32  # noqa: E402
from gencc.serving import Gate, Memo, calibrate_gate, make_dispatcher, simulate_load  # noqa: E402

W = 12


class Classify:
    """upstreams.classify with its weights scaled by `scale` (1: the benchmark's model), batched numpy."""

    batched = True

    def __init__(self, scale: float = 1.0):
        self.A = _WEIGHTS * scale

    def __call__(self, X: Any) -> np.ndarray:
        return np.tanh(np.asarray(X, dtype=np.float64).reshape(len(X), -1) @ self.A)


def smoothness(f: Classify, rng: np.random.Generator, n: int = 4000) -> tuple[float, float]:
    """(median midpoint deviation, relative; median top-1 margin over the standard deviation of the input's
    outputs) on random pairs of N(0, 1) inputs."""
    a, b = rng.normal(size=(n, D_IN)), rng.normal(size=(n, D_IN))
    fa, fb, fm = f(a), f(b), f((a + b) / 2)
    dev = np.linalg.norm(fm - (fa + fb) / 2, axis=1) / (np.linalg.norm(fa - fb, axis=1) / 2)
    srt = np.sort(fa, axis=1)
    margin = np.median((srt[:, -1] - srt[:, -2]) / fa.std(axis=1))
    return float(np.median(dev)), float(margin)


def fitted(f: Classify, K: int, seed: int) -> tuple[float, float]:
    """(length scale, rho) that `SystematicGCC.calibrated` fits to f (restricted likelihood, then rho) on groups of
    K training inputs ordered as the dispatcher orders a group (`order_inputs`)."""
    rng = np.random.default_rng([seed, 3])
    sets = [X[order_inputs(X)] for X in rng.normal(size=(60, K, D_IN)).astype(np.float32)]
    code = SystematicGCC.calibrated(K, W, f, sets)
    return code.calibration["length_scale"], code.calibration["rho"]


def run(f: Classify, K: int, prior: tuple[float, float] | None, a: argparse.Namespace) -> dict:
    """The scheme on f with groups of K; prior: (length scale, rho) of the code's Matern 3/2 prior (the registry
    takes a kernel by name only, so it is set on the code the dispatcher built, before any decode), None: the
    default (0.3, DEFAULT_RHO)."""
    s = SERVICE_MS / 1000
    rate = a.load * W / (s * (1 - SLOW_F + SLOW_F * SLOW_X))

    def make(g: Any) -> Any:
        def build(e: Any) -> Any:
            d = make_dispatcher("sgcc", e, K=K, gate=g, seed=a.seed)
            if prior is not None:
                d.code.kernel, d.code.rho = Matern32(prior[0], null_degree=0), prior[1]
            return d

        return build

    X = np.random.default_rng([a.seed, 1]).normal(size=(2000, D_IN)).astype(np.float32)  # served
    Xtr = np.random.default_rng([a.seed, 2]).normal(size=(2000, D_IN)).astype(np.float32)  # training
    cal = calibrate_gate(make, {"f": f}, Xtr, workers=W, service_ms=SERVICE_MS, slow_fraction=SLOW_F,
                         slow_factor=SLOW_X, load=a.load, seed=a.seed + 100)
    top = np.argmax(f(X), axis=1)
    out: dict[str, Any] = {"threshold": cal.threshold,
                           "best": max((ag for _, ag, sh in cal.frontier if sh * cal.candidates >= 20),
                                       default=math.nan)}
    for name, gate in (("off", None), ("on", cal.threshold)):
        deg = agree = total = 0
        for i in range(a.seeds):
            env = VirtualWorkers(W, ServiceTimes(s), PersistentStragglers(W, SLOW_F, SLOW_X, MEAN_SLOW_S,
                                                                          seed=a.seed + i),
                                 functions={"f": Memo(f, X)}, seed=a.seed + i)
            reqs = simulate_load(make(None if gate is None else Gate(gate)), env, rate, a.duration, inputs=X,
                                 seed=a.seed + i)
            d = [r for r in reqs if r.degraded]
            total += len(reqs)
            deg += len(d)
            agree += sum(int(np.argmax(r.output) == top[r.id % len(X)]) for r in d)
        out[name] = (deg / total, agree / deg if deg else math.nan, deg)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=float, default=0.3, help="fraction of capacity (default 0.3)")
    ap.add_argument("--duration", type=float, default=60.0, help="virtual seconds per run (default 60)")
    ap.add_argument("--seeds", type=int, default=3, help="runs per variant, pooled (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rho = DEFAULT_RHO
    variants = [("the benchmark's model (weights x1), K = 8, length scale 0.3 (default)", 1.0, 8, None),
                ("weights x0.5", 0.5, 8, None), ("weights x0.1", 0.1, 8, None),
                ("length scale 0.1", 1.0, 8, (0.1, rho)), ("length scale 1", 1.0, 8, (1.0, rho)),
                ("length scale 3", 1.0, 8, (3.0, rho)), ("length scale and rho fitted", 1.0, 8, "fit"),
                ("K = 6", 1.0, 6, None), ("K = 10", 1.0, 10, None)]
    rng = np.random.default_rng(a.seed)
    cmd = "python benchmarks/investigations/fleet_agreement.py " + " ".join(sys.argv[1:])
    out = [f"Generated by `{cmd}` (virtual time: sgcc over W = {W} workers, {SERVICE_MS:g} ms a task, "
           f"{SLOW_F:.0%} slow x{SLOW_X:g}, load {a.load:.0%} of capacity, {a.seeds} runs of {a.duration:g} s "
           "pooled per variant; the gate calibrated on other inputs of the same distribution).", "",
           "| variant | midpoint deviation | median top-1 margin / output sd | "
           "gate off: degraded | gate off: agree on top-1 (degraded answers) | gate threshold | "
           "best agreement on the gate's frontier | gate on: degraded | gate on: agree on top-1 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, scale, K, prior in variants:
        f = Classify(scale)
        dev, margin = smoothness(f, rng)
        if prior == "fit":
            prior = fitted(f, K, a.seed)
            name += f" ({prior[0]:g}, {prior[1]:.3g})"
        r = run(f, K, prior, a)
        (d0, a0, n0), (d1, a1, n1) = r["off"], r["on"]
        out.append(f"| {name} | {dev:.2f} | {margin:.2f} | {d0:.1%} | {a0:.0%} ({n0}) | "
                   f"{r['threshold']:.3g} | {r['best']:.0%} | {d1:.1%} | "
                   + (f"{a1:.0%} ({n1}) |" if n1 else "none sent |"))
        print(out[-1], flush=True)
    text = "\n".join(out) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
