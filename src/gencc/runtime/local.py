"""LocalExecutor: logical workers as in-process threads (default) or a process pool (GIL-holding f).

Each task runs on its own daemon thread: it computes f, then waits its injected delay on a cancellation
flag, then delivers. A cancelled task is skipped if it has not started and never delivers if it has. With
`processes`, the thread hands f's call to a process pool (f built once per process from a factory) and keeps
the delay and the cancellation on the master side.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from .._validate import check_int
from .executor import (
    Batch,
    Completion,
    Constant,
    Executor,
    FunctionTable,
    QueueBatch,
    Task,
    call_one,
    describe_error,
)

_PROC_F: Callable | None = None
_PROC_FNS: dict[int, Callable] = {}  # the tasks' own functions, built once per process


def _proc_init(blob: bytes) -> None:
    global _PROC_F
    factory = pickle.loads(blob)
    _PROC_F = factory()


def _proc_call(x: Any, fn_key: int | None = None, fn_blob: bytes | None = None) -> tuple[np.ndarray, float]:
    assert _PROC_F is not None, "process worker was not initialised"
    f = _PROC_F
    if fn_key is not None:
        if fn_key not in _PROC_FNS:
            _PROC_FNS[fn_key] = pickle.loads(fn_blob)  # type: ignore[arg-type]
        f = _PROC_FNS[fn_key]
    t = time.perf_counter()
    y = call_one(f, x)
    return y, time.perf_counter() - t


class LocalExecutor(Executor):
    """In-process executor: threads (default) or, with `processes=P`, a pool of P processes.

    factory: picklable zero-argument callable building f; with processes it is called once per process
    (otherwise f itself is pickled once per process). With threads, f is called directly.
    max_threads: cap on concurrent task threads (threads are daemons, so a hung f never blocks exit).
    close_timeout: seconds `close` waits for task threads still running (cancelled tasks stop after their
    current call of f): a thread inside f (a torch forward) when the interpreter exits can abort the process.
    """

    close_timeout: float = 5.0

    def __init__(self, processes: int = 0, factory: Callable[[], Callable] | None = None, max_threads: int = 512):
        processes = check_int("processes", processes, 0, hint="0: threads")
        max_threads = check_int("max_threads", max_threads, 1)
        if factory is not None and not callable(factory):
            raise ValueError("factory must be a zero-argument callable that builds f")
        self.processes, self.factory, self.max_threads = processes, factory, max_threads
        self._work: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._started: list[threading.Thread] = []  # every task thread, in start order
        self._idle = 0
        self._pool: ProcessPoolExecutor | None = None
        self._pool_f: Any = None
        self._local_f: Callable | None = None
        self._functions = FunctionTable()
        self._closed = False

    # ----- threads -------------------------------------------------------------------------------------
    def _enqueue(self, item: tuple) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("this LocalExecutor is closed")
            self._work.put(item)
            if self._idle == 0 and len(self._started) < self.max_threads:
                t = threading.Thread(target=self._loop, name=f"gencc-worker-{len(self._started) + 1}", daemon=True)
                self._started.append(t)
                t.start()
            else:
                self._idle -= 1

    def _loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            self._run(*item)
            with self._lock:
                self._idle += 1

    def _run(self, batch: QueueBatch, f: Callable, task: Task) -> None:
        cancel = batch.event(task.worker)
        if cancel.is_set():
            return
        try:
            if self._pool is not None:
                extra = self._functions.entry(task.fn, "a process-backed LocalExecutor") if task.fn else ()
                fut = self._pool.submit(_proc_call, task.x, *extra)
                while not fut.done():
                    if cancel.wait(0.005):
                        fut.cancel()
                        return
                y, dt = fut.result()
            else:
                t = time.perf_counter()
                y = call_one(task.fn if task.fn is not None else f, task.x)
                dt = time.perf_counter() - t
            c = Completion(task.worker, value=y, compute_time=dt)
        except Exception as e:  # a failing worker is a straggler, never a crash of the master
            c = Completion(task.worker, error=describe_error(e))
        if np.isinf(task.delay):  # never delivers: wait for the job to cancel it
            cancel.wait()
            return
        if task.delay > 0 and cancel.wait(task.delay):
            return
        batch.deliver(c)

    # ----- the Executor interface --------------------------------------------------------------------------
    def _bind(self, f: Callable | None) -> Callable | None:
        if self.processes == 0:
            if f is None:
                if self.factory is None:
                    raise ValueError("no function: pass f to run, or build LocalExecutor(factory=...)")
                if self._local_f is None:
                    self._local_f = self.factory()
                return self._local_f
            return f
        with self._lock:
            if self._pool is None:
                factory = self.factory if self.factory is not None else Constant(f) if f is not None else None
                if factory is None:
                    raise ValueError("no function: pass f to run, or build LocalExecutor(factory=...)")
                try:
                    blob = pickle.dumps(factory)
                except Exception as e:
                    raise ValueError(f"processes need a picklable f or factory: {describe_error(e)}") from e
                self._pool = ProcessPoolExecutor(self.processes, mp_context=mp.get_context("spawn"),
                                                 initializer=_proc_init, initargs=(blob,))
                self._pool_f = f
            elif self.factory is None and f is not None and f is not self._pool_f:
                raise ValueError("this process-backed LocalExecutor already holds another function; "
                                 "create a new executor (or pass factory=) for a different f")
        return None

    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        if self.processes:  # a function that cannot be shipped fails the call, not the workers
            for t in tasks:
                if t.fn is not None:
                    self._functions.entry(t.fn, "a process-backed LocalExecutor")
        fn = self._bind(f)
        batch = QueueBatch(lambda b, t: self._enqueue((b, fn, t)))
        batch.add(tasks)
        return batch

    def close(self) -> None:
        """Stop the threads and the process pool. Threads still in a task get up to `close_timeout` seconds to
        finish it (a task its job cancelled ends after its current call of f); one that is still busy after
        that (a hung f, or a task nobody cancelled) is abandoned: threads are daemons."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._started)
        for _ in threads:
            self._work.put(None)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        end = time.monotonic() + self.close_timeout
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))

    def __repr__(self) -> str:
        kind = f"processes={self.processes}" if self.processes else "threads"
        return f"LocalExecutor({kind})"
