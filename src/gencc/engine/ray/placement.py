"""Where the Ray backend's actors run: the placement options (`check_placement`: a strategy, "spread" across the
nodes or "pack", and a resource request per worker), the nodes fit to hold a worker (`NodeView`: listed alive by
Ray, its raylet answering, offering what a worker asks for), and the rebalancing rule (`rebalance_move`).

Ray is imported only inside functions, so importing this module never imports it."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError

#: the placement strategies: "spread" (Ray's SPREAD: the workers across the nodes, and rebalanced onto nodes that
#: join) and "pack" (Ray's default: on as few nodes as have room)
PLACEMENTS = ("spread", "pack")
#: seconds a node's raylet may take to accept a connection before the node counts as gone
PROBE_S = 0.25
#: seconds a `NodeView` is reused before Ray is asked again
VIEW_S = 1.0


@dataclass(frozen=True)
class Placement:
    """Checked placement options (build with `check_placement`): `strategy` ("spread" or "pack"), `cpus` per
    worker (0: a worker reserves no CPU) and `resources` per worker (Ray custom resources, and "GPU")."""

    strategy: str = "pack"
    cpus: float = 0.0
    resources: Mapping[str, float] = field(default_factory=dict)

    @property
    def spread(self) -> bool:
        return self.strategy == "spread"

    def actor_options(self) -> dict[str, Any]:
        """The options of `ray.remote(...).options` that say this placement."""
        res = dict(self.resources)
        opts: dict[str, Any] = {"num_cpus": self.cpus, "scheduling_strategy": "SPREAD" if self.spread else "DEFAULT"}
        if "GPU" in res:
            opts["num_gpus"] = res.pop("GPU")
        if res:
            opts["resources"] = res
        return opts

    def request(self) -> dict[str, float]:
        """What one worker asks of its node, by Ray resource name (a node offering less cannot hold it)."""
        return {**({"CPU": self.cpus} if self.cpus > 0 else {}), **self.resources}


def _amount(field_name: str, value: Any, *, zero: bool, label: str | None = None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if isinstance(value, bool) or not math.isfinite(x) or x < 0 or (x == 0 and not zero):
        raise ConfigError(f"{label or field_name} must be a {'non-negative' if zero else 'positive'} number, got "
                          f"{value!r}", field_name)
    return x


def check_placement(worker_placement: str | None = None, worker_cpus: float | None = None,
                    worker_resources: Mapping[str, float] | None = None) -> Placement:
    """The placement options checked: `worker_placement` "spread" or "pack" (None: "pack"), `worker_cpus` >= 0 (None:
    0, a worker reserves no CPU), `worker_resources` {name: amount > 0} (custom resources the nodes offer, or
    "GPU"; CPUs are `worker_cpus`). A `gencc.errors.ConfigError` naming the option otherwise."""
    strategy = "pack" if worker_placement is None else worker_placement
    if strategy not in PLACEMENTS:
        raise ConfigError("the workers' placement must be spread (across the nodes) or pack (Ray's default), got "
                          f"{worker_placement!r}", "worker_placement")
    cpus = 0.0 if worker_cpus is None else _amount("worker_cpus", worker_cpus, zero=True)
    resources: dict[str, float] = {}
    if worker_resources is not None:
        if not isinstance(worker_resources, Mapping):
            raise ConfigError("worker_resources must map resource names to amounts, e.g. {'gpu_node': 1}",
                              "worker_resources")
        for name, amount in worker_resources.items():
            if not isinstance(name, str) or not name.strip() or name != name.strip():
                raise ConfigError(f"worker_resources: a resource name must be a non-empty word, got {name!r}",
                                  "worker_resources")
            if name in ("CPU", "memory", "object_store_memory"):
                raise ConfigError(f"worker_resources: {name} is not a custom resource"
                                  + ("; ask for CPUs with worker_cpus" if name == "CPU" else ""), "worker_resources")
            resources[name] = _amount("worker_resources", amount, zero=False, label=f"worker_resources[{name!r}]")
    return Placement(strategy, cpus, resources)


def parse_resource(text: str) -> tuple[str, float]:
    """NAME=AMOUNT (the command line's form of one worker resource) as (name, amount); a ValueError otherwise."""
    name, sep, amount = text.partition("=")
    try:
        value = float(amount)
    except ValueError:
        value = math.nan
    if not sep or not name.strip() or not math.isfinite(value) or value <= 0:
        raise ValueError(f"a worker resource is NAME=AMOUNT with AMOUNT > 0 (e.g. gpu_node=1), got {text!r}")
    return name.strip(), value


def raylet_answers(host: str, port: int, timeout: float = PROBE_S) -> bool:
    """Whether something accepts a TCP connection at a node's raylet (its process is there)."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class NodeView:
    """The nodes that can hold a worker, as Ray lists them (`ray.nodes()`): `fit` the node ids listed alive, not
    gone, that offer the worker's `request`; `gone` those listed alive whose raylet does not answer (being
    removed: Ray has not marked them dead yet); `addresses` each listed node's raylet (host, port)."""

    def __init__(self, request: Mapping[str, float]):
        self.request = dict(request)
        self.fit: list[str] = []
        self.gone: set[str] = set()
        self.addresses: dict[str, tuple[str, int]] = {}
        self._at = self._probed_at = -math.inf

    def refresh(self, ray: Any, max_age: float = VIEW_S, probe: bool = True) -> NodeView:
        """Ask Ray again, unless the view is younger than `max_age` seconds. `probe`: try each node's raylet
        (up to PROBE_S seconds for one that does not answer); without, the nodes found gone before stay gone
        while Ray lists them."""
        now = time.monotonic()
        if now - (self._probed_at if probe else self._at) < max_age:
            return self
        fit, gone, addresses = [], set(), {}
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            node = n["NodeID"]
            addresses[node] = (n.get("NodeManagerAddress", ""), int(n.get("NodeManagerPort", 0)))
            if (not raylet_answers(*addresses[node])) if probe else node in self.gone:
                gone.add(node)
            elif all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in self.request.items()):
                fit.append(node)
        self.fit, self.gone, self.addresses, self._at = fit, gone, addresses, now
        if probe:
            self._probed_at = now
        return self

    def answers(self, node: str) -> bool:
        """Whether `node`'s raylet answers now (False for a node not listed alive)."""
        return node in self.addresses and raylet_answers(*self.addresses[node])


def least_loaded(nodes: Sequence[str], where: Sequence[str]) -> str | None:
    """Of `nodes`, the one holding the fewest of the workers whose nodes are `where` (the first on a tie)."""
    return min(nodes, key=lambda n: sum(w == n for w in where)) if nodes else None


def rebalance_move(where: Sequence[str], nodes: Sequence[str]) -> tuple[str, str] | None:
    """(from, to): one worker to move so the nodes share them more evenly, or None. `where` is each worker's
    node, `nodes` the nodes fit to hold one. A move is due when a node holds no worker while another holds more
    than its share (len(where) / len(nodes)): from the node holding the most to the first empty one."""
    if not nodes or not where:
        return None
    counts = {n: 0 for n in nodes}
    for w in where:
        if w in counts:
            counts[w] += 1
    empty = [n for n, c in counts.items() if c == 0]
    if not empty:
        return None
    busiest = max(counts, key=lambda n: counts[n])
    if counts[busiest] * len(nodes) <= len(where) or counts[busiest] < 2:
        return None
    return busiest, empty[0]
