"""The worker threads behind `gencc.engine.Workers`: which task each thread takes, how a call's outcome
becomes a finished, held, failed or dropped task, and how threads are abandoned and workers re-created (the
rules are in the `gencc.engine.workers` docstring). Every helper here runs with the workers' lock held, except
`_work` and `_execute`, which take it.
"""

from __future__ import annotations

import heapq
import logging
import math
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..faults import Cancelled, InjectedFault
from .batch import Item, call_plain
from .task import Task, describe_error, record_fields

log = logging.getLogger("gencc.engine")

#: shared threads: the seconds of calls a thread claims at once (calls of a cheap f run in a loop, see `_claim`),
#: at most CHUNK_MAX tasks, and finished tasks are delivered at least this often
CHUNK_S = 1e-3
CHUNK_MAX = 64
#: shared threads: a call running this long gives the tasks its thread claimed after it back to the other threads
RELEASE_S = 0.01


class WorkerThreads:
    """The thread side of `Workers` (a mixin: the state is `Workers`'s, set up in its `__init__`)."""

    def _free(self, w: int, now: float | None = None) -> None:
        self._current[w] = None
        self.running -= 1
        self._loads[w] -= 1
        self._free_since[w] = self.now() if now is None else now
        if self.shared and self._queues[w]:  # its next task is ready for any thread
            self._ready.append(w)

    def _finish(self, task: Task, out: list[Task], now: float | None = None) -> None:
        self._finish_all((task,), out, self.now() if now is None else now)

    def _finish_all(self, tasks: Sequence[Task], out: list[Task], now: float) -> None:
        """The bookkeeping of tasks that finished at `now` (their outcome set): each worker freed, recorded,
        counted, the task appended to `out` for delivery. One pass for a whole call's tasks."""
        current, loads, free_since, keep = self._current, self._loads, self._free_since, self._records.append
        queues, ready = self._queues, self._ready.append if self.shared else None
        ok = slow = 0
        for t in tasks:
            t.state, t.on_cancel, t.t_end = "done", None, now
            w = t.worker
            current[w] = None
            loads[w] -= 1
            free_since[w] = now
            if ready is not None and queues[w]:  # its next task is ready for any thread
                ready(w)
            keep(record_fields(t))
            if t.ok:
                ok += 1
            else:
                self.counts[t.reason] += 1
            slow += t.slow
        out += tasks
        if ok:
            self.counts["ok"] += ok
        self.running -= len(tasks)
        self.slow_tasks += slow

    def _lose_queue(self, w: int, out: list[Task]) -> None:
        q = self._queues[w]
        for t in q:
            if not t.cancelled:
                t.on_cancel, t.ok, t.reason, t.error, t.t_end = None, False, "crash", "worker lost", self.now()
                self._loads[w] -= 1
                out.append(t)
        q.clear()
        self._queued[self._slot[w]].discard(w)

    def _abandon(self, s: int, why: str | None) -> list[Task]:
        """Leave slot s's thread in its call: its tasks fail with `why` (None: they were cancelled), a fresh
        thread serves its workers, unless `max_abandoned` threads are abandoned already (then they are dead)."""
        out: list[Task] = []
        for t in self._batch[s]:
            t.on_cancel = None
            if why is None:
                t.state = "dropped"
                self._free(t.worker)
            else:
                t.ok, t.reason, t.error = False, "hang", why
                self._finish(t, out)
        self._batch[s], self._t_call[s], self._t_cancel[s] = [], math.nan, math.inf
        if self.shared:  # what the thread claimed goes to the other threads, what it finished is delivered
            self._release(s)
            out += self._unsent[s]
            self._unsent[s], self._t_unsent[s] = [], math.inf
        self._gen[s] += 1
        self.abandoned = [t for t in self.abandoned if t.is_alive()]
        old = self._thread[s]
        if len(self.abandoned) >= self.max_abandoned:
            log.error("%s: %d abandoned threads still running; workers %s marked dead instead of served by "
                      "another thread", self.name, len(self.abandoned), self._members[s])
            for w in self._members[s]:
                self.dead[w] = True
                self._lose_queue(w, out)
            self._thread[s] = None
            self._starved.append(s)
        else:
            log.log(logging.DEBUG if why is None else logging.WARNING, "%s: thread %s abandoned (%s); %d "
                    "abandoned threads alive", self.name, old.name if old else "?",
                    why or "its tasks were cancelled", len(self.abandoned) + 1)
            self._start_thread(s)
        if old is not None:
            self.abandoned.append(old)
        return out

    def _unstarve(self) -> None:
        """Serve the slots left without a thread (past `max_abandoned`) again once abandoned threads ended."""
        self.abandoned = [t for t in self.abandoned if t.is_alive()]
        while self._starved and len(self.abandoned) < self.max_abandoned:
            s = self._starved.pop(0)
            for w in self._members[s]:
                if self.dead[w]:
                    self.dead[w] = False
                    self.restarts[w] += 1
            self._start_thread(s)
            log.info("%s: workers %s served again by a fresh thread", self.name, self._members[s])

    def _revive(self, w: int) -> None:
        can_serve = getattr(self.backend, "can_serve", None)  # a backend that knows (a replica out of rotation)
        with self._lock:
            if self._stopped or not self.dead[w]:
                return
            if can_serve is not None and not can_serve(w):  # not yet: asked again later, the worker dead meanwhile
                self.call_later(self.restart_s or 0.5, lambda: self._revive(w))
                return
            self.dead[w] = False
            self.restarts[w] += 1
            if self.shared:  # any thread serves it again
                if self._queues[w]:
                    self._ready.append(w)
                    self._wake[0].put(None)
                return
            s = self._slot[w]
            if self._thread[s] is None or not self._thread[s].is_alive():
                self._start_thread(s)
        log.info("%s: worker %d re-created after a crash", self.name, w)

    def _pick(self, s: int, now: float) -> list[Task]:
        """The head task of each idle live worker of slot s (cancelled ones dropped), in worker order, started at
        `now`."""
        if self.shared:
            return self._pick_one(s, now)
        picked: list[Task] = []
        queued = self._queued[s]
        if not queued:
            return picked
        queues, current, dead = self._queues, self._current, self.dead
        for w in sorted(queued) if len(queued) > 1 else tuple(queued):
            if current[w] is not None or dead[w]:
                continue
            q = queues[w]
            task = self._next_live(q)
            if task is None:
                queued.discard(w)
                continue
            self._start_task(s, w, task, now)
            picked.append(task)
            if q and self._group_limit is not None:
                self._take_group(s, w, task, q, now, picked)
            if not q:
                queued.discard(w)
        return picked

    def _take_group(self, s: int, w: int, head: Task, q: Any, now: float, picked: list[Task]) -> None:
        """Worker w's backend takes several of its queued tasks as one request (a replica's batch): more of the
        tasks queued behind `head`, started with it, up to the backend's limit, when nothing is injected and
        they are plain inputs of the same function."""
        if head.block or head.delay or self.wrong is not None or self._injects():
            return
        room = self._group_limit(w) - 1
        while room > 0 and q:
            task = q[0]
            if task.cancelled:
                q.popleft()
                self.dropped += 1
                continue
            if task.fn != head.fn or task.block or task.delay:
                return
            q.popleft()
            self._start_task(s, w, task, now)
            picked.append(task)
            room -= 1

    def _next_live(self, q: Any) -> Task | None:
        """The first task of queue q not cancelled (the cancelled ones before it dropped and counted), or None."""
        while q:
            task = q.popleft()
            if not task.cancelled:
                return task
            self.dropped += 1
        return None

    def _start_task(self, s: int, w: int, task: Task, now: float) -> None:
        """Worker w starts `task` at `now` on thread slot s."""
        self.running += 1
        task.busy, task.state, task.t_start, task.thread = self.running, "running", now, s
        if not self._batching:
            task.stop = threading.Event()
        self._current[w] = task
        if not self.preempt:  # cancelling it from now on does not stop it
            task.on_cancel = None
        sent = task.t_sent
        if sent != sent:  # nan: never stamped
            sent = now
        free = self._free_since[w]
        self.lags["pickup"].append(now - (sent if sent > free else free))

    def _pick_one(self, s: int, now: float) -> list[Task]:
        """Shared threads: the head task of the first idle live worker with one (cancelled ones dropped), started
        at `now`, as a list of one (none: empty); more idle workers' head tasks are claimed behind it in
        `_rest[s]` (`_claim`), each to run in its own call after it."""
        ready, queues, current, dead = self._ready, self._queues, self._current, self.dead
        rest, room = self._rest[s], self._claim() - 1
        first: Task | None = None
        while ready:
            w = ready.popleft()
            if current[w] is not None or dead[w]:  # listed again when it is free (or re-created)
                continue
            q = queues[w]
            if not q:
                continue
            task = q.popleft()
            if task.cancelled:  # dropped (counted), and the next live one taken
                self.dropped += 1
                task = self._next_live(q)
                if task is None:
                    continue
            if first is None:
                first = task
                self._start_task(s, w, task, now)
            else:  # claimed: its worker is busy with it, no other thread takes it (or its queue's next task)
                task.state, task.thread = "claimed", s
                current[w] = task
                rest.append(task)
            if not room:
                break
            room -= 1
        if first is None:
            return []
        if ready and self._idle:  # more may be ready: one more thread looks (a chain, not a stampede)
            self._wake[s].put(None)
        return [first]

    def _claim(self) -> int:
        """Tasks a shared thread takes at once: the calls that fit in CHUNK_S at the seconds of the cheapest of
        the latest four calls (one for an f whose calls take that long, so a slow f spreads over the threads; the
        cheapest, as a call's seconds include waits for the GIL), at most CHUNK_MAX."""
        per = min(self._call_s)
        return 1 if per >= CHUNK_S else min(CHUNK_MAX, int(CHUNK_S / max(per, 1e-7)))

    def _release(self, s: int) -> None:
        """Give slot s's claimed tasks back: each to the head of its worker's queue, ready for any thread."""
        rest = self._rest[s]
        if not rest:
            return
        queues, current, ready = self._queues, self._current, self._ready
        while rest:
            t = rest.pop()  # last first, so each goes back to the head of its queue in order
            t.state, t.thread = "", -1
            current[t.worker] = None
            queues[t.worker].appendleft(t)
            ready.appendleft(t.worker)
        for _ in range(min(self._idle, len(ready))):
            self._wake[s].put(None)

    def _drop_claimed(self, task: Task) -> None:
        """A claimed task cancelled before its call: dropped, its worker free."""
        self._rest[task.thread].remove(task)
        task.state, task.on_cancel = "dropped", None
        w = task.worker
        self._current[w] = None
        self._loads[w] -= 1
        self._free_since[w] = self.now()
        self.dropped += 1
        if self._queues[w]:
            self._ready.append(w)
            if self._idle:
                self._wake[0].put(None)

    def _due(self, s: int, out: list[Task], now: float) -> float:
        """Finish slot s's held tasks whose time has come by `now`; returns the next one's due time (inf: none)."""
        holds = self._holds[s]
        while holds and holds[0][0] <= now:
            self._finish(heapq.heappop(holds)[2], out, now)
        return holds[0][0] if holds else math.inf

    # ----- worker threads ----------------------------------------------------------------------------
    def _work(self, s: int, gen: int) -> None:
        wake, lock, shared = self._wake[s], self._lock, self.shared
        while True:
            done: list[Task] = []
            waited = False
            while True:
                with lock:
                    if waited:
                        self._idle -= 1
                        waited = False
                    if self._stopped or self._gen[s] != gen:
                        return
                    now = self.now()
                    nxt = self._due(s, done, now)
                    tasks = self._pick(s, now)
                    if done or tasks:
                        if tasks:
                            self._batch[s], self._t_call[s], self._t_cancel[s] = tasks, now, math.inf
                        break
                    wait = min(nxt - now, 0.5)
                    if shared:
                        self._idle += 1  # counted down at the next look (till then a sender may wake one more)
                # a token put after the look above wakes this wait; one put before it only costs another look
                if wait > 0:
                    try:
                        wake.get(timeout=wait)
                    except queue.Empty:
                        pass
                if shared:  # each token wakes one thread: the others' are theirs
                    waited = True
                    continue
                try:  # the tokens that came meanwhile: the next look serves them all
                    while True:
                        wake.get_nowait()
                except queue.Empty:
                    pass
            self._emit(done)
            if tasks and not (self._run_shared(s, gen, tasks[0]) if shared else self._execute(s, gen, tasks)):
                return

    def _injects(self) -> bool:
        """Whether a task gets anything injected: a straggler multiplier, a fault or a service time."""
        sv = self.service
        return not (self.stragglers is None and self.faults is None and sv.samples is None and sv.mean_s == 0)

    def _items(self, tasks: list[Task]) -> list[Item]:
        """The tasks as items, each with the injection drawn for it at its start."""
        sv = self.service
        if not self._injects():
            return [Item(t, 1.0, "", 0.0, 0.0) for t in tasks]
        items = []
        for t in tasks:
            w, rng = t.worker, self._rngs[t.worker]
            mult = self.stragglers.multiplier(w, t.t_start) if self.stragglers is not None else 1.0
            t.slow = mult > 1
            fault = self.faults.draw(rng) if self.faults is not None else ""
            hang_s = self.faults.hang_s if self.faults is not None else 0.0
            items.append(Item(t, mult, fault, sv.draw(rng), hang_s))
        return items

    def _call(self, items: list[Item]) -> None:
        """Fill the items' outcomes: the backend's calls (a crash fault fails its task without one)."""
        if self._batching:
            for it in items:
                if it.fault == "crash":
                    it.outcome = ConnectionError("worker crashed")
            self.backend.run_items([it for it in items if it.fault != "crash"] if self.faults is not None else items)
            return
        if len(items) > 1 and self._group_limit is not None and items[0].task.worker == items[-1].task.worker:
            for it, o in zip(items, self.backend.run_group(items[0].task.worker, [it.task for it in items]),
                             strict=True):  # one worker's tasks taken as one request (`_take_group`)
                it.outcome = o
            return
        for it in items:
            t = it.task
            try:
                it.outcome = self.backend.run(t.worker, t, it.extra, it.mult, it.fault, it.hang_s, t.stop)
            except Exception as e:  # noqa: BLE001 - sorted out below
                it.outcome = e

    def _execute(self, s: int, gen: int, tasks: list[Task]) -> bool:
        """Run the picked tasks, then finish or hold each; False when this thread must end."""
        run = getattr(self.backend, "run_task", None) if len(tasks) == 1 and self._batching else None
        if run is not None and not self._injects():  # one task (a job's block), nothing injected: its lean call
            items = [Item(tasks[0], 1.0, "", 0.0, 0.0, run(tasks[0]))]
        else:
            items = self._items(tasks)
            self._call(items)
        out: list[Task] = []
        with self._lock:
            if self._gen[s] != gen:  # abandoned meanwhile: a fresh thread has the workers
                return False
            self._batch[s], self._t_call[s], self._t_cancel[s] = [], math.nan, math.inf
            end = self._settle(s, items, self.now(), out)
            if end:
                self._gen[s] += 1
                self._thread[s] = None
        self._emit(out)
        return not end

    def _run_shared(self, s: int, gen: int, task: Task) -> bool:
        """Shared threads: run `task`, then the tasks the slot claimed behind it, one call each (each task's
        start, end, injection, hang and cancellation its own), settling each when its call returns; finished
        tasks are delivered together once the claimed ones are done or CHUNK_S after the oldest finished.
        False when this thread must end (abandoned meanwhile)."""
        lock, rest, clock, holds, t0 = self._lock, self._rest[s], time.perf_counter, self._holds[s], self._t0
        call = getattr(self.backend, "run_task", None) if not self._injects() else None  # the lean call
        plain_of = getattr(self.backend, "plain", None) if call is not None else None
        check, ndarray, last, plain = self.check_finite, np.ndarray, None, None
        lean = call is not None and self.wrong is None  # nothing injected: a task is never slow or wrong
        fast = lean and self._batching  # `_start_task` of a claimed task inlined (no stop event to make)
        preempt, pickup = self.preempt, self.lags["pickup"].append
        calls = self._call_s
        current, loads, free_since, queues, ready = self._current, self._loads, self._free_since, self._queues, \
            self._ready.append
        keep, counts = self._records.append, self.counts
        gens, unsent, t_unsent, batch_of, t_call_of, t_cancel = self._gen, self._unsent, self._t_unsent, \
            self._batch, self._t_call, self._t_cancel
        n, inf, nan = self._n_calls, math.inf, math.nan
        while True:
            t_call = clock()
            if call is not None:
                fn = task.fn
                if fn is not last:  # a job's tasks share one f: what it is, looked up once
                    last, plain = fn, plain_of(task) if plain_of is not None else None
                x = task.x
                o = call_plain(plain, x, check) if plain is not None and type(x) is ndarray and not task.block \
                    else call(task)
            else:
                items = self._items([task])
                self._call(items)
            t = clock()
            calls[n & 3] = t - t_call  # the latest four calls' seconds (`_claim`)
            n += 1
            sent = None
            with lock:
                self._n_calls = n
                if gens[s] != gen:  # abandoned meanwhile: its claimed and unsent tasks were handed on
                    return False
                now = t - t0
                out = unsent[s]
                if not out:
                    t_unsent[s] = now
                end = freed = False
                if lean and not task.delay and not isinstance(o, BaseException) and not task.cancelled:
                    # the common case of `_settle` and `_finish_all`: an output, nothing held; `running` is
                    # counted down below
                    task.output, task.ok, task.state, task.on_cancel, task.t_end = o, True, "done", None, now
                    w = task.worker
                    current[w] = None
                    loads[w] -= 1
                    free_since[w] = now
                    if queues[w]:
                        ready(w)
                    keep((w, task.fn, task.kind, True, "", task.t_start, now, task.busy, False, False))  # record_fields
                    out.append(task)
                    counts["ok"] += 1
                    freed = True
                else:
                    if call is not None:
                        items = [Item(task, 1.0, "", 0.0, 0.0, o)]
                    end = self._settle(s, items, now, out)
                if holds and holds[0][0] <= now:
                    self._due(s, out, now)
                if not out:
                    t_unsent[s] = inf
                if end:  # the thread ends with its crashed worker: what it claimed goes to the other threads
                    self._release(s)
                    gens[s] += 1
                    self._thread[s] = None
                task = rest.popleft() if rest and not end else None
                if task is not None:
                    if fast:  # `_start_task` of a claimed task (its worker's current task and its thread are set)
                        if not freed:  # else one running task ended and this one started: the count stays
                            self.running += 1
                        task.busy, task.state, task.t_start = self.running, "running", now
                        if not preempt:
                            task.on_cancel = None
                        at = task.t_sent
                        if at != at:  # nan: never stamped, so started as soon as its worker was free (0 s late)
                            pickup(0.0)
                        else:
                            free = free_since[task.worker]
                            pickup(now - (at if at > free else free))
                    else:
                        if freed:
                            self.running -= 1
                        self._start_task(s, task.worker, task, now)
                    batch_of[s], t_call_of[s] = [task], now
                else:
                    if freed:
                        self.running -= 1
                    batch_of[s], t_call_of[s] = [], nan
                t_cancel[s] = inf
                if task is None or now - t_unsent[s] >= CHUNK_S:
                    sent, unsent[s], t_unsent[s] = out, [], inf
            if sent:
                self._emit(sent)
            if task is None:
                return not end

    def _settle(self, s: int, items: list[Item], now: float, out: list[Task]) -> bool:
        """The called items' tasks finished, held or dropped at `now` (finished ones appended to `out`, in the
        items' order); True when the thread ends with a crashed worker."""
        ready: list[Task] = []  # due now: finished together, in the items' order
        plain, preempt, batching = self.wrong is None, self.preempt, self._batching
        end = False
        for it in items:
            t, o = it.task, it.outcome
            if plain and not isinstance(o, BaseException):  # the common case, what `_outcome` does first
                t.output, t.ok = o, True
            else:
                self._outcome(t, o)
            if preempt and t.cancelled:  # cancelled in the call: dropped, its worker free
                t.state = "dropped"
                self._free(t.worker)
                continue
            if t.reason == "crash":
                self._finish_all(ready, out, now)
                ready = []
                end |= self._crashed(t, out)
                continue
            due = now + (it.rest + t.delay if batching else 0.0)
            if due <= now:
                ready.append(t)
            else:
                t.state = "held"
                heapq.heappush(self._holds[s], (due, next(self._seq), t))
        self._finish_all(ready, out, now)
        return end

    def _outcome(self, task: Task, out: Any) -> None:
        if not isinstance(out, BaseException):  # the common case first
            task.output, task.ok = out, True
            if self.wrong is not None:
                task.output, task.wrong = self.wrong.corrupt(task.worker, task.output, self._rngs[task.worker])
        elif isinstance(out, Cancelled):
            task.ok, task.reason, task.error = False, "cancelled", "cancelled"
        elif isinstance(out, ConnectionError):  # the worker is lost: its message says how
            task.ok, task.reason, task.error = False, "crash", str(out)
        elif isinstance(out, InjectedFault):
            task.ok, task.reason, task.error, task.output = False, str(out), f"injected {out}", out.output
        else:  # f raised: a straggler, never a crash of the master
            task.ok, task.reason, task.error = False, "raise", describe_error(out)

    def _crashed(self, task: Task, out: list[Task]) -> bool:
        """A task's worker crashed: fail it (and, with `mark_dead`, what it held, till it is re-created);
        True when the thread ends with it (a thread serving only this worker)."""
        w = task.worker
        self._finish(task, out)
        own = self.n_threads is None
        if self.mark_dead:
            self.dead[w] = True
            self._lose_queue(w, out)
            if self.restart_s is not None:
                delay = self.restart_s
                self.post(lambda: self.call_later(delay, lambda: self._revive(w)))
            return own
        self.restarts[w] += 1
        if own:
            self._gen[self._slot[w]] += 1
            self._start_thread(self._slot[w])
        return False

