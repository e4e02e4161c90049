"""LocalExecutor: a job's logical workers as the engine's long-lived worker threads (default), or threads that
hand f's call to a process pool (a GIL-holding f).

Worker n of every job runs on engine worker n (its FIFO queue holds the tasks of the jobs in flight): it
computes f, then waits the task's injected delay, then delivers. A cancelled task is dropped if it has not
started; one waiting out its delay stops at once; one still in its call of f is left to it, and its thread
is replaced if the call outlasts a short grace (the old thread ends after the call). With `max_threads` below
the number of workers, a thread serves several workers and runs their ready tasks as one batched call of f.
With `processes`, f is built once per process from a factory (or f itself, pickled); the
delay and the cancellation stay on the master side.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from .._validate import check_int, check_positive
from ..engine import Constant, ProcessBackend, Task, ThreadBackend, Workers, blas
from ..faults import Faults
from .executor import Batch, EngineBatch, Executor


class LocalExecutor(Executor):
    """In-process executor: threads (default) or, with `processes=P`, a pool of P processes.

    factory: picklable zero-argument callable building f; with processes it is called once per process
    (otherwise f itself is pickled once per process). With threads, f is called directly.
    max_threads: worker threads (logical worker n is served by thread n % max_threads; threads are daemons, so
    a hung f never blocks exit). A thread serving several workers runs the tasks they have ready as one batched
    call of f (split back per worker; a failing batch is retried task by task), each worker keeping its own
    injected latency, faults and queue: `max_threads=os.cpu_count()` makes a job on N workers a few calls of f
    instead of N. A batch shares what f does to all of it: an input that hangs f delays its batch-mates, and an
    f that returns the wrong shape for one input returns it for the batch.
    blas_threads: BLAS threads while the workers run ("auto": 1 when several threads run; None: untouched;
    `gencc.engine.blas`). task_timeout: seconds after which a call of f that has not returned is abandoned (its
    tasks fail, a fresh thread serves its workers; None: never).
    faults: injected per-task faults (`gencc.faults.Faults`: raise, NaN, hang, crash), drawn per worker from
    `seed`; a failed task is a straggler, and a crashed worker is replaced for the next task.
    close_timeout: seconds `close` waits for threads still in a task (cancelled tasks stop after their current
    call of f): a thread inside f (a torch forward) when the interpreter exits can abort the process.
    """

    close_timeout: float = 5.0

    def __init__(self, processes: int = 0, factory: Callable[[], Callable] | None = None, max_threads: int = 512,
                 *, faults: Faults | None = None, seed: int = 0, blas_threads: int | str | None = "auto",
                 task_timeout: float | None = None):
        processes = check_int("processes", processes, 0, hint="0: threads")
        max_threads = check_int("max_threads", max_threads, 1)
        blas.resolve(blas_threads, max_threads)  # checked now
        self.blas_threads = blas_threads
        self.task_timeout = check_positive("task_timeout", task_timeout, optional=True, unit="seconds")
        if factory is not None and not callable(factory):
            raise ValueError("factory must be a zero-argument callable that builds f")
        if faults is not None and not isinstance(faults, Faults):
            raise ValueError(f"faults must be a gencc.faults.Faults, got {faults!r}")
        self.processes, self.factory, self.max_threads = processes, factory, max_threads
        self.faults, self.seed = faults, check_int("seed", seed, 0)
        self._lock = threading.Lock()
        self._workers: Workers | None = None
        self._pool_f: Callable | None = None
        self._local_f: Callable | None = None
        self._closed = False

    def _bind(self, f: Callable | None) -> Callable | None:
        """The f a thread runs (None with processes, whose f lives in the processes); starts the pool."""
        if self.processes == 0:
            if f is None:
                if self.factory is None:
                    raise ValueError("no function: pass f to run, or build LocalExecutor(factory=...)")
                if self._local_f is None:
                    self._local_f = self.factory()
                return self._local_f
            return f
        with self._lock:
            if self._workers is None:
                factory = self.factory if self.factory is not None else Constant(f) if f is not None else None
                if factory is None:
                    raise ValueError("no function: pass f to run, or build LocalExecutor(factory=...)")
                self._start(ProcessBackend(self.processes, factory))
                self._pool_f = f
            elif self.factory is None and f is not None and f is not self._pool_f:
                raise ValueError("this process-backed LocalExecutor already holds another function; "
                                 "create a new executor (or pass factory=) for a different f")
        return None

    def _start(self, backend: object) -> None:
        self._workers = Workers(1, backend, faults=self.faults, seed=self.seed, preempt=True, mark_dead=False,
                                name="gencc-worker", threads=self.max_threads, inline=True,
                                blas_threads=self.blas_threads, task_timeout=self.task_timeout)

    def submit(self, f: Callable | None, tasks: Sequence[Task]) -> Batch:
        if self._closed:
            raise RuntimeError("this LocalExecutor is closed")
        fn = self._bind(f)
        if self.processes:  # a function that cannot be shipped fails the call, not the workers
            backend = self._workers.backend  # type: ignore[union-attr]
            for t in tasks:
                if callable(t.fn):
                    backend.table.entry(t.fn, "a process-backed LocalExecutor")
        with self._lock:
            if self._closed:
                raise RuntimeError("this LocalExecutor is closed")
            if self._workers is None:
                self._start(ThreadBackend())
            workers = self._workers
        workers.grow(max((int(t.worker) for t in tasks), default=0) + 1)  # type: ignore[union-attr]

        def prepare(t: Task) -> None:
            if t.fn is None and fn is not None:
                t.fn = fn

        batch = EngineBatch(workers, prepare, int)  # type: ignore[arg-type]
        batch.add(tasks)
        return batch

    def close(self) -> None:
        """Stop the workers and the process pool. Threads still in a task get up to `close_timeout` seconds to
        finish it (a task its job cancelled ends after its current call of f); one that is still busy after
        that (a hung f, or a task nobody cancelled) is abandoned: threads are daemons."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = self._workers
        if workers is not None:
            workers.close(self.close_timeout)

    def __repr__(self) -> str:
        kind = f"processes={self.processes}" if self.processes else "threads"
        return f"LocalExecutor({kind})"
