"""Where a worker's task runs: in the worker thread itself (`ThreadBackend`) or in a process pool
(`ProcessBackend`, for a GIL-holding f); Ray actors are `gencc.engine.ray.backend.RayBackend`.

A backend's `run(worker, task, extra_s, slow, fault, hang_s, stop)` returns the task's float64 output or
raises: ConnectionError when the worker is lost (an injected crash, a dead actor), `gencc.faults.InjectedFault`
for an injected failure or a non-finite output, anything else when f itself raised.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from ..faults import Cancelled, run_injected
from ..model import apply_one
from .batch import Item, call_task, run_items
from .task import Task, describe_error

#: where a front end's workers run: `local` (the engine's threads in this process), `ray` (one actor each) or
#: `remote` (model replicas gencc does not run, one per worker: `gencc.engine.remote`, named by their upstreams)
BACKENDS = ("local", "ray", "remote")
#: other words for a backend (`backend_name` reads them): "threads" is the local backend, its worker threads
BACKEND_ALIASES = {"threads": "local"}


def backend_name(kind: str) -> str:
    """The backend `kind` names, one of BACKENDS (an alias of BACKEND_ALIASES read as its backend); a ValueError
    naming the choices otherwise."""
    name = BACKEND_ALIASES.get(kind, kind) if isinstance(kind, str) else kind
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)} "
                         f"({', '.join(f'{a}: {b}' for a, b in BACKEND_ALIASES.items())})")
    return name


class Constant:
    """A picklable factory returning a fixed callable (ships a plain f to a process or an actor)."""

    def __init__(self, f: Callable):
        self.f = f

    def __call__(self) -> Callable:
        return self.f


class FunctionTable:
    """Numbers the functions tasks carry (`Task.fn` callables) so that a backend whose workers are other
    processes ships each one once and each process builds it once: what travels is `dumps(fn)` (a pickle, or a
    Ray object ref), and a gencc workload model pickles as its factory, so the model is built on the worker."""

    def __init__(self, dumps: Callable[[Any], Any] = pickle.dumps):
        self._dumps = dumps
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[Callable, int, Any]] = {}

    def entry(self, fn: Callable, where: str) -> tuple[int, Any]:
        """(the key of `fn`, its payload); a ValueError when `fn` cannot be shipped."""
        with self._lock:
            e = self._entries.get(id(fn))
            if e is None or e[0] is not fn:  # the table holds fn, so its id is not reused while listed
                try:
                    payload = self._dumps(fn)
                except Exception as err:
                    raise ValueError(f"{where} ships a worker's own function (e.g. ParM's parity model) to its "
                                     f"process, so it must pickle: {describe_error(err)}") from err
                e = (fn, len(self._entries), payload)
                self._entries[id(fn)] = e
            return e[1], e[2]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class ThreadBackend:
    """Runs tasks in the worker thread itself: `functions` maps names ("f", "parity") to models held in this
    process, called on batches; a task may carry its own callable instead, called as `gencc.model.apply_batch`
    does (batches when `fn.batched`, else one input at a time). The tasks a worker thread takes together are one
    call per function (`run_items`). `dtype`: inputs are cast to it first."""

    def __init__(self, functions: dict[str, Callable] | None = None, dtype: Any = None):
        self.functions = dict(functions or {})
        self.dtype = dtype

    def resolve(self, task: Task) -> tuple[Callable, bool | None]:
        """(the task's function, whether it takes batches: True for a named model, None: its own `batched`)."""
        fn = task.function
        if callable(fn):
            return fn, None
        if fn not in self.functions:
            raise ValueError(f"no function {fn!r} on this backend (it holds {', '.join(self.functions) or 'none'})")
        return self.functions[fn], True

    def run_items(self, items: list[Item]) -> None:
        """The tasks of several workers in as few calls as their functions allow (`gencc.engine.batch`): the
        workers use this instead of `run`, and hold each task's injected time themselves."""
        run_items(self.resolve, items, self.dtype)

    def run_task(self, task: Task) -> Any:
        """One task's outcome with nothing injected (`gencc.engine.batch.call_task`): shared threads call this
        for each task they run when no latency or fault is injected."""
        return call_task(self.resolve, task, self.dtype)

    def plain(self, task: Task) -> Callable | None:
        """The task's function when a shared thread may call it with `gencc.engine.batch.call_plain`: a callable
        of the task's own that takes one input at a time (no `batched`), on a backend that casts no inputs; None
        otherwise (`run_task` then)."""
        fn = task.fn
        if self.dtype is not None or task.block or not callable(fn) or getattr(fn, "batched", False):
            return None
        return fn

    def run(self, worker: int, task: Task, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event) -> np.ndarray:
        if fault == "crash":
            raise ConnectionError("worker crashed")
        x = task.x if self.dtype is None else np.asarray(task.x, dtype=self.dtype)
        fn, batched = self.resolve(task)
        return run_injected(fn, x, extra_s, slow, fault, hang_s, stop, batched, task.delay)

    def close(self) -> None:
        pass


# ----- processes ---------------------------------------------------------------------------------------------
_PROC_F: Callable | None = None
_PROC_FNS: dict[int, Callable] = {}  # the tasks' own functions, built once per process


def _proc_init(blob: bytes) -> None:
    global _PROC_F
    _PROC_F = pickle.loads(blob)()


def _proc_call(x: Any, fn_key: int | None = None, fn_blob: bytes | None = None) -> tuple[np.ndarray, float]:
    assert _PROC_F is not None, "process worker was not initialised"
    f = _PROC_F
    if fn_key is not None:
        if fn_key not in _PROC_FNS:
            _PROC_FNS[fn_key] = pickle.loads(fn_blob)  # type: ignore[arg-type]
        f = _PROC_FNS[fn_key]
    t = time.perf_counter()
    y = apply_one(f, x)
    return y, time.perf_counter() - t


class _Remote:
    """f called in the pool's process (one input at a time), cancellable while it waits for the answer."""

    def __init__(self, pool: ProcessPoolExecutor, extra: tuple, stop: threading.Event):
        self.pool, self.extra, self.stop = pool, extra, stop

    def __call__(self, x: Any) -> np.ndarray:
        fut = self.pool.submit(_proc_call, x, *self.extra)
        while not fut.done():
            if self.stop.wait(0.005):
                fut.cancel()
                raise Cancelled("cancelled")
        return fut.result()[0]


class ProcessBackend:
    """Runs f in a pool of `processes` spawned processes, each building f once from the picklable `factory`;
    the worker threads wait for the answers (cancellable) and keep the injected delays."""

    def __init__(self, processes: int, factory: Callable[[], Callable]):
        try:
            blob = pickle.dumps(factory)
        except Exception as e:
            raise ValueError(f"processes need a picklable f or factory: {describe_error(e)}") from e
        self.pool = ProcessPoolExecutor(processes, mp_context=mp.get_context("spawn"), initializer=_proc_init,
                                        initargs=(blob,))
        self.table = FunctionTable()

    def run(self, worker: int, task: Task, extra_s: float, slow: float, fault: str, hang_s: float,
            stop: threading.Event) -> np.ndarray:
        if fault == "crash":
            raise ConnectionError("worker crashed")
        extra = () if task.fn is None or isinstance(task.fn, str) else \
            self.table.entry(task.fn, "a process-backed LocalExecutor")
        return run_injected(_Remote(self.pool, extra, stop), task.x, extra_s, slow, fault, hang_s, stop, None,
                            task.delay)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
