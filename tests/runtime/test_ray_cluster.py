"""RayExecutor against an existing multi-node cluster (address=): a head and two worker nodes on loopback
(`gencc.engine.ray.cluster.LocalCluster`, one per module), joined, then one node lost mid-stream."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest

import gencc
from gencc.runtime import RayExecutor, run

from . import runtime_helpers
from .runtime_helpers import reference, smooth

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(runtime_helpers)  # tests/ is not importable on the actors
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # affine below


@pytest.fixture(scope="module")
def cluster():
    from gencc.engine.ray import LocalCluster

    if ray.is_initialized():
        ray.shutdown()
    with LocalCluster(2) as c:
        yield c


def affine(x: np.ndarray) -> np.ndarray:
    """A function gencc does not ship, per input: LCC decodes it exactly from any K results."""
    return 3.0 * np.asarray(x) - 1.0


def test_existing_cluster(cluster):
    X = np.random.default_rng(0).normal(size=(4, 3))
    code = gencc.BACC(K=4, N=6)
    ex = RayExecutor(num_actors=3, address=cluster.address)
    try:
        r = run(smooth, X, code, ex, order=False)
        assert ray.get_runtime_context().gcs_address == cluster.address
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    finally:
        ex.close()
    assert not ray.is_initialized()
    np.testing.assert_allclose(r.outputs, reference(code, X, range(6)), atol=1e-12)


def test_a_node_lost_mid_stream_every_job_answered_and_its_actors_recreated(cluster):
    from gencc.engine.ray import NODE_RESOURCE

    ex = RayExecutor(num_actors=8, address=cluster.address, ready_timeout=300,
                     actor_options={"scheduling_strategy": "SPREAD", "resources": {NODE_RESOURCE: 1}})
    try:
        ex.start(affine, 8)
        ids = cluster.node_ids()
        placed = ex.placement()
        counts = [placed.count(i) for i in ids]
        assert sum(counts) == 8 and min(counts) >= 3, counts  # spread over both worker nodes, none on the head
        victim = int(np.argmax(counts))
        lost = [slot for slot, node in enumerate(placed) if node == ids[victim]]
        code = gencc.LCC(K=3, N=8)
        wait_for = 8 - counts[victim]  # what the other node answers alone
        X = np.random.default_rng(1).normal(size=(3, 5))
        killer = threading.Thread(target=cluster.remove, args=(victim,))
        for j in range(12):
            if j == 4:
                killer.start()  # while this job's calls are out
            r = run(affine, X + j, code, ex, wait_for=wait_for, order=False, timeout=60)
            assert len(r.returned) == wait_for
            np.testing.assert_allclose(r.outputs, affine(X + j), atol=1e-9)
            time.sleep(0.1)
        killer.join()
        deadline, left = time.monotonic() + 150, {ids[1 - victim]: 8}
        while Counter(ex.placement(5)) != left and time.monotonic() < deadline:
            time.sleep(0.5)  # lost actors are found dead even when no job waits on them, and replaced (again if a
            # replacement went to the lost node before Ray marked it dead) on the node left
        assert Counter(ex.placement()) == left
        assert [s for s, n in enumerate(ex.restarts) if n] == lost  # only the lost node's actors re-created
        r = run(affine, X, code, ex, wait_for=8, order=False, timeout=120)  # all 8: the replacements answer
        assert r.stragglers == {}
        np.testing.assert_allclose(r.outputs, affine(X), atol=1e-9)
    finally:
        ex.close()
