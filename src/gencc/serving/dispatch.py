"""The dispatcher extension API: what a serving policy is written against, for the built-in policies and for one
of your own.

- `Request`: one prediction request (its input, arrival time, status, output, the tasks sent for it);
- `Env`: what a dispatcher may ask of the system that drives it (its clock, its workers' queues and loads,
  timers). The engine's `Workers` (threads or Ray actors, wall clock) and `VirtualWorkers` (virtual time) both
  implement it and call the dispatcher from one thread only, so a dispatcher holds no locks;
- `Dispatcher`: the base class of every policy. It answers each request exactly once (an output, a 503 when its
  workers all failed, or a 504 at `request_timeout`), and by its latency target `Request.deadline` when it has
  one (at the target: a decode from what has arrived where the scheme makes one, `rescue`, else a 504); with
  schedule "edf" requests wait in it earliest deadline first while every worker is busy. It cancels work no
  longer needed (a worker drops it before starting), retries a request whose every live task failed, and
  picks the least-loaded worker. An exception
  in a dispatcher's own code (forming a group, encoding, decoding, a timer) never escapes silently: `guard`
  catches it, counts it in `errors` (bounded: by place and kind, with the last `MAX_ERRORS` messages in
  `last_errors`) and fails or re-routes the requests it concerns (a coded group's members: each answered by its
  own task or a plain copy, 500 when none can be sent);
- `RollingQuantile`: a quantile of recent observations (a hedge's delay, a decode's deadline).

A policy of your own subclasses `Dispatcher` and implements `dispatch(req)` (and, to do more than answer with
a plain copy, `task_done(task)`):

    class FirstFree(Dispatcher):
        name = "first-free"

        def dispatch(self, req: Request) -> None:
            if self.send_copy(req, "primary") is None:
                self.answer(req, None, status=503, error="no live worker")

    pool = make_pool(8, make_backend("local", 8, {"f": f}))   # gencc.engine: 8 workers running f
    svc = Service(pool, FirstFree)                               # gencc.serving.Service: FirstFree(env) drives it

The built-in policies (`gencc.serving`: `UncodedDispatcher`, `ReplicatedDispatcher`, `HedgedDispatcher`,
`CodedDispatcher`, `CheckedDispatcher`) are subclasses of the same base. Tasks are the engine's
(`gencc.engine.Task`).
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..engine import Task

log = logging.getLogger(__name__)
#: error messages a dispatcher keeps (its counts by place and kind are kept in full, at most MAX_ERROR_KINDS)
MAX_ERRORS = 20
MAX_ERROR_KINDS = 64
#: uniform draws `Dispatcher.least_loaded` takes from its generator at a time
NOISE_BATCH = 4096
#: a failed task's reason (`gencc.faults.FAULTS`) in a 503's words: a non-finite output may be the model's own
#: answer to that input (an overflow), not a worker's fault
FAILED_BECAUSE = {"nan": "the output was not finite", "raise": "the model raised", "crash": "the worker was lost",
                  "hang": "no answer in time"}
#: where requests wait (`Dispatcher.schedule`): in the workers' queues as they arrive, or here, earliest deadline
#: first
SCHEDULES = ("fifo", "edf")
#: seconds a timer may fire early by (clock rounding): a deadline this close is due
CLOCK_SLACK = 1e-6
#: a request with a target gets its hedge, late task or coded tasks no later than this many task times (mean,
#: on a worker not slowed) before its deadline: the time a task takes with its usual spread
DEADLINE_MARGIN = 1.25


@dataclass(eq=False)
class Request:
    """One prediction request. `respond(req)` is called exactly once, when status leaves 0."""

    id: int
    x: Any
    t_arrival: float
    respond: Callable[[Request], None] | None = None
    status: int = 0  # 0 pending, 200 answered, 503 overloaded / failed, 504 timed out
    output: Any = None
    degraded: bool = False
    error: str = ""
    t_done: float = math.nan
    tasks: list[Task] = field(default_factory=list, repr=False)
    retries: int = 0
    group: Any = field(default=None, repr=False)
    slot: int = -1
    decoded_from: list[int] | None = None  # worker slots a degraded answer was decoded from
    gate: str = ""  # the Gate's verdict: "passed" (the decode was sent), "held" (it was not), "" (not judged)
    uncertainty: float = math.nan  # the estimated error sd of the (last) decode judged; nan: none / no estimate
    gate_score: float = math.nan  # its top-1 margin over that sd (the gate's score)
    deadline: float = math.inf  # its latency target, on the env's clock (inf: none; `request_timeout` still holds)
    exact_only: bool = False  # at the target, a 504 rather than a decoded answer

    @property
    def latency(self) -> float:
        return self.t_done - self.t_arrival

    @property
    def in_target(self) -> bool:
        """Whether it was answered (200) by its latency target (a request without a target: answered at all)."""
        return self.status == 200 and self.t_done <= self.deadline


class Env(Protocol):
    """What a dispatcher needs from the system it drives (real pool or simulator)."""

    n_workers: int

    def now(self) -> float:
        """Seconds on this environment's clock."""

    def send(self, worker: int, task: Task) -> None:
        """Append `task` to `worker`'s FIFO queue; the env later calls `task.on_done(task)` exactly once
        unless the task is dropped (cancelled before it started)."""

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn()` (on the dispatcher's thread) after `delay` seconds."""

    def loads(self) -> np.ndarray:
        """Per worker: tasks queued (not cancelled) plus running; inf for a dead worker."""


class RollingQuantile:
    """A quantile of the last `window` observations, recomputed every `every` additions (cheap enough per
    request); `default` until `min_count` observations exist."""

    def __init__(self, q: float, default: float, window: int = 2000, min_count: int = 50, every: int = 25):
        if not 0 < q < 1:
            raise ValueError(f"quantile must lie in (0, 1), got {q}")
        self.q, self.default, self.min_count, self.every = q, float(default), min_count, every
        self.values: deque[float] = deque(maxlen=window)
        self._value = float(default)
        self._since = 0

    def add(self, v: float) -> None:
        self.values.append(float(v))
        self._since += 1
        if self._since >= self.every and len(self.values) >= self.min_count:
            self._value = float(np.quantile(np.fromiter(self.values, float), self.q))
            self._since = 0

    @property
    def value(self) -> float:
        return self._value if len(self.values) >= self.min_count else self.default


def _place(err: BaseException) -> str:
    """The innermost gencc function an exception passed through (its place in `Dispatcher.errors`).

    gencc's own frames are told by their module's name, never by file path: a user's code or a clone of the
    repository may sit under any folder, one named `gencc` included."""
    place, tb = "callback", err.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module == "gencc" or module.startswith("gencc."):
            place = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return place


class Dispatcher:
    """Base: answers, cancellation, retries, least-loaded choice, timing statistics."""

    name = "base"
    #: workers a dispatcher stopped sending to (a checked dispatcher's quarantine), replaced whole
    quarantined_view: tuple[int, ...] = ()

    def __init__(self, env: Env, *, request_timeout: float = 30.0, max_retries: int = 2, seed: int = 0,
                 on_answer: Callable[[Request], None] | None = None, schedule: str = "fifo", queue_depth: int = 1):
        self.env = env
        self.request_timeout = float(request_timeout)
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if isinstance(queue_depth, bool) or not isinstance(queue_depth, int) or queue_depth < 1:
            raise ValueError(f"queue_depth must be a positive whole number of tasks, got {queue_depth!r}")
        #: "edf": a request waits here, earliest deadline first, while every worker holds `queue_depth` tasks
        #: (queued or running), and one whose deadline can no longer be met is answered at once, never run;
        #: "fifo": each request goes to a worker's queue as it arrives
        self.schedule, self.queue_depth = schedule, queue_depth
        self._held: list[tuple[float, int, Request]] = []  # edf: (deadline, seq, request) waiting for a worker
        self.expired = 0  # requests answered unrun because their deadline could not be met (edf)
        self.rescued = 0  # requests answered at their deadline with a decode from the results that had arrived
        self.max_retries = int(max_retries)
        self.rng = np.random.default_rng(seed)
        self._noise: list[float] = []  # least_loaded's draws from rng, and the next one's index
        self._noise_at = 0
        self.on_answer = on_answer
        self.latency = RollingQuantile(0.95, default=math.inf)
        self.failures: dict[str, int] = {}
        #: run time (s) and count of the tasks that returned, by worker state ("normal", or "slow": an injected
        #: slowdown hit it): what a worker's task really costs here (`/metrics`, the simulator's calibration)
        self.run_seconds: dict[str, float] = {"normal": 0.0, "slow": 0.0}
        self.runs: dict[str, int] = {"normal": 0, "slow": 0}
        self.errors: dict[str, int] = {}  # "place: ExceptionType" -> count (see `guard`)
        self.last_errors: deque[str] = deque(maxlen=MAX_ERRORS)
        self.tasks_sent = 0
        self.pending = 0
        self.last_ok = -math.inf  # when a task last returned an output (the env's clock): the workers' progress
        # requests in flight -> (their answer deadline, seq); a heap of (deadline, seq) with the requests by seq,
        # so a timer holds no request and an answered one is freed at once, not at its deadline
        self._deadlines: dict[Request, tuple[float, int]] = {}
        self._due_heap: list[tuple[float, int]] = []
        self._by_seq: dict[int, Request] = {}
        self._seq = 0
        self._sweep_at = math.inf  # when the one live sweep timer fires
        self._sweep_token = 0

    # ----- what schemes implement ---------------------------------------------------------------------
    def dispatch(self, req: Request) -> None:
        raise NotImplementedError

    def task_done(self, task: Task) -> None:
        """A task finished (ok or failed); default: a plain copy of its request."""
        req: Request = task.owner
        if task.ok:
            self.answer(req, task.output, degraded=False)
        else:
            self.maybe_retry(req)

    def workers_needed(self) -> int:
        """Workers the scheme uses at once for one request or group (fewer live ones: degraded health)."""
        return 1

    def busy_workers(self, group: Any) -> set[int]:
        """Workers holding an unfinished task of `group` (a dispatcher's group of requests, or None), where a new
        task for it should not go (the gate asks this); none for a dispatcher without groups."""
        return set()

    # ----- shared machinery ---------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Take a new request (the env calls this on the dispatcher thread). It is answered by its deadline: the
        earlier of `request_timeout` after arrival and its own target `req.deadline`."""
        self.pending += 1
        now = self.env.now()
        due = min(now + self.request_timeout, req.deadline)
        self._seq += 1
        self._deadlines[req] = (due, self._seq)
        self._by_seq[self._seq] = req
        heapq.heappush(self._due_heap, (due, self._seq))
        if due < self._sweep_at:
            self._schedule_sweep(due)
        if self.schedule == "edf" and (self._held or not self._room()):
            heapq.heappush(self._held, (due, self._seq, req))
            self.release()  # a worker may have room (a cancelled task freed it): the earliest deadline goes
            return
        self.guard(req, self.dispatch, req)

    def due(self, req: Request) -> float:
        """When `req` must be answered (its target or `request_timeout`), on the env's clock; inf once answered."""
        d = self._deadlines.get(req)
        return math.inf if d is None else d[0]

    def task_seconds(self) -> float:
        """The mean run time of a task on a worker not slowed (0 until one returned): the least a task sent now
        takes."""
        n = self.runs["normal"]
        return self.run_seconds["normal"] / n if n else 0.0

    def can_make(self, req: Request, ahead: float = 0.0) -> bool:
        """Whether a task sent for `req` now, behind `ahead` tasks, could still return by its deadline (hedges,
        coded tasks and copies are not spent on a request whose target is already lost)."""
        return self.due(req) - self.env.now() >= (1.0 + ahead) * self.task_seconds()

    def by_deadline(self, req: Request, delay: float) -> float:
        """`delay` (seconds from now until a hedge, a late task or a group's coded tasks would leave), brought
        forward to the latest moment a task sent for `req` could still return by its target (`DEADLINE_MARGIN`
        task times before it); `delay` itself for a request without a target or before task times are known."""
        if not math.isfinite(req.deadline) or not self.runs["normal"]:
            return delay
        return min(delay, max(0.0, self.due(req) - self.env.now() - DEADLINE_MARGIN * self.task_seconds()))

    def idle(self) -> bool:
        """Whether some worker is idle (a hedge or late task brought forward by `by_deadline` goes only then: near
        saturation it would cost other requests their targets)."""
        loads = self.env.loads()
        return bool(len(loads)) and float(np.min(loads)) == 0

    def _room(self) -> bool:
        """Whether some worker holds fewer than `queue_depth` tasks (edf: a waiting request may leave); also when
        none is alive, so the request's dispatch answers it (503) at once."""
        loads = self.env.loads()
        least = float(np.min(loads)) if len(loads) else math.inf
        return least < self.queue_depth or least == math.inf

    def release(self) -> None:
        """edf: send waiting requests, earliest deadline first, while a worker has room; one whose deadline can no
        longer be met (less time left than the tasks ahead of it and its own take) is answered 504 at once
        instead of run."""
        held = self._held
        while held and self._room():
            _, _, req = heapq.heappop(held)
            if req.status:
                continue
            if not self.can_make(req, float(np.min(self.env.loads()))):
                self.expired += 1
                self.answer(req, None, status=504, error="deadline cannot be met: no worker was free in time")
                continue
            self.guard(req, self.dispatch, req)

    def _schedule_sweep(self, at: float) -> None:
        """The one live sweep timer, at `at` (an earlier one supersedes it: the later timer, when it fires,
        does nothing)."""
        heap = self._due_heap
        while heap and heap[0][1] not in self._by_seq:  # answered: not worth a timer
            heapq.heappop(heap)
        self._sweep_token += 1
        token = self._sweep_token
        self._sweep_at = at
        self.later(at - self.env.now(), lambda: self._sweep(token), None)

    def _sweep(self, token: int = 0) -> None:
        """Answer the requests whose deadline passed (at their target: a decode from what has arrived, where the
        scheme can make one and the request takes it, else 504); schedule the next sweep."""
        if token != self._sweep_token:
            return
        self._sweep_at = math.inf
        now, heap = self.env.now(), self._due_heap
        while heap and heap[0][0] <= now + CLOCK_SLACK:
            _, seq = heapq.heappop(heap)
            req = self._by_seq.pop(seq, None)
            if req is None:
                continue
            self._deadlines.pop(req, None)
            if req.status:
                continue
            if math.isfinite(req.deadline) and req.deadline <= now + CLOCK_SLACK:
                if not req.exact_only and self._rescue(req):
                    continue
                self.answer(req, None, status=504, error="deadline passed: no answer came in time")
            else:
                self.answer(req, None, status=504, error="request timed out")
        while heap and heap[0][1] not in self._by_seq:
            heapq.heappop(heap)
        if heap:
            self._schedule_sweep(heap[0][0])
        if self._held:
            self.release()

    def _rescue(self, req: Request) -> bool:
        try:
            ok = bool(self.rescue(req))
        except Exception as e:  # a failing decode at the deadline: the request still gets its 504
            self.record_error("rescue", e)
            return False
        if ok:
            self.rescued += 1
        return ok and bool(req.status)

    def rescue(self, req: Request) -> bool:
        """At `req`'s deadline, with no answer yet: answer it from the results that have arrived (a coded
        scheme's decode, sent `degraded` when the gate trusts it) and return True, or return False for a 504.
        The base has nothing to decode from."""
        return False

    # ----- isolation: a dispatcher's own exception fails only what it concerns -------------------------
    def later(self, delay: float, fn: Callable[[], None], about: Any) -> None:
        """`env.call_later` under `guard(about, ...)`: `about` is the request or group the timer concerns."""
        self.env.call_later(delay, lambda: self.guard(about, fn))

    def guard(self, about: Any, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args); an exception fails or re-routes the requests of `about` (a request, with its group,
        or a group) at once and is counted in `errors`, never passed on to the engine's loop."""
        try:
            fn(*args)
        except Exception as e:
            self.fail(about, e, _place(e))

    def record_error(self, place: str, err: BaseException) -> str:
        """Count `err` under "place: ExceptionType" (MAX_ERROR_KINDS kinds at most; the rest count as "other")."""
        key = f"{place}: {type(err).__name__}"
        if key not in self.errors and len(self.errors) >= MAX_ERROR_KINDS:
            key = "other"
        first = key not in self.errors
        self.errors[key] = self.errors.get(key, 0) + 1
        msg = f"{key}: {str(err)[:200]}"
        self.last_errors.append(msg)
        if first:
            log.warning("%s dispatcher: %s (requests concerned are failed or re-routed)", self.name, msg,
                        exc_info=err)
        return msg

    def fail(self, about: Any, err: BaseException, place: str = "callback") -> None:
        """After an exception in the dispatcher's code about a request or group: its group (if any) is
        abandoned, and each unanswered request concerned is re-routed (`reroute`)."""
        msg = self.record_error(place, err)
        group = about if hasattr(about, "members") else getattr(about, "group", None)
        reqs = list(group.members) if group is not None else []
        if isinstance(about, Request) and about not in reqs:
            reqs.append(about)
        if group is not None:
            try:
                self.abandon(group)
            except Exception as e:  # abandoning must not stop the members' answers
                self.record_error("abandon", e)
        for r in reqs:
            if r.status:
                continue
            try:
                self.reroute(r, msg)
            except Exception as e:
                self.record_error("reroute", e)
                self.answer(r, None, status=500, error=f"internal error: {msg}")

    def abandon(self, group: Any) -> None:
        """Stop using `group` (a coded group, after an exception about it): no more coded work or decodes,
        its members' own tasks answer them as plain copies, the next arrival opens a new group."""
        group.broken = group.formed = group.done = True
        if getattr(self, "open", None) is group:
            self.open = None
        for t in group.tasks:
            t.cancel()

    def reroute(self, req: Request, reason: str) -> None:
        """Serve `req` without its group: a plain copy now (its own task, if still running, may answer first:
        it lost the group's redundancy); 500 when no worker can take one and none of its tasks is running."""
        if any(t.kind in ("retry", "copy") and not t.cancelled and math.isnan(t.t_end) for t in req.tasks):
            return
        sent = self.send_copy(req, "retry", exclude={t.worker for t in req.tasks}) or self.send_copy(req, "retry")
        if sent is None and not self.live(req):
            self.answer(req, None, status=500, error=f"internal error: {reason}")

    @staticmethod
    def _group_of(task: Task) -> Any:
        owner = task.owner
        return owner if hasattr(owner, "members") else getattr(owner, "group", None)

    def answer(self, req: Request, output: Any, degraded: bool = False, status: int = 200,
               error: str = "") -> bool:
        """Answer `req` unless already answered; cancels its outstanding tasks. True when this call answered. A
        decoded answer (`degraded`) is refused to a request that takes exact answers only (False)."""
        if req.status or (degraded and req.exact_only and status == 200):
            return False
        req.status, req.output, req.degraded, req.error = status, output, degraded, error
        req.t_done = self.env.now()
        self.pending -= 1
        d = self._deadlines.pop(req, None)
        if d is not None:
            self._by_seq.pop(d[1], None)
        if status == 200:
            self.latency.add(req.latency)
        for t in req.tasks:
            t.cancel()
        try:
            self.answered(req)
        except Exception as e:  # a group hook failing: the group is abandoned, this answer still goes out
            self.fail(req.group if req.group is not None else req, e, "answered")
        if self.on_answer is not None:
            try:
                self.on_answer(req)
            except Exception as e:  # an observer's bug must not keep the answer from its caller
                self.record_error("on_answer", e)
        if req.respond is not None:
            req.respond(req)
        return True

    def answered(self, req: Request) -> None:
        """Hook for schemes (a coded group learns a member is done)."""

    def least_loaded(self, exclude: Any = ()) -> int:
        """A worker with the fewest queued + running tasks, ties at random (each load plus a uniform draw in
        [0, 0.5)); -1 if none is available.

        Plain Python on lists, the draws taken from `rng` NOISE_BATCH at a time (the same stream as one call
        per choice): numpy's generator releases the GIL to fill its array, and on the event loop's thread each
        release waits behind the worker threads to take it back (at saturation ~0.3 ms per request, the
        largest cost of a dispatch, `benchmarks/serving_floor.py --profile`)."""
        loads = self.env.loads().tolist()
        n, i = len(loads), self._noise_at
        if i + n > len(self._noise):
            self._noise = self._noise[i:] + self.rng.random(max(NOISE_BATCH, n)).tolist()
            i = 0
        self._noise_at = i + n
        best, pick = math.inf, -1
        for w, (v, u) in enumerate(zip(loads, self._noise[i:i + n], strict=True)):
            if exclude and w in exclude:
                continue
            v += u * 0.5
            if v < best:
                best, pick = v, w
        return pick if math.isfinite(best) else -1

    def send(self, worker: int, task: Task) -> Task:
        task.worker, task.t_sent = worker, self.env.now()
        self.tasks_sent += 1
        self.env.send(worker, task)
        return task

    def send_copy(self, req: Request, kind: str, exclude: Any = ()) -> Task | None:
        """Send a plain copy of `req` (f on its input) to the least-loaded worker not in `exclude`."""
        w = self.least_loaded(exclude)
        if w < 0:
            return None
        t = Task(x=req.x, fn="f", on_done=self._done, kind=kind, owner=req)
        req.tasks.append(t)
        return self.send(w, t)

    def _done(self, task: Task) -> None:
        if not task.ok:
            self.failures[task.reason] = self.failures.get(task.reason, 0) + 1
        elif task.t_end >= task.t_start:
            if task.t_end > self.last_ok:
                self.last_ok = task.t_end
            state = "slow" if task.slow else "normal"
            self.run_seconds[state] += task.t_end - task.t_start
            self.runs[state] += 1
        group = self._group_of(task)
        if group is not None and getattr(group, "broken", False):  # abandoned: its tasks answer as plain copies
            if isinstance(task.owner, Request):
                self.guard(task.owner, Dispatcher.task_done, self, task)
        else:
            self.guard(task.owner, self.task_done, task)
        if self._held:  # a worker may have room now
            self.release()

    def live(self, req: Request) -> bool:
        """Whether some task that could answer `req` is still queued or running."""
        return any(not t.cancelled and math.isnan(t.t_end) for t in req.tasks)

    def maybe_retry(self, req: Request) -> None:
        """After a failure: if nothing else can answer `req`, retry it elsewhere or give up with a 503."""
        if req.status or self.live(req):
            return
        if req.retries >= self.max_retries:
            why = "; ".join(FAILED_BECAUSE.get(r, r) for r in sorted({t.reason for t in req.tasks
                                                                       if not t.ok and t.reason}))
            self.answer(req, None, status=503, error=f"all {req.retries + 1} attempts failed on workers"
                                                     + (f" ({why})" if why else ""))
            return
        req.retries += 1
        tried = {t.worker for t in req.tasks}
        if self.send_copy(req, "retry", exclude=tried if len(tried) < self.env.n_workers else ()) is None:
            self.answer(req, None, status=503, error="no live worker")
