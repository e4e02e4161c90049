"""The coded dispatcher: groups of K requests, systematic dispatch, eager or hedged coded tasks, early decode.

With a systematic code (GCC or BACC with beta="chebyshev2-nested", ParM) K of the N worker slots compute the
raw inputs, so each request goes to its own (systematic) worker at once; the N - K coded tasks need the whole
group. A request is answered by its own worker or by the decode, whichever comes first (`degraded` when
decoded). Modes:
- "eager": the coded tasks leave when the group forms (K requests, or `max_wait` after its first one);
- "hedge" (a coded hedge): a coded task leaves only for a member still unanswered after the observed
  `quantile` of latency; one coded task covers whichever member is late (ParM: that member's parity group).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...codes import Code
from ...codes.ordering import order_inputs
from ...engine import Task
from ..dispatch import Dispatcher, Env, Request, RollingQuantile
from .gate import Gate
from .redundancy import Redundancy
from .slots import cover_map, systematic_slots, worker_functions

MODES = ("eager", "hedge")


class _Group:
    __slots__ = ("members", "formed", "results", "tasks", "sent", "source", "pos", "X", "done", "waited", "broken")

    def __init__(self) -> None:
        self.members: list[Request] = []
        self.formed = False
        self.results: dict[int, Any] = {}
        self.tasks: list[Task] = []
        self.sent: set[int] = set()  # coded slots sent
        self.source: list[int] = []  # position -> member index (pads repeat a member); set by `_place`
        self.pos: list[int] = []  # member index -> position (its alpha point)
        self.X: Any = None
        self.done = False
        self.waited = False  # the decode deadline passed: decode with what has returned
        self.broken = False  # abandoned after an exception (`Dispatcher.fail`): its members are served alone


class CodedDispatcher(Dispatcher):
    """Serve with `code` on groups of K requests (see the module docstring); needs N <= workers.

    min_decode: results needed before a decode (default K; codes that report `missing` inputs, like ParM,
    decode each input as soon as it can be recovered). decode_wait: GCC / BACC / SGCC estimate a missing
    member far better from all of the group's results than from the first K (on the digits CNN, K = 8, N = 12:
    top-1 agreement 0.77 with 11 results, 0.41 with 8), so a decode waits until every coded task sent has
    returned (or failed), or `decode_wait` seconds after they were sent (default: the observed p75 of coded
    task turnaround, `initial_delay` until measured), whichever comes first. spare: coded hedge, coded tasks
    sent beyond one per late member (a coded task can land on a slow worker too). order: GCC / BACC / SGCC
    place the members of a group at alphas by `gencc.order_inputs` when the group forms (similar inputs side by
    side decode better). cover (codes with coding groups: `SystematicGCC`): a decode answers a member only when
    its group's coded result has returned and the group's other members are known (ParM's recovery, which a
    trained parity model makes accurate); a member the code cannot recover by the decode deadline (its coded
    result late or failed, or its group lost another member) gets a plain copy instead of a guess.
    """

    def __init__(self, env: Env, code: Code, *, mode: str = "eager", max_wait: float = 0.02,
                 min_decode: int | None = None, quantile: float = 0.9, initial_delay: float = 0.05, spare: int = 1,
                 order: bool = True, decode_wait: float | None = None, cover: bool = False,
                 gate: Gate | None = None, name: str | None = None, redundancy: Redundancy | None = None, **kw):
        super().__init__(env, **kw)
        if mode not in MODES:
            raise ValueError(f"unknown coded mode {mode!r}; choose one of {', '.join(MODES)}")
        if code.N > env.n_workers:
            raise ValueError(f"{code!r} needs N={code.N} distinct workers per group, only {env.n_workers} exist")
        if not max_wait > 0:
            raise ValueError(f"max_wait must be positive, got {max_wait}")
        self.code, self.mode, self.max_wait = code, mode, float(max_wait)
        self.name = name or code.name
        self.K, self.N = code.K, code.N
        self.sys = systematic_slots(code)
        sys_set = set(self.sys or ())
        self.coded_slots = [n for n in range(self.N) if n not in sys_set]
        caps = code.capabilities  # parity_slot: input -> its group's coded slot, for partial codes with groups (ParM)
        self.exact_missing, self.parity_slot = caps.partial, caps.group_slot() if caps.partial else {}
        self.min_decode = int(min_decode) if min_decode is not None else (1 if self.exact_missing else self.K)
        self.fn_of, self.in_scale, self.out_scale = worker_functions(code)
        self.latency = RollingQuantile(quantile, default=initial_delay)
        if decode_wait is not None and not decode_wait >= 0:
            raise ValueError(f"decode_wait must be a non-negative number of seconds, got {decode_wait}")
        self.decode_wait = decode_wait
        self.turnaround = RollingQuantile(0.75, default=initial_delay)  # coded task: sent -> result
        self.spare, self.order = int(spare), bool(order)
        self.open: _Group | None = None
        self.decodes = 0
        self.copies = 0
        self.cover = cover_map(code, self.sys) if cover else None
        # gencc.serving._policy.gate: holds back decodes unlikely to be right; .redundancy: load-adaptive coded tasks
        self.gate, self.redundancy = gate, (redundancy if mode == "eager" else None)

    def workers_needed(self) -> int:
        return self.N

    def coding_pays(self) -> bool:
        """Whether a forming group's eager coded tasks can buy anything. Not while the gate holds every decode (a
        gate at threshold inf: no training inputs to calibrate on, or its calibration still running) and late
        members get plain copies (`Redundancy` late "copy"): the coded results then only feed decodes that are
        held, and their one effect is the decode deadline, at which the members still unanswered are held and
        get the gate's copies. A systematic group then forms without coded tasks and keeps that deadline (the
        observed p75 of a task's run time after it forms, `decode_wait` if given): the same copies at the same
        time, without a replica's time spent per coded task. A gate that records its decodes (a
        calibration's) gets them."""
        gate, fit = self.gate, self.redundancy
        return not (gate is not None and math.isinf(gate.threshold) and not gate.record and fit is not None
                    and fit.late_task(True) == "copy")

    def send_copy(self, req: Request, kind: str, exclude: Any = ()) -> Task | None:
        """A plain copy of `req`, except under a private code (`capabilities.colluders`): it never hands a worker
        an input raw, so a member no decode answers gets the dispatcher's error instead of a copy."""
        if self.code.capabilities.colluders:
            return None
        return super().send_copy(req, kind, exclude)

    def _covered(self, g: _Group, i: int, R: set[int]) -> bool:
        """Member i's estimate is a parity recovery: its group's coded result is in, and each other position of
        the group is known or a pad repeating member i."""
        slot, others = self.cover[g.pos[i]]
        return slot in R and all(self.sys[j] in R or g.source[j] == i for j in others)

    def _due(self, g: _Group) -> set[int]:
        """CodedDispatcher slots of the group with a task still running and no result yet."""
        return {t.slot for t in g.tasks if t.kind == "coded" and not t.cancelled and math.isnan(t.t_end)
                and t.slot not in g.results}

    def _cover_todo(self, g: _Group, todo: list[int], R: set[int]) -> list[int]:
        """The members a decode may answer under `cover`: parity recoveries. A member whose covering coded
        result is still due waits for it (until the decode deadline); one the code cannot recover (its coded
        task failed, or its group lost another member) gets a plain copy, answered exactly (the estimate only
        when no worker is free)."""
        due, ready = self._due(g), []
        for i in todo:
            if self._covered(g, i, R):
                ready.append(i)
            elif self.cover[g.pos[i]][0] not in due and not self._copy(g, g.members[i]):
                ready.append(i)
        return ready

    # ----- arrival and group formation ----------------------------------------------------------------
    def new_group(self) -> _Group:
        return _Group()

    def dispatch(self, req: Request) -> None:
        g = self.open
        if g is None:
            g = self.open = self.new_group()
            self.later(self.max_wait, lambda: self._form(g), g)
        k = len(g.members)
        g.members.append(req)
        g.pos.append(k)
        req.group = g
        if self.sys is not None:
            req.slot = self.sys[k]
            w = self.least_loaded(self.busy_workers(g))
            if w < 0:
                self.answer(req, None, status=503, error="no live worker")
            else:
                t = Task(x=req.x, fn="f", on_done=self._done, kind="systematic", slot=req.slot, owner=req)
                req.tasks.append(t)
                self.send(w, t)
        if self.mode == "hedge" or (self.redundancy is not None and self.redundancy.late != "off"):
            delay = self.latency.value
            early = self.by_deadline(req, delay)
            if early < delay:  # its target comes first: a late task then, if a worker is idle
                self.later(early, lambda: self._late(g, req) if self.idle() else None, g)
            self.later(delay, lambda: self._late(g, req), g)
        if len(g.members) == self.K:
            self._form(g)
        elif math.isfinite(req.deadline) and self.mode == "eager":  # coded tasks in time for its target
            wait = self.by_deadline(req, self.max_wait)
            if wait < self.max_wait:
                self.later(wait, lambda: self._form(g), g)

    def _form(self, g: _Group, trigger: Request | None = None) -> None:
        if g.formed:
            return
        g.formed = True
        if self.open is g:
            self.open = None
        if all(r.status for r in g.members):
            g.done = True
        elif self.sys is None or (self.mode == "eager" and self.coding_pays()):
            self._place(g)
            self._send_coded(g, self._eager_slots(len(g.members)), eager=True)
        elif self.mode == "eager" and self._would_code(g):  # coded tasks would only time the decode deadline:
            self.later(self.turnaround.value if self.decode_wait is None else self.decode_wait,  # its timer alone
                       lambda: self._deadline(g), g)
        if not g.done and self.sys is not None and (self.mode == "hedge" or trigger is not None):
            self._late(g, trigger)  # the hedge (or a late member under load-adaptive redundancy) places the group
        self._try_decode(g)

    def _would_code(self, g: _Group) -> bool:
        """Whether a worker the group does not occupy could take one of its eager coded tasks now (`Redundancy`)."""
        busy, fit = self.busy_workers(g), self.redundancy
        return fit is None or any(fit.admit(v) for w, v in enumerate(self.env.loads().tolist()) if w not in busy)

    def _place(self, g: _Group) -> None:
        """Order the members at alphas, set the pads, encode (once, before the group's first coded task)."""
        if g.source:
            return
        m = len(g.members)
        parm = bool(self.parity_slot)
        perm = list(range(m))
        if self.order and not parm and self.sys is not None and m > 2 and g.members[0].x is not None:
            # place similar inputs at neighbouring alphas (the systematic tasks compute f(x) whatever the slot,
            # so positions can still be chosen now); results so far move with their members
            perm = [int(i) for i in order_inputs(np.stack([np.asarray(r.x) for r in g.members]))]
            old = {i: g.results.pop(self.sys[i]) for i in range(m) if self.sys[i] in g.results}
            for j, i in enumerate(perm):
                g.pos[i] = j
                g.members[i].slot = self.sys[j]
            for i, out in old.items():
                g.results[self.sys[g.pos[i]]] = out
        # pads repeat the last member (a smooth curve for GCC / BACC); ParM cycles through the members, so a
        # pad never sits in the parity group of the member it repeats
        g.source = [perm[k] if k < m else (perm[k % m] if parm else perm[m - 1]) for k in range(self.K)]
        if g.members[0].x is not None:
            X = np.stack([np.asarray(g.members[i].x, dtype=np.float32) for i in g.source])
            g.X = self.code.encode(X)
        if self.sys is not None:  # pads take the results of the members they repeat
            for k in range(m, self.K):
                src = self.sys[g.pos[g.source[k]]]
                if src in g.results:
                    g.results[self.sys[k]] = g.results[src]

    def _eager_slots(self, m: int) -> list[int]:
        """CodedDispatcher slots for a group of m members: ParM (and codes under `cover`) the coded slot of each coding
        group holding a member; other codes the ceil((N - K) m / K) (at least `min_results`) coded slots
        nearest the members' points (so partial groups cost no more per request than full ones)."""
        if self.sys is None or m == self.K:
            return list(self.coded_slots)
        if self.parity_slot:
            return sorted({self.parity_slot[k] for k in range(m)})
        if self.cover is not None:  # the coded slot of each coding group holding a member
            return sorted({self.cover[k][0] for k in range(m)})
        # at least the code's minimum number of results, so a lone member whose own worker straggles can still
        # be decoded (GCC needs 2: with one coded task it waited for its slow worker)
        r = min(max(math.ceil(len(self.coded_slots) * m / self.K), self.code.min_results), len(self.coded_slots))
        lo, hi = self.code.alpha[0], self.code.alpha[m - 1]
        dist = [max(lo - self.code.beta[n], self.code.beta[n] - hi, 0.0) for n in self.coded_slots]
        order = np.argsort(dist, kind="stable")[:r]
        return [self.coded_slots[i] for i in order]

    # ----- coded tasks --------------------------------------------------------------------------------
    def busy_workers(self, g: _Group | None) -> set[int]:
        """Workers holding an unfinished task of this group: a new task of the group goes elsewhere (a worker
        that already returned its result is free again, so with W = N coded tasks need not land on the
        workers the systematic tasks avoided, i.e. the slow ones)."""
        if g is None:
            return set()
        busy = {t.worker for r in g.members for t in r.tasks if not t.cancelled and math.isnan(t.t_end)}
        busy.update(t.worker for t in g.tasks if not t.cancelled and math.isnan(t.t_end))
        return busy

    def _send_coded(self, g: _Group, slots: list[int], eager: bool = False) -> None:
        n_tasks = len(g.tasks)
        self._send_coded_tasks(g, slots, self.redundancy if eager else None)
        if len(g.tasks) > n_tasks and not self.exact_missing:
            wait = self.turnaround.value if self.decode_wait is None else self.decode_wait
            self.later(wait, lambda: self._deadline(g), g)

    def _deadline(self, g: _Group) -> None:
        g.waited = True
        if self.cover is not None and not g.done:  # a member still not recoverable gets a plain copy
            for i in [i for i, r in enumerate(g.members) if not r.status and not self._covered(g, i, set(g.results))]:
                self._copy(g, g.members[i])
        self._try_decode(g)
        if self.gate is not None and not g.done:  # a member the deadline left undecoded is held too
            self.gate.hold_rest(self, g)

    def _copy(self, g: _Group, r: Request) -> bool:
        """A plain copy of member r (once) on a worker the group does not occupy; False when none is free. With
        a gate, its copies (`Gate.copy`: on idle workers not slow on their last task): a member the cover rule
        copies is held."""
        if any(t.kind == "copy" for t in r.tasks):
            return True
        if self.gate is not None:
            self.gate.hold(self, r, self.busy_workers(g))
            sent = sum(t.kind == "copy" for t in r.tasks)
            self.copies += sent
            return sent > 0
        if self.send_copy(r, "copy", exclude=self.busy_workers(g)) is None:
            return False
        self.copies += 1
        return True

    def _send_coded_tasks(self, g: _Group, slots: list[int], fit: Redundancy | None = None) -> None:
        if len(g.members) == 1 and self.exact_missing and slots and not g.sent:
            # ParM cannot recover a lone member (its pads repeat it): a plain copy does the parity's job
            g.sent.update(slots)
            t = self.send_copy(g.members[0], "copy", exclude=self.busy_workers(g))
            if t is not None:
                g.tasks.append(t)
            return
        for n in slots:
            if n in g.sent or g.done:
                continue
            w = self.least_loaded(self.busy_workers(g))
            if w < 0 or (fit is not None and not fit.admit(self.env.loads()[w])):
                return
            g.sent.add(n)
            x = None if g.X is None else g.X[n]
            if x is not None and self.in_scale[n] != 1:
                x = x * self.in_scale[n]
            t = Task(x=x, fn=self.fn_of[n], on_done=self._done, kind="coded", slot=n, owner=g)
            g.tasks.append(t)
            self.send(w, t)

    def _late(self, g: _Group, trigger: Request | None = None) -> None:
        """CodedDispatcher hedge: cover every member still unanswered after the threshold with a coded task (`trigger`,
        the member whose timer fired, counts as late even if the threshold moved since)."""
        if g.done:
            return
        now, thr = self.env.now(), self.latency.value
        late = [k for k, r in enumerate(g.members) if not r.status and (r is trigger or now - r.t_arrival >= thr)
                and self.can_make(r)]  # not spent on a member whose target is already lost
        if not late:
            return
        if not g.formed:
            self._form(g, trigger)
            return
        if self.redundancy is not None and self.redundancy.late_task(self.gate is not None) == "copy":
            for k in late:
                self._late_copy(g, g.members[k])
            return
        self._place(g)
        failed = sum(1 for t in g.tasks if t.reason)
        want: list[int] = []
        if self.parity_slot:
            want = [self.parity_slot[g.pos[k]] for k in late]
        elif self.cover is not None:  # the late members' own coding groups (only they can recover them)
            want = [self.cover[g.pos[k]][0] for k in late]
        else:
            free = [n for n in self.coded_slots if n not in g.sent]
            need = len(late) + self.spare + failed - len(g.sent)
            for k in late + late[-1:] * self.spare:
                if need <= 0 or not free:
                    break
                a = self.code.alpha[g.pos[k]]
                n = min(free, key=lambda s: abs(self.code.beta[s] - a))
                free.remove(n)
                want.append(n)
                need -= 1
        self._send_coded(g, want)

    def _late_copy(self, g: _Group, r: Request) -> None:
        """Plain copies of late member r (`Redundancy` late "copy"): the gate's copy rule when there is a gate
        (without holding r: a decode of its group may still answer it), else `_copy`'s one copy."""
        if r.status:
            return
        if self.gate is None:
            self._copy(g, r)
            return
        have = sum(t.kind == "copy" for t in r.tasks)
        self.gate.copy(self, r, self.busy_workers(g))
        self.copies += sum(t.kind == "copy" for t in r.tasks) - have

    # ----- results -----------------------------------------------------------------------------------
    def task_done(self, task: Task) -> None:
        if self.gate is not None:
            self.gate.observe(task)
        if task.kind in ("retry", "copy"):
            super().task_done(task)
            return
        if task.kind == "systematic":
            req: Request = task.owner
            g: _Group = req.group
            if task.ok and g.formed and not g.source and self.mode == "eager" and not self.coding_pays():
                # formed without coded tasks: a task's run time stands in for a coded task's turnaround (on an
                # idle worker), the decode deadline's wait
                self.turnaround.add(task.t_end - task.t_start)
            if task.ok:
                self._record(g, req.slot, task.output)
                self.answer(req, task.output, degraded=False)
                self._try_decode(g)
            else:
                self._try_decode(g)
                self.maybe_retry(req)
                if self.mode == "hedge" and g.formed:
                    self._late(g)
            return
        g = task.owner
        if task.ok:
            self.turnaround.add(task.t_end - task.t_sent)
            self._record(g, task.slot, self._coded_output(task))
            self._try_decode(g)
        else:
            self._try_decode(g)  # one result fewer to wait for
            if self.mode == "hedge":
                self._late(g)

    def _coded_output(self, task: Task) -> Any:
        """A coded task's result on the scale of its encoding row (its slot's output scale undone)."""
        scale = self.out_scale[task.slot]
        return task.output if task.output is None or scale == 1 else np.asarray(task.output) / scale

    def _record(self, g: _Group, slot: int, output: Any) -> None:
        g.results[slot] = output
        if g.source and self.sys is not None:
            m = len(g.members)
            for k in range(m, self.K):
                if slot == self.sys[g.pos[g.source[k]]]:
                    g.results[self.sys[k]] = output

    def _try_decode(self, g: _Group) -> None:
        if g.done or not g.source:  # not placed: no coded task was sent, nothing to decode from
            return
        m = len(g.members)
        pads = 0 if self.sys is None else sum(1 for k in range(m, self.K) if self.sys[k] in g.results)
        real = len(g.results) - pads
        if real < min(self.min_decode, m):
            return
        if not (self.exact_missing or g.waited) and any(
                t.kind == "coded" and not t.cancelled and math.isnan(t.t_end) for t in g.tasks):
            return  # a coded result is still due: wait for it (see decode_wait)
        todo = [k for k, r in enumerate(g.members) if not r.status]
        for k in [k for k in todo if g.members[k].exact_only]:  # no decode for it: a plain copy instead
            self._copy(g, g.members[k])
        todo = [k for k in todo if not g.members[k].exact_only]
        if not todo:
            return
        R = sorted(g.results)
        if self.cover is not None:
            todo = self._cover_todo(g, todo, set(R))
            if not todo:
                return
        if self.exact_missing:
            miss = set(self.code.missing(R).tolist())
            todo = [k for k in todo if g.pos[k] not in miss]
            if not todo:
                return
        vals = [g.results[s] for s in R]
        Yhat = None
        if all(v is not None for v in vals):
            try:
                Yhat = self.code.decode(np.stack(vals), R)
            except ValueError:
                return
        self.decodes += 1
        if self.gate is not None and Yhat is not None:  # the gate: send only decodes likely right
            todo = self.gate.screen(self, g, todo, Yhat, np.stack(vals), R)
        for k in todo:
            g.members[k].decoded_from = R
            self.answer(g.members[k], None if Yhat is None else Yhat[g.pos[k]], degraded=True)

    def rescue(self, req: Request) -> bool:
        """At `req`'s latency target with no answer yet: decode it from the group's results that have arrived
        (without waiting for the coded results still due), if the code can (enough results; a partial code: it
        is recoverable; the cover rule: a parity recovery) and the gate, if any, trusts the decode; then it is
        answered `degraded`, with the decode's uncertainty. False (a 504) otherwise."""
        g: _Group | None = req.group
        if g is None or g.broken or g.done or not g.source or self.sys is None:
            return False
        i = g.members.index(req)
        R = sorted(g.results)
        if self.cover is not None and not self._covered(g, i, set(R)):
            return False
        if self.exact_missing:
            if not R or g.pos[i] in set(self.code.missing(R).tolist()):
                return False
        elif len(R) < self.code.min_results:
            return False
        vals = [g.results[s] for s in R]
        if any(v is None for v in vals):  # timing only: no values to decode or judge
            req.decoded_from = R
            return self.answer(req, None, degraded=True)
        Y = np.stack(vals)
        try:
            Yhat = self.code.decode(Y, R)
        except ValueError:
            return False
        self.decodes += 1
        if self.gate is not None:
            if not self.gate.screen(self, g, [i], Yhat, Y, R, copies=False):
                return False
        else:
            from .gate import uncertainty

            sd = uncertainty(self.code, Y, R)
            if sd is not None:
                req.uncertainty = float(sd[g.pos[i]])
        req.decoded_from = R
        return self.answer(req, Yhat[g.pos[i]], degraded=True)

    def answered(self, req: Request) -> None:
        g: _Group | None = req.group
        if g is None or g.done or not g.formed:
            return
        if all(r.status for r in g.members):
            g.done = True
            for t in g.tasks:
                t.cancel()
