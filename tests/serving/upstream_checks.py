"""Checks shared by the tests of gencc in front of replicas (its own, MLServer's): requests served and the
answers held against the replicas' own."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gencc.serving import Service


def serve_all(svc: Service, xs: np.ndarray, timeout: float = 30.0) -> list:
    """Submit every input at once; the answered requests, in order."""
    futs = [svc.submit(x) for x in xs]
    return [f.result(timeout=timeout) for f in futs]


def assert_exact_where_not_degraded(reqs: Sequence, own: np.ndarray) -> None:
    """Every request answered (200), and every answer that is not degraded is the replica's own, bit for bit."""
    assert [r.status for r in reqs] == [200] * len(reqs), {r.status for r in reqs}
    for i, r in enumerate(reqs):
        if not r.degraded:
            np.testing.assert_array_equal(r.output, own[i % len(own)])


def worst_latency_with_a_slow_replica(urls: list[str], xs: np.ndarray, own: np.ndarray, drain_s: float
                                      ) -> dict[str, float]:
    """The slowest answer to `xs` sent at once under uncoded and under sgcc (K = 2, full redundancy, gate off),
    over replicas one of which is slow in its own model code; every answer checked against `own`."""
    worst = {}
    for scheme, K in (("uncoded", None), ("sgcc", 2)):
        svc = Service.build(None, scheme=scheme, K=K, upstreams=urls, gate="off", redundancy="full")
        try:
            reqs = serve_all(svc, xs)
        finally:
            svc.close(drain_s=drain_s)
        assert_exact_where_not_degraded(reqs, own)
        worst[scheme] = max(r.t_done - r.t_arrival for r in reqs)
    return worst


def assert_the_replicas_answers(reqs: Sequence, own: np.ndarray) -> None:
    """`assert_exact_where_not_degraded`, at least one answer exact, and every degraded one (gate off: sent whatever
    its accuracy) a decode of the replicas' answers: finite and within twice the spread of the model's outputs
    (a decode at K = 2 is rough, never garbage)."""
    assert_exact_where_not_degraded(reqs, own)
    assert any(not r.degraded for r in reqs)
    spread = np.ptp(own, axis=0)
    for i, r in enumerate(reqs):
        assert np.all(np.isfinite(r.output)) and np.all(np.abs(r.output - own[i % len(own)]) <= 2 * spread), i
