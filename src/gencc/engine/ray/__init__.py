"""Everything Ray, in one place: the engine's Ray backend (`backend`: starting or joining Ray, one actor per
worker), the master side that waits on every call at once (`workers`), the loopback-only network namespace a
private Ray runs in (`namespace`), and a multi-node cluster on this machine for tests (`cluster`).

Ray itself is imported only inside functions, so importing this package never imports it."""

from .backend import RayBackend, init_ray
from .cluster import NODE_RESOURCE, LocalCluster
from .workers import RayWorkers

__all__ = ["NODE_RESOURCE", "LocalCluster", "RayBackend", "RayWorkers", "init_ray"]
