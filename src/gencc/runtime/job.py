"""gencc.run (one job) and gencc.stream (many jobs, several in flight, results in order)."""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from .._util.arrays import is_torch, take_rows
from .._util.validate import check_int
from ..codes.base import Code
from ..codes.ordering import METHODS, order_checked
from ..codes.replication import Replication
from ..engine import Task
from ..errors import ConfigError
from ..faults import LatencyModel, draw_delays
from ..model import resolve
from .baselines import Baseline
from .collect import execute
from .executor import Executor, JobTasks
from .inputs import as_rng, check_deadline, check_inputs, check_timeout, restore_kind
from .local import LocalExecutor
from .policy import CodedPolicy
from .results import RunResult

#: default hard timeout (seconds) of a job that cannot yet decode
DEFAULT_TIMEOUT = 60.0

_DEFAULT: LocalExecutor | None = None
_DEFAULT_LOCK = threading.Lock()


def default_executor() -> LocalExecutor:
    """The embedded in-process executor shared by calls that pass no executor; closed at interpreter exit
    (its threads finish the call of f they are in first: a torch forward still running while the interpreter
    tears down can abort the process)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = LocalExecutor()
            atexit.register(_close_default)
        return _DEFAULT


def _close_default() -> None:
    global _DEFAULT
    with _DEFAULT_LOCK:
        ex, _DEFAULT = _DEFAULT, None
    if ex is not None:
        ex.close()


def _hedge_default(latency: Any) -> float | None:
    """The 95th percentile of the injected latency (what a hedging deployment would measure and use)."""
    if latency is None:
        return None
    if isinstance(latency, LatencyModel):
        return float(np.quantile(latency.sample(20000, np.random.default_rng(0)), 0.95))
    d = np.asarray(latency, dtype=float)
    d = d[np.isfinite(d)]
    return float(np.quantile(d, 0.95)) if d.size else None


def robust_policy(code: Code, wait_for: int | None, deadline: float | None, adversaries: int,
                  threshold: Any = None) -> CodedPolicy:
    """The collection policy of a job that expects up to `adversaries` wrong results (checked), with the robust
    decode's `threshold` (None: the default; a number, or a `gencc.codes.robust.Calibration`)."""
    from ..codes.robust import DEFAULT_THRESHOLD, check_threshold, min_results
    from .robust import RobustPolicy

    need = min_results(code, adversaries)  # validates adversaries
    if need > code.N:
        raise ValueError(f"{code.name} with N={code.N} cannot decode with adversaries={adversaries} set aside: "
                         f"that needs {need} results; use more workers or a smaller bound")
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    check_threshold(code, threshold, adversaries)
    return RobustPolicy(code, wait_for, deadline, adversaries, threshold)


_CODE, _REPLICATION, _BASELINE = "code", "replication", "baseline"
#: the kind of each type of code a job was given (isinstance on the codes' abstract base classes goes through
#: Python-level hooks: once per type, not per job)
_KINDS: dict[type, str] = {}
#: the executor types a job was given (checked once per type, likewise)
_EXECUTORS: set[type] = set()


def _kind(code: Any) -> str:
    """The job's kind of `code` (`_CODE`, `_REPLICATION`, `_BASELINE`), kept per type; refuses anything else."""
    if not isinstance(code, (Code, Baseline)):
        raise ValueError(f"code must be a gencc Code (GCC, BACC, LCC, Replication, ParM) or a baseline (Uncoded, "
                         f"Replicated, Hedged), got {type(code).__name__}")
    kind = _BASELINE if isinstance(code, Baseline) else _REPLICATION if isinstance(code, Replication) else _CODE
    _KINDS[type(code)] = kind
    return kind


def check_stop(code: Code | Baseline, wait_for: Any = None, deadline: Any = None) -> int | None:
    """A job's stop rule checked for `code`, as `run` and `stream` check it: a code stops at `wait_for` results,
    an integer from its fewest decodable results up to N (None: every result or the deadline), and `deadline`
    seconds after dispatch; a baseline has its own rule (the first answer per input) and takes neither.
    Returns wait_for; a refusal is a `gencc.errors.ConfigError` naming wait_for or deadline."""
    if _kind(code) is _BASELINE:
        for name, value in (("wait_for", wait_for), ("deadline", deadline)):
            if value is not None:
                raise ConfigError(f"{name} applies to coded jobs only; {code.name} has its own stop rule (the first "
                                  "answer per input)", name)
        return None
    if deadline is not None:
        try:
            check_deadline(deadline)
        except ValueError as e:
            raise ConfigError(str(e), "deadline") from None
    if wait_for is None:
        return None
    lo = max(code.min_results, 1)
    try:
        return check_int("wait_for", wait_for, lo, code.N, what=f"an integer in [{lo}, N={code.N}]",
                         hint=f"{code.name} decodes from at least {lo} results and runs {code.N} workers")
    except ValueError as e:
        raise ConfigError(str(e), "wait_for") from None


def _remote(executor: Executor | None, upstreams: Any) -> Executor:
    """The `RemoteExecutor` over `upstreams` (the fleet checked now) for a call given upstreams, not an executor."""
    if executor is not None:
        raise ValueError("pass upstreams or an executor, not both (a RemoteExecutor is built from upstreams)")
    from .remote import RemoteExecutor

    return RemoteExecutor(upstreams)


def _own_function(code: Code, f: Callable | None, n: int) -> Callable | None:
    """Worker n's own function when the code gives it one other than the job's f (else None)."""
    if code.uniform_workers:
        return None
    fn = code.worker_function(f, n)
    return None if fn is f else fn


def run(
    f: Callable | None,
    X: Any,
    code: Code | Baseline,
    executor: Executor | None = None,
    wait_for: int | None = None,
    deadline: float | None = None,
    latency: LatencyModel | np.ndarray | None = None,
    order: bool | str = True,
    *,
    seed: int | np.random.Generator | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    adversaries: int = 0,
    robust_threshold: Any = None,
    upstreams: Any = None,
) -> RunResult:
    """Run one coded job: order and encode the K inputs, dispatch N tasks, collect, decode.

    Stop rule (codes): the first `wait_for` valid results, `deadline` seconds after dispatch, or both
    (whichever comes first); neither means every worker. It never stops with fewer results than the code can
    decode from: it waits on, and past `timeout` seconds raises JobTimeout. Both clocks start when the executor
    is ready (`Executor.prepare`: a RayExecutor's actor start-up is bounded by its own `ready_timeout`).
    `latency` (a latency model drawn with `seed`, or N delays in seconds, inf meaning never) is added to each
    worker's compute time before its result is delivered; results after the stop are dropped. Baselines (Uncoded,
    Replicated, Hedged) have their own stop rule: the first answer per input. `f`: anything `gencc.as_model` takes
    (a torch module, an import path, a model file) or a callable; None when the executor holds a factory. numpy in
    gives numpy out, torch in gives torch out. Without `executor`, the process's default `LocalExecutor()` runs a
    batched f (a `gencc.Model`, or `batched = True`) as one batched call on the job's tasks, each worker keeping its
    own latency and faults; an f on one input at a time gets a thread per worker.

    `adversaries` (codes only: an upper bound A on workers returning wrong but finite results): the job waits
    for enough results to decode with A of them set aside, decodes with `code.robust_decode`, and lists each
    flagged worker in `stragglers` with the reason "inconsistent result"; its result is never used.
    `robust_threshold`: that decode's threshold, a number or a `gencc.codes.robust.Calibration` from honest runs
    of this code and model (`robust.calibrate`: a stated false-alarm rate); None is the default threshold.

    `upstreams` (instead of `executor`): the URLs of model replicas you run, `http://HOST:PORT/v2/models/NAME`
    (Open Inference Protocol servers); the job runs on a `RemoteExecutor` over them, built for this call (the
    fleet checked first) and closed after it; f is None (the replicas hold the model). For many jobs, build one
    `RemoteExecutor(upstreams)` and pass it as `executor` (or use `stream(..., upstreams=...)`).
    """
    if upstreams is not None:
        with _remote(executor, upstreams) as ex:
            return run(f, X, code, ex, wait_for, deadline, latency, order, seed=seed, timeout=timeout,
                       adversaries=adversaries, robust_threshold=robust_threshold)
    t_start = time.perf_counter()
    f = resolve(f)  # a torch module, an import path or a model file: as_model's Model (torch in, torch out)
    kind = _KINDS.get(type(code)) or _kind(code)
    if f is not None and not callable(f):
        raise ValueError(f"f must be callable, got {type(f).__name__}")
    if executor is None:
        if f is None:
            raise ValueError("f is None: pass the function, an executor built from a factory, or upstreams=")
        executor = default_executor()
    elif type(executor) not in _EXECUTORS:
        if not isinstance(executor, Executor):
            raise ValueError(f"executor must be a gencc Executor (LocalExecutor, RayExecutor), got {executor!r}")
        _EXECUTORS.add(type(executor))
    Xn = check_inputs(X, code.K)
    if type(executor).check_job is not Executor.check_job:  # an executor that refuses some jobs (the replicas')
        executor.check_job(f, Xn, mixed=kind is _CODE, uniform=kind is not _CODE or code.uniform_workers)
    if deadline is not None:
        deadline = check_deadline(deadline)
    if timeout is not DEFAULT_TIMEOUT:
        timeout = check_timeout(timeout)
    if order is not True and order is not False and order not in METHODS:
        raise ValueError(f"order must be True, False or one of {', '.join(METHODS)}, got {order!r}")
    rng = as_rng(seed)
    delays = draw_delays(latency, code.N, rng) if latency is not None or kind is _BASELINE else None
    if kind is _BASELINE:
        if wait_for is not None or deadline is not None:
            check_stop(code, wait_for, deadline)
        if adversaries or robust_threshold is not None:
            raise ValueError(f"{code.name} has no robust decode; adversaries= applies to codes (GCC, BACC, LCC)")
        policy, tasks = code.policy(X if is_torch(X) else Xn, delays, _hedge_default(latency))
        perm = None  # inputs in the caller's order
        t_encode = 0.0
    else:
        if wait_for is not None and not (type(wait_for) is int and max(code.min_results, 1) <= wait_for <= code.N):
            wait_for = check_stop(code, wait_for)  # the message is built for a refusal only
        t0 = time.perf_counter()
        if order is True and kind is _REPLICATION:
            order = False  # copies of each input: which worker holds which copy changes no output
        if order:
            perm = order_checked(Xn.reshape(code.K, -1).astype(float, copy=False), "chain" if order is True else order)
            Xp = take_rows(X if is_torch(X) else Xn, perm)  # torch stays torch; a list is read as numpy
        else:  # inputs in the caller's order: no copy into it, and none back out of it
            perm, Xp = None, X if is_torch(X) else Xn
        Xt = code.encode(Xp)
        t_encode = time.perf_counter() - t0
        if adversaries:
            policy = robust_policy(code, wait_for, deadline, adversaries, robust_threshold)
        elif robust_threshold is not None:
            raise ValueError("robust_threshold is the threshold of a robust decode: pass adversaries=A as well")
        else:  # built once the tasks are out (it is first needed then)
            policy = partial(CodedPolicy, code, wait_for, deadline)
        # dispatch in a random order: otherwise, with little injected latency, arrival order follows worker
        # index and the stragglers form a block at the edge of [-1, 1], the worst pattern for a smooth decoder
        dl, order_n = delays.tolist() if delays is not None else [0.0] * code.N, rng.permutation(code.N).tolist()
        if code.uniform_workers:
            tasks = JobTasks(Xt, order_n, dl)
        else:
            tasks = [Task(n, Xt[n], dl[n], _own_function(code, f, n)) for n in order_n]
    out, used, missing, stragglers, arrivals, timings = execute(executor, f, tasks, policy, timeout, t_start,
                                                                 t_encode)
    if perm is not None:  # back to the caller's order (out is the decode's own new array otherwise)
        res = np.empty_like(out)
        res[perm] = out
        out = res
        if missing.size:
            missing = np.sort(perm[missing])
    timings["total"] = time.perf_counter() - t_start
    return RunResult(outputs=restore_kind(out, X), returned=used, stragglers=dict(sorted(stragglers.items())),
                     timings=timings, scheme=code.name, K=code.K, N=code.N, arrivals=arrivals, missing=missing)


def stream(
    f: Callable | None,
    batches: Iterable[Any],
    code: Code | Baseline,
    executor: Executor | None = None,
    *,
    max_in_flight: int = 4,
    seed: int | None = None,
    upstreams: Any = None,
    **kwargs: Any,
) -> Iterator[RunResult]:
    """Run one job per batch of K inputs with up to `max_in_flight` jobs in flight; yield results in order.

    kwargs go to `run` (wait_for, deadline, latency, order, timeout, adversaries, robust_threshold). Job j draws
    its latencies from default_rng([seed, j]) so a seeded stream is reproducible. A job that fails raises when its
    turn comes. Jobs in flight run on their own threads, so one job's coding overlaps another's call of f: that
    pays when f releases the GIL for most of its time (a torch model: the worker also batches the jobs' tasks
    into one call); around a cheap Python f the threads only contend for the GIL, and `max_in_flight=1`, which
    runs each job in the caller's thread, costs least (`python benchmarks/run.py runtime` measures both).
    `upstreams` (instead of `executor`): the jobs run on one `RemoteExecutor` over those model replicas, closed
    when the stream ends (see `run`).
    """
    if upstreams is not None:
        with _remote(executor, upstreams) as ex:
            yield from stream(f, batches, code, ex, max_in_flight=max_in_flight, seed=seed, **kwargs)
        return
    f = resolve(f)  # once for every job
    max_in_flight = check_int("max_in_flight", max_in_flight, 1)
    seed = check_int("seed", seed, 0, optional=True)
    if "seed" in kwargs:
        raise ValueError("pass seed once")
    executor = executor if executor is not None else default_executor()
    if max_in_flight == 1:  # nothing to overlap: each job in the caller's thread (no hand-off to a pool thread)
        for j, X in enumerate(batches):
            yield run(f, X, code, executor, seed=np.random.default_rng([seed, j]) if seed is not None else None,
                      **kwargs)
        return
    pending: deque[Future] = deque()
    with ThreadPoolExecutor(max_in_flight, thread_name_prefix="gencc-job") as pool:
        try:
            for j, X in enumerate(batches):
                rng = np.random.default_rng([seed, j]) if seed is not None else None
                pending.append(pool.submit(run, f, X, code, executor, seed=rng, **kwargs))
                if len(pending) >= max_in_flight:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()
