"""Serving load in virtual time: open-loop Poisson arrivals driving a dispatcher on `gencc.engine.VirtualWorkers`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...engine import VirtualWorkers
from ...loadgen.arrivals import poisson_arrivals
from ..dispatch import Request


def simulate_load(make_dispatcher: Callable[[VirtualWorkers], object], env: VirtualWorkers, rate: float,
                  duration: float, inputs: np.ndarray | None = None, seed: int = 0, drain: float = 60.0,
                  arrivals: np.ndarray | None = None, deadline_ms: float | None = None) -> list[Request]:
    """Drive a dispatcher with Poisson arrivals for `duration` virtual seconds (or replay the given `arrivals`
    times, e.g. a measured run's, ascending and non-negative); every request is answered by the end (drain up to
    `drain` more seconds). `deadline_ms`: each request's latency target after its arrival, as a server's
    `--deadline-ms` sets it (None: none). Returns the requests (inputs cycled from `inputs`, or None)."""
    if arrivals is None:
        times = poisson_arrivals(rate, duration, np.random.default_rng([seed, 2]))
    else:
        times = np.asarray(arrivals, dtype=float)
        if times.ndim != 1 or (times.size and (times[0] < 0 or np.any(np.diff(times) < 0))):
            raise ValueError("arrivals must be a 1-D ascending array of non-negative times (seconds)")
        duration = float(times[-1]) if times.size else 0.0
    disp = make_dispatcher(env)
    reqs: list[Request] = []
    for i, t in enumerate(times):
        x = None if inputs is None else inputs[i % len(inputs)]
        r = Request(i, x, float(t))
        if deadline_ms is not None:
            r.deadline = r.t_arrival + deadline_ms / 1000
        reqs.append(r)
        env.deliver(t - env.t, lambda r=r: disp.submit(r))
    env.run(until=duration + drain)
    return reqs
