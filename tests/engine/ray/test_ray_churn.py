"""Placement that survives churn, on a multi-node local cluster inside the loopback-only network namespace (the
launcher in test_ray_namespace.py re-executes this module there): a node that joins gets a worker within
seconds, moved there without dropping a request; the replacements of the workers of a node being removed (its
raylet gone, Ray still listing it alive) go to the nodes left, at once, not onto it."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from gencc.engine.ray.namespace import in_loopback_namespace

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(autouse=True)
def _inside_the_namespace():
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")


def lin(x):
    """The test's own model: linear, so every answer is checked exactly."""
    import numpy as np

    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    return np.stack([x.sum(axis=1), 3 * x[:, 0] - x[:, -1]], axis=1)


lin.batched = True
#: seconds Ray takes to mark a lost node dead in this test's cluster (from its start: longer than the test)
DEAD_AFTER_S = 120


def test_a_removed_node_gets_no_replacement_and_a_node_that_joins_gets_a_worker() -> None:
    """Six workers spread over two nodes under steady load (40 requests a second, replication). One node is
    removed, its raylet killed while Ray still lists it alive (Ray marks it dead only after DEAD_AFTER_S here, as
    for a machine that stops answering): its workers' replacements go to the node left, each at its first try, and
    every worker is alive again well before Ray marks the node dead. Then a node joins: within 60 s (measured:
    about a second) a worker runs there, moved without a failed request, and health counts the move. Every
    request is answered 200, right."""
    import numpy as np

    from gencc.engine import make_backend, make_pool
    from gencc.engine.ray import NODE_RESOURCE, LocalCluster
    from gencc.faults import ServiceTimes
    from gencc.serving import Service, make_dispatcher

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not importable on the actors
    if ray.is_initialized():
        ray.shutdown()
    X = np.random.default_rng(1).normal(size=(1200, 2, 3)).astype(np.float32)
    with LocalCluster(2, dead_after_s=DEAD_AFTER_S) as cluster:
        be = make_backend("ray", 6, {"f": lin}, dtype=np.float32, address=cluster.address,
                          worker_placement="spread", worker_resources={NODE_RESOURCE: 1})
        pool = make_pool(6, be, ServiceTimes(0.005), mark_dead=False)
        svc = Service(pool, lambda env: make_dispatcher("replication", env, request_timeout=30))
        svc.in_shape = (2, 3)
        futures, marks = [], {}
        stop = threading.Event()

        def load() -> None:  # open loop, 40 a second, until stopped
            t0 = time.monotonic()
            for i, x in enumerate(X):
                if stop.is_set():
                    return
                futures.append(svc.submit(x))
                time.sleep(max(0.0, t0 + (i + 1) / 40 - time.monotonic()))

        sender = threading.Thread(target=load)
        try:
            ids = cluster.node_ids()
            assert sorted(be.placement()) == sorted(ids * 3)  # spread: three on each node
            sender.start()
            time.sleep(1)
            cluster.remove(0)
            marks["removed"] = time.monotonic()
            while not (all(s == "alive" for s in be.states) and sum(be.restarts) >= 3):
                assert time.monotonic() - marks["removed"] < 20, (be.states, be.restarts)
                time.sleep(0.05)
            marks["replaced"] = time.monotonic()
            listed = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
            assert listed[ids[0]], listed  # Ray still lists it alive
            assert sum(be.restarts) == 3 and be._unready == [0] * 6, (be.restarts, be._unready)
            assert be.placement() == [ids[1]] * 6
            marks["joined"] = time.monotonic()  # from the call: Ray lists it within it
            new = cluster.add()
            while cluster.node_ids()[new] not in be.nodes.known():
                assert time.monotonic() - marks["joined"] < 60, be._where
                time.sleep(0.05)
            marks["moved"] = time.monotonic()
            time.sleep(1)
            h = svc.health()
            assert (h["rebalanced"], h["restarts"], h["alive"], h["status"]) == (1, 3, 6, "ok"), h
            assert sorted(be.placement()) == sorted([ids[1]] * 5 + [cluster.node_ids()[new]])
            deadline = time.monotonic() + 10  # the moved worker's old actor ends once its calls have answered
            while be.nodes._retiring:
                assert time.monotonic() < deadline, be.nodes._retiring
                time.sleep(0.05)
        finally:
            stop.set()
            if sender.is_alive():
                sender.join(60)
            try:
                reqs = [f.result(timeout=60) for f in futures]
            finally:
                svc.close()
    print(f"\nremoval to every worker alive again: {marks['replaced'] - marks['removed']:.2f} s (3 replaced); join "
          f"to a worker on the new node: {marks['moved'] - marks['joined']:.2f} s; {len(reqs)} requests")
    statuses = [r.status for r in reqs]
    assert statuses == [200] * len(reqs), {s: statuses.count(s) for s in set(statuses)}
    np.testing.assert_allclose(np.array([r.output for r in reqs]), lin(X[:len(reqs)]), rtol=1e-5, atol=1e-5)
