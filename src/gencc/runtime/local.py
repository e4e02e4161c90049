"""LocalExecutor: a job's logical workers as the engine's long-lived worker threads (default), or threads that
hand f's call to a process pool (a GIL-holding f).

Worker n of every job runs on engine worker n (its FIFO queue holds the tasks of the jobs in flight): it
computes f, then waits the task's injected delay, then delivers. A cancelled task is dropped if it has not
started; one waiting out its delay stops at once; one still in its call of f is left to it, and its thread
is replaced if the call outlasts a short grace (the old thread ends after the call). By default a batched f
(a `gencc.Model`, or any callable with `batched = True`) runs on `batch_threads()` threads, each running the
ready tasks of its workers as one batched call; an f taking one input at a time runs on a shared pool of
`gencc.engine.shared_threads()` threads (O(1) in the workers) that take any idle worker's next task, one per
call, so a hung call holds only its own task.
`max_threads=T` puts every f on T threads (T at least the workers: a thread per worker, each task its own
call). With `processes`, f is built once per process from a factory (or f itself, pickled); the delay and the
cancellation stay on the master side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from .._util.validate import check_int, check_positive
from ..engine import Constant, ProcessBackend, Task, ThreadBackend, Workers, blas, make_pool
from ..faults import Faults
from .executor import Batch, EngineBatch, Executor


def batch_threads() -> int:
    """The threads of the default executor's batched pool: one. A batched call of a job's tasks is the model's
    own batch, which numpy's BLAS and torch's intra-op threads already spread over the cores (a single pool
    thread leaves the BLAS threads uncapped); more pool threads split the batch into smaller calls competing
    for the same cores, and each adds a hand-off to the job (`python benchmarks/run.py runtime` measures the
    two). `LocalExecutor(max_threads=os.cpu_count())` is there for an f that keeps one core busy and releases
    the GIL."""
    return 1


def takes_batches(f: Callable | None) -> bool:
    """Whether f is called on batches (a `gencc.Model`, or a callable with `batched = True`)."""
    return bool(getattr(f, "batched", False))


class LocalExecutor(Executor):
    """In-process executor: threads (default) or, with `processes=P`, a pool of P processes.

    factory: picklable zero-argument callable building f; with processes it is called once per process
    (otherwise f itself is pickled once per process). With threads, f is called directly.
    max_threads: None (default): a batched f (`takes_batches`) runs on `batch_threads()` threads, each running
    the tasks its workers have ready as one batched call of f (split back per worker; a failing batch is retried
    task by task), each worker keeping its own injected latency, faults and queue; an f taking one input at a
    time runs on a shared pool (`gencc.engine.make_pool`, threads="shared": a few threads per core whatever the
    workers, any free thread calling f on the next ready task of any idle worker; a hung call holds only its
    task). An integer T: every f on T threads (logical worker n on thread n % T; T at least the workers: a
    thread per worker, whatever f does to one input stays with that worker). A batch
    shares what f does to all of it: an input that hangs f delays its batch-mates (until the job stops and
    cancels them: the thread is then abandoned and a fresh one serves its workers), and an f that returns the
    wrong shape for one input returns it for the batch. Threads are daemons, so a hung f never blocks exit.
    blas_threads: BLAS threads while the workers run ("auto": 1 when several threads run; None: untouched;
    `gencc.engine.blas`). task_timeout: seconds after which a call of f that has not returned is abandoned (its
    tasks fail, a fresh thread serves its workers; None: never).
    faults: injected per-task faults (`gencc.faults.Faults`: raise, NaN, hang, crash), drawn per worker from
    `seed`; a failed task is a straggler, and a crashed worker is replaced for the next task.
    close_timeout: seconds `close` waits for threads still in a task (cancelled tasks stop after their current
    call of f): a thread inside f (a torch forward) when the interpreter exits can abort the process.
    """

    close_timeout: float = 5.0

    def __init__(self, processes: int = 0, factory: Callable[[], Callable] | None = None,
                 max_threads: int | None = None, *, faults: Faults | None = None, seed: int = 0,
                 blas_threads: int | str | None = "auto", task_timeout: float | None = None):
        processes = check_int("processes", processes, 0, hint="0: threads")
        max_threads = check_int("max_threads", max_threads, 1, optional=True,
                                hint="None: batched calls for a batched f, a shared pool otherwise")
        blas.resolve(blas_threads, 2 if max_threads is None else max_threads)  # checked now
        self.blas_threads = blas_threads
        self.task_timeout = check_positive("task_timeout", task_timeout, optional=True, unit="seconds")
        if factory is not None and not callable(factory):
            raise ValueError("factory must be a zero-argument callable that builds f")
        if faults is not None and not isinstance(faults, Faults):
            raise ValueError(f"faults must be a gencc.faults.Faults, got {faults!r}")
        self.processes, self.factory, self.max_threads = processes, factory, max_threads
        self.faults, self.seed = faults, check_int("seed", seed, 0)
        self._lock = threading.Lock()
        self._workers: Workers | None = None  # the shared pool (or max_threads threads), or the processes
        self._batching: Workers | None = None  # the default's pool for batched f (batch_threads() threads)
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
        threads: int | str | None = self.max_threads
        if threads is None:  # per-input f: shared threads (processes: a thread per worker waits for its answer)
            threads = None if self.processes else "shared"
        self._workers = self._pool(backend, threads, "gencc-worker")

    def _pool(self, backend: object, threads: int | str | None, name: str) -> Workers:
        # a job's collector checks the outputs delivered together finite (`EngineBatch`), so a shared thread's
        # lean call does not check each one on its own
        return make_pool(1, backend, faults=self.faults, seed=self.seed, preempt=True, mark_dead=False, name=name,
                         threads=threads, inline=True, blas_threads=self.blas_threads,
                         task_timeout=self.task_timeout, check_finite=threads != "shared")

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
            if self.processes == 0 and self.max_threads is None and takes_batches(fn):
                if self._batching is None:
                    self._batching = self._pool(ThreadBackend(), batch_threads(), "gencc-batch")
                workers = self._batching
            else:
                if self._workers is None:
                    self._start(ThreadBackend())
                workers = self._workers
        # the batched pool runs a job's tasks as one call: with nothing injected, they can travel as one block
        blocks = workers is self._batching and self.faults is None
        batch = EngineBatch(workers, fn, blocks=blocks)  # type: ignore[arg-type]
        batch.add(tasks)  # grows the workers to the job's
        return batch

    def close(self) -> None:
        """Stop the workers and the process pool. Threads still in a task get up to `close_timeout` seconds to
        finish it (a task its job cancelled ends after its current call of f); one that is still busy after
        that (a hung f, or a task nobody cancelled) is abandoned: threads are daemons."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pools = [p for p in (self._workers, self._batching) if p is not None]
        end = time.monotonic() + self.close_timeout
        for p in pools:
            p.close(max(0.0, end - time.monotonic()))

    def __repr__(self) -> str:
        kind = f"processes={self.processes}" if self.processes else "threads"
        return f"LocalExecutor({kind})"
