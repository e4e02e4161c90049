"""A Ray cluster of several nodes on this machine, for tests and benchmarks of node loss (run it inside the
loopback-only network namespace of `gencc.engine.ray.namespace`)."""

from __future__ import annotations

import os

from .namespace import RAY_QUIET_ENV
from .start import private_auth, private_temp_dir, remove_temp_dir

#: the custom resource each worker node of `local_cluster` offers (actors asking for it avoid the head)
NODE_RESOURCE = "gencc_node"
#: failed health checks after which Ray marks a node dead, when `LocalCluster`'s `dead_after_s` is set
DEAD_CHECKS = 5


class LocalCluster:
    """A Ray cluster of several nodes on this machine (`ray.cluster_utils.Cluster`: a head and `nodes` worker
    nodes, each its own raylet and object store, all on 127.0.0.1: run it inside the loopback-only network
    namespace of `gencc.engine.ray.namespace`). Each worker node offers `NODE_RESOURCE`, so actors that ask for a
    share of it run on the worker nodes, never on the head; `remove(node)` kills a worker node's processes (its actors
    die with it), as a lost machine; `add()` adds a worker node, as a machine that joins. `dead_after_s`: seconds
    Ray's control store takes to mark a lost node dead (None: Ray's default, which on one machine is at once, as
    the killed raylet refuses connections; a longer time stands for a lost machine that does not answer at all,
    which Ray lists alive until its health checks fail). Its temp dir is private (see `private_temp_dir`),
    removed at `close`."""

    def __init__(self, nodes: int, *, node_cpus: int = 1, head_cpus: int = 1, object_store_mb: int = 100,
                 dead_after_s: float | None = None):
        from ray.cluster_utils import Cluster

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        for key, value in RAY_QUIET_ENV.items():  # Ray's processes inherit these (see `init_ray`)
            os.environ.setdefault(key, value)
        private_auth()  # no credential file on disk (see `init_ray`)
        self._tmp, self._own = private_temp_dir()
        self._env = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self._own  # where Ray notes the cluster's address: private too, till close
        os.makedirs(os.path.join(self._own, "ray"), exist_ok=True)
        mem = object_store_mb * 1024 * 1024
        common = {"node_ip_address": "127.0.0.1", "object_store_memory": mem}
        self._common, self.node_cpus = common, node_cpus
        head: dict = {**common, "num_cpus": head_cpus, "temp_dir": self._tmp, "include_dashboard": False}
        if dead_after_s is not None:
            ms = max(1, round(dead_after_s * 1000 / DEAD_CHECKS))
            head["_system_config"] = {"health_check_initial_delay_ms": ms, "health_check_period_ms": ms,
                                      "health_check_timeout_ms": ms, "health_check_failure_threshold": DEAD_CHECKS}
        try:
            self.cluster = Cluster(initialize_head=True, head_node_args=head)
            self.nodes: list = []
            for _ in range(nodes):
                self.add(wait=False)
            self.cluster.wait_for_nodes()
        except BaseException:
            self.close()
            raise
        self.address: str = self.cluster.address

    def add(self, *, wait: bool = True) -> int:
        """Add a worker node (`node_cpus` CPUs, offering `NODE_RESOURCE`), as a machine that joins; its index
        (in `node_ids`). `wait`: return once Ray lists it (whatever the state of the nodes removed before)."""
        self.nodes.append(self.cluster.add_node(wait=wait, **self._common, num_cpus=self.node_cpus,
                                                resources={NODE_RESOURCE: 10_000}))
        return len(self.nodes) - 1

    def node_ids(self) -> list[str]:
        """The Ray node ids of the worker nodes, in the order they were added."""
        return [n.node_id for n in self.nodes]

    def remove(self, index: int) -> None:
        """Kill worker node `index` at once, as a machine that is lost: its Ray processes (raylet, object
        store) and every process they started (the actors' workers, which would otherwise go on answering
        calls made to them directly), no graceful shutdown."""
        import signal

        import psutil  # a dependency of Ray's

        node = self.nodes[index]
        raylets = [psutil.Process(info.process.pid) for info in node.all_processes.get("raylet") or []]
        workers = [c for r in raylets for c in r.children(recursive=True)]
        for p in raylets + workers:  # the raylet first: no time to tell Ray's control store it is going
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.cluster.remove_node(node, allow_graceful=False)

    def close(self) -> None:
        """Stop every node of the cluster and remove its temp dir."""
        cluster = getattr(self, "cluster", None)
        if cluster is not None:
            try:
                cluster.shutdown()
            except Exception:  # a node already gone
                pass
            self.cluster = None
        if self._env is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = self._env
        remove_temp_dir(self._own)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
