"""Everything Ray, in one place: the engine's Ray backend (`backend`: one actor per worker;
`gencc.engine.make_backend("ray", ...)` builds it), starting or joining Ray (`start`: checking a cluster's
address, reaching it within a bounded time, a private Ray without a credential file on disk), the master side
that waits on every call at once (`workers`), where the actors run (`placement`: the options "spread" or "pack",
CPUs and resources per worker; `nodes`: replacements kept off nodes being removed, workers moved onto nodes that
join), the loopback-only network namespace a private Ray runs in (`namespace`), and a multi-node cluster on this
machine for tests (`cluster`). The job runtime's `RayExecutor`
(`gencc.runtime`) is a thin executor over this backend.

Ray itself is imported only inside functions, so importing this package never imports it."""

from .backend import RayBackend, check_address, init_ray
from .cluster import NODE_RESOURCE, LocalCluster
from .workers import RayWorkers

__all__ = ["NODE_RESOURCE", "LocalCluster", "RayBackend", "RayWorkers", "check_address", "init_ray"]
