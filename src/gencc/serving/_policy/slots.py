"""Which worker slot of a code computes what: systematic slots, each slot's pool function and scales, and which
coded slot covers which position (codes with coding groups)."""

from __future__ import annotations

import numpy as np

from ...codes import Code


def systematic_slots(code: Code, tol: float = 1e-9) -> list[int] | None:
    """Per input k, the worker slot whose encoded input is x_k itself; None when the code is not systematic."""
    E = code.encoding_matrix
    slots = []
    for k in range(code.K):
        e = np.zeros(code.K)
        e[k] = 1.0
        hits = np.flatnonzero(np.all(np.abs(E - e) < tol, axis=1))
        if hits.size == 0:
            return None
        slots.append(int(hits[0]))
    return slots


def worker_functions(code: Code) -> tuple[list[str], list[float], list[float]]:
    """Per worker slot, the pool function it runs ("f", or "parity": the workload's parity model) and the scales
    a and b of its input and output: slot n runs fn(a z) / b on its encoded input z. ParM's parity query is the
    sum of its group (a = b = 1); SystematicGCC with a parity model hands its coded workers the mean of s
    members and runs z -> F_P(s z) / s (a = b = s; `worker_function(f, n)` exposes s), and with a packed one
    the s members stacked, z -> F_P(z) / s (a = 1, b = s), so the pool needs only the parity model itself."""
    sentinel = object()
    fns = ["f" if code.worker_function(sentinel, n) is sentinel else "parity" for n in range(code.N)]
    scales = code.capabilities.scales or ((1.0, 1.0),) * code.N
    return fns, [float(a) for a, _ in scales], [float(b) for _, b in scales]


def cover_map(code: Code, sys: list[int] | None) -> list[tuple[int, list[int]]]:
    """Per position k: (the coded slot of k's coding group, the group's other positions), for a systematic code
    with coding groups (`SystematicGCC`; `sys` its systematic slots); ValueError for any other code."""
    groups = code.capabilities.groups
    if groups is None or sys is None:
        raise ValueError(f"cover needs a systematic code with coding groups (SystematicGCC), not {code!r}")
    out: list[tuple[int, list[int]]] = [(-1, [])] * code.K
    for slot, grp in groups:
        for k in grp:
            out[int(k)] = (int(slot), [int(j) for j in grp if j != k])
    return out
