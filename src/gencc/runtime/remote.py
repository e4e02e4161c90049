"""RemoteExecutor: a job's logical workers on model replicas gencc does not run, reached over the Open Inference
Protocol (KServe v2 REST: Triton, KServe, MLServer, `gencc serve`). A thin executor: its backend is the engine's
`gencc.engine.remote_backend.RemoteBackend` (one pooled keep-alive client per replica), built by the engine's one
backend factory (`gencc.engine.make_backend("remote", ...)`).

- The fleet is checked when the executor is built (`gencc.engine.remote.check_fleet`: every replica's metadata and
  ready route, one signature), so a bad fleet is a `gencc.errors.ConfigError` naming "upstreams" before any work;
  the fleet's model (`Fleet.model()`) gives the jobs' input and output shapes.
- The replicas hold f: a job over them passes f=None. Its inputs must have the fleet's input shape, every task must
  run f (a code whose workers run a function of their own, ParM's parity model, is refused), and a coded job
  (whose tasks carry real-valued mixes of its inputs: GCC, BACC, LCC, SystematicGCC) needs a float input tensor:
  a mix of token ids is not a token id, and rounding it would feed the model an input the decode does not assume.
  Copies (Uncoded, Replicated, Hedged, Replication) take any input datatype.
- Logical worker n of a job runs on replica n % W (W replicas), each logical worker on its own engine worker
  and thread, so the replicas see concurrent requests (at most `max_in_flight` out to one at once). N == W, one
  task per replica, is the setting to choose: a slow or lost replica is then one straggler. With N > W a replica
  holds ceil(N / W) tasks of each job and its failure is that many stragglers; with N < W (an uncoded job of K
  inputs) replicas W - N.. stay idle.
- The replicas' faults are real and end as stragglers, never as a crash or a result used: a refused or reset
  connection is a lost task, an error status, a timeout, an answer that is not the protocol or has the wrong
  shape a failed one, an answer with NaN or infinity a non-finite one; a slow replica's task is late, and
  cancelled (its request abandoned, its thread replaced) when the job stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..engine import Task, Workers, make_backend, make_pool
from ..engine.remote import CONNECT_TIMEOUT_S, MAX_IN_FLIGHT, READ_TIMEOUT_S, Fleet, check_fleet
from ..errors import ConfigError
from .executor import Batch, EngineBatch, Executor


class _Replicas:
    """The fleet's backend seen by a job's N logical workers: worker n calls replica n % W."""

    def __init__(self, backend: Any):
        self.backend, self.n_replicas = backend, backend.n_workers

    def run(self, worker: int, task: Task, *args: Any) -> np.ndarray:
        return self.backend.run(worker % self.n_replicas, task, *args)

    def close(self) -> None:
        self.backend.close()


class RemoteExecutor(Executor):
    """Jobs on model replicas (see the module docstring).

    upstreams: the replicas' URLs `http://HOST:PORT/v2/models/NAME[/versions/V]` (or a `Fleet` checked already);
    checked at once. allow_degraded: build even when some replicas do not answer (at least one must); their
    tasks are then lost, stragglers of every job. connect_s, read_s: seconds to connect to a replica and to wait
    for its answer; max_in_flight: requests out to one replica at once, at most.
    """

    def __init__(self, upstreams: Fleet | Iterable[str], *, allow_degraded: bool = False,
                 connect_s: float = CONNECT_TIMEOUT_S, read_s: float = READ_TIMEOUT_S,
                 max_in_flight: int = MAX_IN_FLIGHT):
        self.fleet = upstreams if isinstance(upstreams, Fleet) else check_fleet(
            upstreams, allow_degraded=allow_degraded, connect_s=connect_s)
        self._options = {"connect_s": connect_s, "read_s": read_s, "max_in_flight": max_in_flight}
        self._lock = threading.Lock()
        self._workers: Workers | None = None
        self._closed = False

    @property
    def n_replicas(self) -> int:
        return len(self.fleet.upstreams)

    @property
    def in_shape(self) -> tuple[int, ...]:
        return self.fleet.in_shape

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.fleet.out_shape

    def model(self) -> Any:
        """The fleet as a `gencc.model.Model` (each call to one replica): f itself, to compare a job's outputs with."""
        return self.fleet.model()

    def check_job(self, f: Callable | None, X: np.ndarray, *, mixed: bool, uniform: bool) -> None:
        fleet = self.fleet
        if f is not None:
            raise ValueError("the replicas hold the model: pass f=None to a job over upstreams")
        if tuple(X.shape[1:]) != fleet.in_shape:
            raise ValueError(f"X must have shape (K, *in_shape) with the replicas' in_shape={fleet.in_shape}, got "
                             f"shape {tuple(X.shape)}")
        if not uniform:
            raise ConfigError("this code's workers run a function of their own (a parity model), which the "
                              "replicas do not hold; over upstreams choose a code whose workers all run f", "code")
        if mixed and not fleet.codable:
            t = fleet.signature.input
            raise ConfigError(f"a coded job sends real-valued mixes of its inputs, which input {t.name} "
                              f"({t.datatype}) of the upstreams cannot carry; integer inputs take only copies: "
                              "Uncoded, Replicated, Hedged or Replication", "code")

    def _pool(self, n: int) -> Workers:
        with self._lock:
            if self._closed:
                raise RuntimeError("this RemoteExecutor is closed")
            if self._workers is None:
                backend = make_backend("remote", self.n_replicas, upstreams=self.fleet, **self._options)
                self._workers = make_pool(max(n, 1), _Replicas(backend), preempt=True, mark_dead=False,
                                          name="gencc-remote-worker")
            return self._workers

    def prepare(self, f: Callable | None, num_workers: int) -> None:
        """Open the replicas' clients and start the job's worker threads before its clock starts."""
        self._pool(num_workers).grow(num_workers)

    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        n = max((int(t.worker) for t in tasks), default=0) + 1
        workers = self._pool(n)
        workers.grow(n)
        batch = EngineBatch(workers)  # one request per task: each task is its own replica's call
        batch.add(tasks)
        return batch

    def close(self) -> None:
        """Stop the worker threads and close the replicas' clients (threads still waiting on a replica are
        abandoned: daemons)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.close(5.0)

    def __repr__(self) -> str:
        return f"RemoteExecutor({self.n_replicas} replicas of {self.fleet.upstreams[0].name})"
