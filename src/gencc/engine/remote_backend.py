"""`RemoteBackend`: the engine's backend over a fleet of model replicas (`gencc.engine.remote`): worker w is
replica w.

A task travels as one infer request; tasks queued for a worker while its replica is busy go to it as one request
when it is free, up to its max batch size (`run_group`): a replica that batches (Triton's dynamic batcher) runs
them as one batch, and each request's own overhead is paid once. A replica's faults end as the engine's outcomes,
never as a crash of the master nor a wrong answer used: a refused or reset connection makes the task lost
(ConnectionError: the engine marks the worker dead); a 4xx/5xx answer, a timeout, or an answer that is not the
protocol, has the wrong shape or is not finite fails the task (a straggler; a non-finite output is
`InjectedFault("nan")`).

Out of rotation: a replica that fails `EJECT_AFTER` requests in a row, or whose connection is lost, is taken out
(passive ejection): its tasks are lost at once, without a request, so the engine marks its worker dead and the
dispatchers send it nothing. A probe thread asks each replica out of rotation its ready route
(`GET .../v2/models/NAME/ready`) every `PROBE_S` seconds; the engine re-creates the worker only once its replica
answers ready (`can_serve`), and a replica back in rotation that fails its next request is out again at once.
`replica_states` says where each one stands (`/metrics`, the model's v2 metadata).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..faults import InjectedFault, run_injected
from .remote import CONNECT_TIMEOUT_S, MAX_IN_FLIGHT, READ_TIMEOUT_S, Fleet, Replica, check_fleet
from .task import Task

#: failed requests in a row that take a replica out of rotation
EJECT_AFTER = 5
#: seconds between two probes of the ready route of a replica out of rotation
PROBE_S = 1.0


class RemoteBackend:
    """The engine's backend over a `Fleet` (or the URLs of one, checked first by `check_fleet`): worker w is
    replica w, so a pool has as many workers as the fleet has replicas. Only the function "f" runs remotely; a
    task carrying another function (a parity model) fails. Injected latency and faults (tests, benchmarks)
    apply as on the local backend, around the real call. `eject_after` failed requests in a row take a replica
    out of rotation until its ready route answers (probed every `probe_s` seconds; see the module docstring)."""

    def __init__(self, fleet: Fleet | Iterable[str], *, connect_s: float = CONNECT_TIMEOUT_S,
                 read_s: float = READ_TIMEOUT_S, max_in_flight: int = MAX_IN_FLIGHT, allow_degraded: bool = False,
                 eject_after: int = EJECT_AFTER, probe_s: float = PROBE_S):
        for name, v in (("connect_s", connect_s), ("read_s", read_s), ("probe_s", probe_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
        for name, n in (("max_in_flight", max_in_flight), ("eject_after", eject_after)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        if not isinstance(fleet, Fleet):
            fleet = check_fleet(fleet, allow_degraded=allow_degraded, connect_s=connect_s)
        self.fleet, self.signature = fleet, fleet.signature
        self.replicas = [Replica(up, connect_s, read_s, max_in_flight) for up in fleet.upstreams]
        self.eject_after, self.probe_s = int(eject_after), float(probe_s)
        n = len(self.replicas)
        self._lock = threading.Lock()
        self._fails = [0] * n  # failed requests in a row, per replica
        self._out = [not up for up in fleet.up] if len(fleet.up) == n else [False] * n
        self._why = ["did not answer at start-up" if o else "" for o in self._out]
        self.ejections = [0] * n  # times each replica was taken out of rotation
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._prober = threading.Thread(target=self._probe_loop, name="gencc-replica-probe", daemon=True)
        self._prober.start()

    @property
    def n_workers(self) -> int:
        return len(self.replicas)

    # ----- in and out of rotation ---------------------------------------------------------------------------
    def can_serve(self, worker: int) -> bool:
        """Whether worker's replica is in rotation (the engine re-creates a dead worker only then)."""
        return 0 <= worker < len(self._out) and not self._out[worker]

    def replica_states(self) -> list[dict[str, Any]]:
        """Per replica: its URL, "in" or "out" of rotation (and why), its failed requests in a row, and how many
        times it was taken out."""
        with self._lock:
            return [{"url": rep.upstream.url, "state": "out" if out else "in", "why": why,
                     "failures_in_a_row": fails, "ejections": ej}
                    for rep, out, why, fails, ej in zip(self.replicas, self._out, self._why, self._fails,
                                                        self.ejections, strict=True)]

    def _take_out(self, w: int, why: str) -> None:
        with self._lock:
            if self._out[w]:
                return
            self._out[w], self._why[w] = True, why
            self.ejections[w] += 1
        self._wake.set()

    def _outcome(self, w: int, failed: bool, error: BaseException | None = None) -> None:
        """A request to replica w ended: its failures in a row counted (or reset), and the replica taken out of
        rotation when they reach `eject_after` or its connection was lost."""
        if isinstance(error, ConnectionError):
            self._take_out(w, f"connection lost: {error}")
            return
        with self._lock:
            self._fails[w] = self._fails[w] + 1 if failed else 0
            eject = self._fails[w] >= self.eject_after
        if eject:
            self._take_out(w, f"{self._fails[w]} failed requests in a row (latest: {error})")

    def _check_in(self, w: int) -> None:
        """Fail at once, without a request, while replica w is out of rotation (its task is lost)."""
        if self._out[w]:
            raise ConnectionError(f"{self.replicas[w].upstream.url} is out of rotation ({self._why[w]}); "
                                  "its ready route is probed")

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.probe_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            for w, rep in enumerate(self.replicas):
                if not self._out[w] or self._stop.is_set():
                    continue
                try:
                    ok = rep.client.get(rep.upstream.path + "/ready").status_code == 200
                except Exception:  # noqa: BLE001 - httpx's errors: still out
                    ok = False
                if ok:
                    with self._lock:
                        # back in rotation, on trial: its next failed request takes it out again
                        self._out[w], self._why[w], self._fails[w] = False, "", self.eject_after - 1

    # ----- tasks --------------------------------------------------------------------------------------------
    def _call(self, worker: int, task: Task) -> Callable[[Any], np.ndarray]:
        if task.fn not in (None, "f"):
            raise ValueError("a replica runs the model only: the task's own function (a parity model) cannot be "
                             "sent to it")
        rep, sig = self.replicas[worker], self.signature
        return functools.partial(rep.infer_rows, sig)

    def run(self, worker: int, task: Task, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event) -> np.ndarray:
        if not 0 <= worker < len(self.replicas):
            raise ConnectionError(f"no replica for worker {worker}: the fleet has {len(self.replicas)}")
        if fault == "crash":
            raise ConnectionError("worker crashed")
        self._check_in(worker)
        call = self._call(worker, task)
        try:
            if task.block:  # a block of inputs: their outputs as one block, non-finite rows left to its owner
                out = call(np.asarray(task.x))
            else:
                out = run_injected(call, np.asarray(task.x), extra_s, slow, fault, hang_s, stop, True, task.delay)
        except Exception as e:
            if not fault:  # an injected fault says nothing of the replica
                self._outcome(worker, True, e)
            raise
        self._outcome(worker, False)
        return out

    def group_limit(self, worker: int) -> int:
        """The most queued tasks of a worker the engine may send to its replica as one request: the replica's
        largest batch (1 for a model without a batch axis)."""
        sig = self.signature
        return sig.max_batch if sig.batched else 1

    def run_group(self, worker: int, tasks: Sequence[Task]) -> list[Any]:
        """Plain tasks of one worker (one input each, nothing injected) as one request to its replica: per task,
        its float64 output or the exception that fails it (a non-finite row fails its own task only; a lost
        replica loses them all)."""
        try:
            if not 0 <= worker < len(self.replicas):
                raise ConnectionError(f"no replica for worker {worker}: the fleet has {len(self.replicas)}")
            self._check_in(worker)
            X = np.stack([np.asarray(t.x) for t in tasks])
            Y = self._call(worker, tasks[0])(X)
        except Exception as e:  # noqa: BLE001 - every task of the request fails with it
            if 0 <= worker < len(self.replicas) and not self._out[worker]:
                self._outcome(worker, True, e)
            return [e] * len(tasks)
        out: list[Any] = []
        for y in np.asarray(Y, dtype=np.float64):
            out.append(y if np.all(np.isfinite(y)) else InjectedFault("nan", y))
        self._outcome(worker, all(isinstance(o, Exception) for o in out), out[0] if out else None)
        return out

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._prober.join(5)
        for rep in self.replicas:
            rep.close()
