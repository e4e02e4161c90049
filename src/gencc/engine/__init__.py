"""The engine: W long-lived workers, each with a FIFO queue, under both front ends (jobs and request streams).

- `Task`: one unit of work on one worker (the only task class in gencc); `TaskRecord`, what the workers keep
  of a finished one (no input or output).
- `Workers`: the wall-clock engine (worker threads plus a control thread that runs every callback); a queued
  task no longer needed is dropped before it starts; with `preempt`, a running one is cancelled cooperatively;
  a thread may serve several workers, running their ready tasks as one batched call (`gencc.engine.batch`);
  crashed workers are re-created, hung calls abandoned; BLAS threads capped while it runs (`gencc.engine.blas`).
- Backends, where a task runs: `ThreadBackend` (default, in the worker thread), `ProcessBackend` (a process
  pool), `gencc.engine.ray.backend.RayBackend` (one Ray actor per worker; `gencc.engine.ray` is the one package
  that touches Ray).
- `make_backend`: the one way a backend is built by name ("local", alias "threads"; "ray", its cluster's address
  checked before Ray starts); `make_pool`: the one way a pool is built (a backend by name or object, and its
  threads: one per worker, a static T, or a shared pool of `shared_threads()` threads fed by every worker's
  queue).
- `VirtualWorkers`: the same interface in virtual time, for simulation (the front ends run unchanged on it).
Injection (latency, slowness, faults, wrong results) comes from `gencc.faults`. The engine knows nothing of codes.
"""

from .backends import BACKEND_ALIASES, BACKENDS, Constant, FunctionTable, ProcessBackend, ThreadBackend, backend_name
from .pool import make_backend, make_pool, shared_threads
from .task import Task, TaskRecord, WorkerError, describe_error
from .virtual import VirtualWorkers
from .workers import LAGS, Workers

__all__ = ["BACKENDS", "BACKEND_ALIASES", "LAGS", "Constant", "FunctionTable", "ProcessBackend", "Task",
           "TaskRecord", "ThreadBackend", "VirtualWorkers", "WorkerError", "Workers", "backend_name", "describe_error",
           "make_backend", "make_pool", "shared_threads"]
