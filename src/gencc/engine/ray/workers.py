"""`Workers` on Ray actors without a thread per worker or actor: one thread sends each worker's next task to
its actor (`gencc.engine.ray.backend.RayBackend`; Ray is touched only in `gencc.engine.ray`) and waits with
`ray.wait` over every call out."""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from typing import Any

from ..batch import Item
from ..task import Task, describe_error
from ..workers import Workers
from .backend import Call, RayBackend

log = logging.getLogger("gencc.engine")
#: seconds the waiting thread stays in one `ray.wait` before it sends the calls queued meanwhile
WAIT_S = 0.002
#: seconds between its looks for dead actors (`RayBackend.check_actors`)
CHECK_S = 0.1


class _Kick:
    """A worker slot's wake-up, as `Workers` gives one to each slot: it tells `RayWorkers`' waiting thread to
    look at that slot (a task queued, a call abandoned, a worker re-created)."""

    __slots__ = ("inbox", "slot")

    def __init__(self, inbox: queue.SimpleQueue, slot: int):
        self.inbox, self.slot = inbox, slot

    def put(self, _: Any) -> None:
        self.inbox.put(self.slot)


class RayWorkers(Workers):
    """`Workers` on a `RayBackend` without a thread per worker: one waiting thread sends each worker's next
    task to its actor as soon as the worker is free, and waits with `ray.wait` over all the outstanding calls,
    finishing each as its answer comes (the front end, the queues, the injection and the straggler rules are
    `Workers`'s). The threads of the process do not grow with the workers or the actors.

    Every straggler rule holds: a worker's latency and faults are injected on its actor; a call whose actor died
    fails as lost (the actor is replaced, `RayBackend.replace`); with `task_timeout`, a call still out after it
    fails as hung, its worker takes its next task and the call is dropped (`ray.cancel`, and the actor told to
    stop it); with `preempt`, a cancelled task's call is dropped the same way. New calls are sent, and lost
    ones noticed, within `WAIT_S` of the waiting thread's current `ray.wait`. Should a round of the waiting
    thread fail (Ray itself, or a bug), every call out fails as lost and the next round starts afresh
    (`wait_failures` counts them). `worker_states` says where each worker's actor stands (alive, replacing,
    dead: what health reports), `restarts` counts the re-created actors (a lost task is not one)."""

    def __init__(self, n_workers: int, backend: RayBackend, *args: Any, **options: Any):
        if options.get("threads") is not None or options.get("shared"):
            raise ValueError("RayWorkers waits on every worker's calls from one thread: leave threads and shared "
                             "unset")
        self._kicks: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._closing = False
        self._calls: dict[Any, tuple[int, int, Item, Call]] = {}  # ref -> (slot, its generation, item, call)
        self._out: dict[int, Any] = {}  # slot -> the ref of its call out
        self._checked = 0.0  # when the waiting thread last looked for dead actors (time.monotonic)
        self._gone: set[int] = set()  # workers marked dead: their actor is not replaced
        self.wait_failures = 0  # rounds of the waiting thread that failed (their calls out failed as lost)
        super().__init__(n_workers, backend, *args, **options)
        self._waiter = threading.Thread(target=self._wait_loop, daemon=True, name=f"{self.name}-wait")
        self._waiter.start()

    # ----- `Workers`' thread hooks: a slot is served by the waiting thread, not a thread of its own ----------
    def _add_slot(self, wake: Any) -> None:
        super()._add_slot(_Kick(self._kicks, len(self._wake)))

    def _start_thread(self, s: int) -> None:
        self._thread[s] = None
        self._kicks.put(s)

    # ----- the waiting thread -------------------------------------------------------------------------------
    def _wait_loop(self) -> None:
        """The waiting thread. Whatever goes wrong in a round (Ray itself, or a bug here) fails every call out,
        and every task picked but not yet sent, as lost: the jobs see stragglers, never a hang."""
        self._checked = time.monotonic()
        failing = 0  # rounds in a row that failed: the next one waits longer (at most a second)
        while True:
            try:
                if self._wait_round():
                    return
                failing = 0
            except Exception as e:  # noqa: BLE001 - the thread must outlive any error: the calls out are lost
                if self._closing:
                    return
                self.wait_failures += 1
                failing += 1
                try:
                    log.error("%s: the waiting thread failed (%s): the %d calls out fail as lost; it starts "
                              "again", self.name, describe_error(e), len(self._calls), exc_info=e)
                    self._lose_all(f"the waiting thread failed: {describe_error(e)}")
                except Exception as e2:  # noqa: BLE001 - never leave the loop: the calls out are waited on again
                    log.error("%s: failing the calls out failed too (%s): they are waited on again", self.name,
                              describe_error(e2))
                time.sleep(min(1.0, WAIT_S * 2 ** min(failing, 10)))

    def _wait_round(self) -> bool:
        """One round of the waiting thread: the slots kicked looked at, the actors checked now and then, one
        `ray.wait` over the calls out and the ready ones finished. True when the workers are closing."""
        kicks, calls = self._kicks, self._calls
        slots = set()
        if not calls:
            try:
                slots.add(kicks.get(timeout=CHECK_S))
            except queue.Empty:
                pass
        try:
            while True:
                slots.add(kicks.get_nowait())
        except queue.Empty:
            pass
        if self._closing:
            return True
        for s in sorted(slots):
            if s >= 0:
                self._look(s)
        if time.monotonic() - self._checked >= CHECK_S:
            self._checked = time.monotonic()
            try:
                self.backend.check_actors()
            except Exception as e:  # noqa: BLE001 - Ray itself failed: the calls out say so below
                log.warning("%s: looking for dead actors failed: %s", self.name, describe_error(e))
            self._sync_restarts()
        if not calls:
            return False
        try:
            ready = self.backend.wait(list(calls), WAIT_S)
        except Exception as e:  # noqa: BLE001 - Ray itself failed: every call out is lost
            if self._closing:
                return True
            self.wait_failures += 1
            log.error("%s: ray.wait failed (%s): the %d calls out fail as lost", self.name,
                      describe_error(e), len(calls))
            self._lose_all(f"ray.wait failed: {describe_error(e)}")
            return False
        for ref in ready:
            s, gen, item, call = calls.pop(ref)
            if self._out.get(s) is ref:
                del self._out[s]
            try:
                item.outcome = self.backend.result(call)
            except Exception as e:  # noqa: BLE001 - sorted out by `_outcome`
                item.outcome = e
            if self._done(s, gen, item):
                self._look(s)
        return False

    def _lose_all(self, why: str) -> None:
        """Fail every call out, and every task a slot picked without a call out yet, as lost (`why`)."""
        lost = ConnectionError(why)
        pending = list(self._calls.values())
        self._calls.clear()
        out = set(self._out)
        self._out.clear()
        with self._lock:  # picked (the slot's call in progress) but never sent
            pending += [(s, self._gen[s], Item(t, 1.0, "", 0.0, 0.0), None) for s, batch in enumerate(self._batch)
                        if s not in out for t in batch]
        for s, gen, item, _ in pending:
            item.outcome = lost
            try:
                self._done(s, gen, item)
            except Exception as e:  # noqa: BLE001 - keep failing the others
                log.error("%s: failing a call as lost failed: %s", self.name, describe_error(e))

    def _sync_restarts(self) -> None:
        """Count each worker's re-created actors in `restarts` (the actor of worker w is slot w % actors), and
        mark dead the workers whose actor the backend gave up on (not replaced): they get no task (`loads` says
        inf, a task sent fails at once as lost) and what they held fails as lost, till their actor is back."""
        made, states = list(self.backend.restarts), list(self.backend.states)
        n = len(made)
        if not n:
            return
        lost: list[Task] = []
        with self._lock:
            for w in range(min(self.n_workers, len(self.restarts), len(self.dead))):
                self.restarts[w] = made[w % n]
                gone = states[w % n] == "dead"
                if gone and w not in self._gone:
                    self._gone.add(w)
                    self.dead[w] = True
                    self._lose_queue(w, lost)
                    log.warning("%s: worker %d is dead: its Ray actor is not replaced", self.name, w)
                elif w in self._gone and not gone:
                    self._gone.discard(w)
                    self.dead[w] = False
                    self._kicks.put(self._slot[w])
        self._emit(lost)

    def worker_states(self) -> list[str]:
        """Per worker, the state of the actor it runs on: "alive", "replacing" (its actor died; a fresh one is
        building its models) or "dead" (not replaced: its replacements are spent)."""
        states = list(self.backend.states)
        n = len(states)
        return [states[w % n] for w in range(self.n_workers)] if n else ["dead"] * self.n_workers

    def rebalanced(self) -> int:
        """Workers moved onto Ray nodes that joined, so far (the "spread" placement)."""
        return int(self.backend.nodes.rebalanced)

    def recreated(self) -> int:
        """Actors re-created after they died, so far (a task lost with its actor is not one)."""
        return int(sum(self.backend.restarts))

    def _crashed(self, task: Task, out: list[Task]) -> bool:
        """`Workers`' rule for a task lost with its worker, without counting it in `restarts`: on Ray a worker is
        re-created when its actor is (`RayBackend.replace`), which `restarts` counts instead."""
        w = task.worker
        before = int(self.restarts[w])
        go = super()._crashed(task, out)
        self.restarts[w] = before
        return go

    def _look(self, s: int) -> None:
        """Slot s: drop its call if it was abandoned (hung, or cancelled past the grace), then send its
        worker's next task if the worker is free."""
        ref = self._out.get(s)
        if ref is not None:
            if self._calls[ref][1] == self._gen[s]:
                return  # its call is still wanted
            del self._out[s]
            self.backend.drop(self._calls.pop(ref)[3])
        done: list[Task] = []
        with self._lock:
            if self._stopped or self._batch[s]:
                return
            now = self.now()
            self._due(s, done, now)
            tasks = self._pick(s, now)
            if tasks:
                self._batch[s], self._t_call[s], self._t_cancel[s] = tasks, now, math.inf
            gen = self._gen[s]
        self._emit(done)
        for item in self._items(tasks):  # one: a slot serves one worker; its injection drawn at its start
            t = item.task
            try:
                call = self.backend.submit(t.worker, t, item.extra, item.mult, item.fault, item.hang_s)
            except Exception as e:  # noqa: BLE001 - e.g. a function that does not pickle: the task fails
                item.outcome = e
                if self._done(s, gen, item):
                    self._kicks.put(s)
                continue
            self._calls[call.ref] = (s, gen, item, call)
            self._out[s] = call.ref

    def _done(self, s: int, gen: int, item: Item) -> bool:
        """Finish slot s's call with its outcome, as `Workers` finishes a thread's call; False when the slot
        is not to be served now (abandoned meanwhile, closed, or its worker dead till re-created)."""
        t, out, go = item.task, [], True
        with self._lock:
            if self._stopped or self._gen[s] != gen:  # abandoned meanwhile: its worker has moved on
                return False
            self._batch[s], self._t_call[s], self._t_cancel[s] = [], math.nan, math.inf
            self._outcome(t, item.outcome)
            if self.preempt and t.cancelled:  # cancelled in the call: dropped, its worker free
                t.state = "dropped"
                self._free(t.worker)
            elif t.reason == "crash":
                if self._crashed(t, out):  # dead till `_revive` restarts the slot
                    self._gen[s] += 1
                    go = False
            else:
                self._finish_all((t,), out, self.now())
        self._emit(out)
        return go

    def close(self, timeout: float = 5.0) -> None:
        """Stop the waiting thread, then the workers (see `Workers.close`; the backend is closed with them)."""
        self._closing = True
        self._kicks.put(-1)
        if self._waiter is not threading.current_thread():
            self._waiter.join(timeout)
        super().close(timeout)
