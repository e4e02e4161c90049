"""Serving with wrong-result checks: no answer leaves before its group's results were checked against each other.

Under serving's redundancy (N / K = 1.5) the robust decode of `gencc.codes.robust` cannot tell a wrong result
from an honest one (GCC, K = 8, N = 12, digits CNN: it flags an honest worker in every all-honest group), so
the serving path checks differently. A systematic code's coded result n should nearly equal the linear reading
sum_k E[n, k] f(x_k) of the systematic results it mixes; `ResultCheck` calibrates, per coded slot, how far an
honest result strays from that reading (on training inputs, like a parity model's prior) and fails a coded row
whose residual exceeds the threshold. `CheckedDispatcher` (a `CodedDispatcher`, eager) holds every answer until
its group's check:
- a member whose own result no failing row involves is answered with it (exact);
- a member a failing row involves gets a verification copy on another worker: equal results confirm it, a
  difference calls a third worker and the majority answers (no majority: 503); the outvoted worker is flagged;
- a failing row whose members all check out flags the coded worker (its result is excluded from decodes);
- a member whose own result never came is decoded from the results nobody flagged, as in `CodedDispatcher` (codes with
  coding groups: only a parity recovery, else a plain copy; `strict`: only from results a check covered, and
  where no decode is allowed two workers must agree on it).
The members decoded because their own result never came go through `code.robust_decode` with one adversary and the
`robust.Calibration` the check set on the same training groups (`ResultCheck.robust`: a stated false-alarm rate per
decode with 1 to 3 results missing at random), so a coded result that no row could check is still tested against
the others before it is used; at serving's redundancy that threshold is high (the honest leave-one-out residuals
of 10-12 results for 8 inputs are large), so it catches gross lies, not subtle ones, and a flagged result is left
out of the decode.
Every flag is counted per pool worker under the reason "inconsistent result"; a worker outvoted `quarantine`
times, in at least `quarantine_rate` of its results, is quarantined at any W: it gets no more tasks (with
W = N a group's slot then queues on a healthy worker) and results it still returns are dropped. Answers the
check could not cover (a member of no checkable row, or a decoded member) are counted in `unchecked`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...codes import Code
from ...codes import robust as robust_mod
from ...engine import Task
from ..dispatch import Env, RollingQuantile
from .coded import CodedDispatcher, _Group
from .result_check import ResultCheck
from .slots import cover_map

REASON = "inconsistent result"
MAX_VERIFY = 4  # verification copies per member at most (failed ones included)


class _CheckedGroup(_Group):
    __slots__ = ("closed", "verify", "votes", "flagged", "failing")

    def __init__(self) -> None:
        super().__init__()
        self.closed = False  # every result is in or the decode deadline passed: no more waiting for checks
        self.verify: dict[int, list[Task]] = {}  # member -> its verification tasks still running
        self.votes: dict[int, list[tuple[int, Any]]] = {}  # member under verification -> (worker, result)s
        self.flagged: set[int] = set()  # slots excluded from decoding
        self.failing: set[int] = set()  # coded rows (indices into ResultCheck.coded) whose check failed


class CheckedDispatcher(CodedDispatcher):
    """`CodedDispatcher` (eager) whose answers wait for the group's `ResultCheck` (see the module docstring).

    min_weight: a row covers member k when |W[n, k]| >= min_weight (a smaller weight hides a wrong result in
    the row's honest residual). A member no row covers, or whose covering rows could not be checked by the
    decode deadline (a straggler among them), is answered unchecked, or with `strict` verified by a copy.
    quarantine: a worker outvoted (two others agreed against it) this many times, and in at least
    `quarantine_rate` of the results it returned, gets no more tasks (a bad accelerator; a rare flip anywhere
    quarantines nobody: at 2 and a 1% fault rate, 2 honest-but-unlucky workers were quarantined in 20 s);
    rtol: results of the same input on two workers count as equal within this relative tolerance. wait_quantile:
    the group stops waiting for results at this quantile of coded-task turnaround (`CodedDispatcher` decodes at 0.75; a
    check needs whole rows: at 0.95 the share of unchecked answers fell from 0.70 to 0.56, p99 +6 ms, GCC
    K = 8, N = 12, W = 16, 50% load in the simulator)."""

    def __init__(self, env: Env, code: Code, check: ResultCheck, *, strict: bool = False, min_weight: float = 0.25,
                 quarantine: int = 5, quarantine_rate: float = 0.05, rtol: float = 1e-4, wait_quantile: float = 0.95,
                 **kw: Any):
        if kw.get("mode", "eager") != "eager" or kw.get("cover"):
            raise ValueError("checked serving runs the eager coded mode without the cover rule")
        super().__init__(env, code, **kw)
        if self.sys is None or self.exact_missing:
            raise ValueError(f"checked serving needs a systematic approximate code (GCC, BACC, SystematicGCC), "
                             f"not {code!r}")
        self.turnaround = RollingQuantile(wait_quantile, default=self.turnaround.default)
        if check.sys != self.sys:
            raise ValueError("the result check was calibrated for another code")
        if quarantine < 1:
            raise ValueError(f"quarantine must be a positive number of flags, got {quarantine}")
        self.check, self.strict, self.quarantine, self.rtol = check, bool(strict), int(quarantine), float(rtol)
        self.quarantine_rate = float(quarantine_rate)
        if code.capabilities.groups is not None:  # SystematicGCC: only parity recoveries, as CodedDispatcher
            self.cover = cover_map(code, self.sys)
        self.covers = [[c for c in range(len(check.coded)) if abs(check.W[c, k]) >= min_weight]
                       for k in range(self.K)]
        self.flags: dict[int, int] = {}  # pool worker -> results flagged inconsistent
        self.confirmed: dict[int, int] = {}  # pool worker -> results outvoted by two other workers
        self.seen: dict[int, int] = {}  # pool worker -> results delivered
        self.quarantined: set[int] = set()
        self.quarantined_at: dict[int, float] = {}  # pool worker -> when it was quarantined (env clock)
        self.quarantined_view: tuple[int, ...] = ()  # replaced whole: safe to read from another thread
        self.verifications = self.unchecked = self.failed_checks = 0
        self.robust_flags = 0  # results the calibrated robust decode of a missing member's group left out
        self.robust_need = robust_mod.min_results(code, 1) if check.robust is not None else None

    def coding_pays(self) -> bool:
        """Always: the coded results check the answers, whatever the gate does with the decodes."""
        return True

    def new_group(self) -> _CheckedGroup:
        return _CheckedGroup()

    def least_loaded(self, exclude: Any = ()) -> int:
        """Never a quarantined worker, at any W: when the group's other workers are all busy its slot queues
        on a healthy one (-1 only when no healthy worker is alive)."""
        return self._pick(exclude, hard=False)

    def _pick(self, exclude: Any, hard: bool) -> int:
        """A least-loaded healthy worker outside `exclude`; `exclude` is a preference unless `hard` (a
        verification must run elsewhere than the results it checks)."""
        if not self.quarantined:
            return super().least_loaded(exclude)
        w = super().least_loaded(set(exclude) | self.quarantined)
        return w if w >= 0 or hard else super().least_loaded(self.quarantined)

    def workers_needed(self) -> int:
        return self.N

    def reroute(self, req: Any, reason: str) -> None:
        """A member of an abandoned group: an unchecked plain copy (counted), or with `strict` a 500."""
        if self.strict:
            self.answer(req, None, status=500, error=f"internal error: {reason} (strict: no unchecked answer)")
            return
        self.unchecked += 1
        super().reroute(req, reason)

    def rescue(self, req: Any) -> bool:
        """No decode leaves unchecked at a latency target: a request the check has not answered by then gets 504."""
        return False

    def _done(self, task: Task) -> None:
        """A quarantined worker's result is dropped (a task sent before the quarantine): a failed task."""
        if task.ok and task.worker in self.quarantined:
            task.ok, task.reason, task.error = False, "quarantined", "result of a quarantined worker dropped"
        super()._done(task)

    # ----- results: recorded, answered only once a check covers them ---------------------------------
    def task_done(self, task: Task) -> None:
        if task.kind == "verify":
            self._verified(task)
            return
        if task.kind in ("retry", "copy"):
            super().task_done(task)
            return
        g: _CheckedGroup = task.owner.group if task.kind == "systematic" else task.owner
        if task.ok and not g.closed:
            self.seen[task.worker] = self.seen.get(task.worker, 0) + 1
            slot = task.owner.slot if task.kind == "systematic" else task.slot
            out = task.output
            if task.kind == "coded":
                self.turnaround.add(task.t_end - task.t_sent)
                out = self._coded_output(task)
            self._record(g, slot, out)
        self._try_decode(g)

    def _deadline(self, g: _Group) -> None:
        g.waited = True
        self._try_decode(g)

    def _try_decode(self, g: _CheckedGroup) -> None:
        if g.done or not g.formed:
            return
        timing_only = any(v is None for v in g.results.values())
        res = np.full(len(self.check.coded), np.nan) if timing_only else self.check.residuals(g.results)
        for c in np.flatnonzero(res > self.check.thresholds):
            if int(c) not in g.failing:
                g.failing.add(int(c))
                self.failed_checks += 1
        suspects = {g.source[int(k)] for c in g.failing for k in self.check.support[c]}
        if not g.closed:  # as `CodedDispatcher` decodes: every result in, or the deadline passed with enough of them
            m = len(g.members)
            real = len(g.results) - sum(1 for k in range(m, self.K) if self.sys[k] in g.results)
            g.closed = not any(t.kind in ("coded", "systematic") and not t.cancelled and math.isnan(t.t_end)
                               for t in self._group_tasks(g)) or (g.waited and real >= min(self.min_decode, m))
        for i, r in enumerate(g.members):
            own = self.sys[g.pos[i]]
            if r.status or own not in g.results or i in g.votes:
                continue
            if i in suspects:
                self._start_verify(g, i)
                continue
            rows = self.covers[g.pos[i]]
            if any(np.isfinite(res[c]) for c in rows) or timing_only:
                self.answer(r, g.results[own], degraded=False)  # a covering row checked it and passed
            elif not rows or g.closed:
                if self.strict:
                    self._start_verify(g, i)
                else:
                    self.unchecked += 1
                    self.answer(r, g.results[own], degraded=False)
        self._settle(g)

    @staticmethod
    def _worker(g: _Group, slot: int) -> int:
        """The pool worker whose result fills `slot` of a formed group (a member's or a coded slot), -1 if none;
        read from the tasks, so it follows the members when `_form` reorders them."""
        tasks = [t for t in g.tasks if t.slot == slot] + [t for r in g.members if r.slot == slot for t in r.tasks
                                                          if t.kind == "systematic"]
        return next((t.worker for t in tasks if t.ok), -1)

    def _group_tasks(self, g: _Group) -> list[Task]:
        return g.tasks + [t for r in g.members for t in r.tasks if t.kind == "systematic"]

    # ----- verification by re-execution --------------------------------------------------------------
    def _start_verify(self, g: _CheckedGroup, i: int) -> None:
        own = self.sys[g.pos[i]]
        g.votes[i] = [(self._worker(g, own), g.results[own])]
        if not self._send_verify(g, i):
            g.flagged.add(own)  # no worker free to check it: decoded without its own result

    def _send_verify(self, g: _CheckedGroup, i: int) -> bool:
        """A verification copy of member i on a worker that has not run it; False when none is free or it was
        tried MAX_VERIFY times."""
        r = g.members[i]
        if sum(t.kind == "verify" for t in r.tasks) >= MAX_VERIFY:
            return False
        tried = {w for w, _ in g.votes[i]} | {t.worker for t in r.tasks}
        w = self._pick(tried, hard=True)
        if w < 0:
            return False
        t = Task(x=r.x, fn="f", on_done=self._done, kind="verify", owner=r)
        r.tasks.append(t)
        self.send(w, t)
        self.verifications += 1
        g.verify.setdefault(i, []).append(t)
        return True

    def _verified(self, task: Task) -> None:
        r = task.owner
        g: _CheckedGroup = r.group
        i = g.members.index(r)
        g.verify[i].remove(task)
        if r.status:
            return
        votes, own = g.votes[i], self.sys[g.pos[i]]
        if task.ok:
            self.seen[task.worker] = self.seen.get(task.worker, 0) + 1
            votes.append((task.worker, task.output))
            if any(self._same(y, task.output) for _, y in votes[:-1]):  # two workers agree: the answer
                for w, y in votes:
                    if not self._same(y, task.output):
                        self._flag(w, confirmed=True)
                        if w == self._worker(g, own):
                            g.flagged.add(own)
                self.answer(r, task.output, degraded=False)
            elif len(votes) >= 3:
                g.flagged.add(own)
                self.answer(r, None, status=503, error=f"{REASON}: {len(votes)} workers disagree")
            elif not self._send_verify(g, i):
                g.flagged.add(own)
                self.answer(r, None, status=503, error=f"{REASON}: no free worker to break the tie")
        elif not self._send_verify(g, i):
            g.flagged.add(own)  # unverifiable: decoded without its own result
        self._settle(g)

    def _same(self, a: Any, b: Any) -> bool:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        return bool(np.allclose(a, b, rtol=self.rtol, atol=self.rtol * (float(np.abs(b).max()) + 1e-12)))

    def _flag(self, worker: int, confirmed: bool = False) -> None:
        """Count an inconsistent result of `worker`; quarantine it (see the class docstring; unconfirmed flags
        count only when they make up half of what it returned)."""
        if worker < 0:
            return
        self.flags[worker] = self.flags.get(worker, 0) + 1
        self.failures[REASON] = self.failures.get(REASON, 0) + 1
        if confirmed:
            self.confirmed[worker] = self.confirmed.get(worker, 0) + 1
        f, c, seen = self.flags[worker], self.confirmed.get(worker, 0), self.seen.get(worker, 0)
        if (c >= self.quarantine and c >= self.quarantine_rate * seen) or (f >= self.quarantine and 2 * f >= seen):
            if worker not in self.quarantined:
                self.quarantined_at[worker] = self.env.now()
            self.quarantined.add(worker)
            self.quarantined_view = tuple(sorted(self.quarantined))

    def _decode(self, g: _CheckedGroup, R: list[int]) -> tuple[Any, list[int]]:
        """(Yhat, the slots used) from the results R: with the check's robust calibration and enough of them, the
        robust decode, whose flagged slot is left out and counted against its worker; else the plain decode."""
        Y = np.stack([g.results[s] for s in R])
        if self.robust_need is None or len(R) < self.robust_need:
            return self.code.decode(Y, R), R
        Yhat, flagged = self.code.robust_decode(Y, R, adversaries=1, threshold=self.check.robust)
        for s in flagged.tolist():
            g.flagged.add(int(s))
            self.robust_flags += 1
            self._flag(self._worker(g, int(s)))
        return Yhat, [s for s in R if s not in set(flagged.tolist())]

    def _settle(self, g: _CheckedGroup) -> None:
        """Once closed and verified: flag failing rows whose members checked out, decode the members left."""
        if g.done or not g.closed or any(g.verify.get(i) for i in g.votes):
            return
        for c in sorted(g.failing):
            n = self.check.coded[c]
            members = {g.source[int(k)] for k in self.check.support[c]}
            if n not in g.flagged and all(self.sys[g.pos[i]] not in g.flagged for i in members):
                g.flagged.add(n)
                self._flag(self._worker(g, n))
        todo = [k for k, r in enumerate(g.members) if not r.status]
        for k in [k for k in todo if g.members[k].exact_only]:  # no decode for it: a plain copy instead
            self._copy(g, g.members[k])
        todo = [k for k in todo if not g.members[k].exact_only]
        if not todo:
            return
        pads = {self.sys[k] for k in range(len(g.members), self.K) if self.sys[g.pos[g.source[k]]] in g.flagged}
        bad = g.flagged | pads | {self.check.coded[c] for c in g.failing}
        if self.strict and not any(v is None for v in g.results.values()):  # and coded results nobody checked
            res = self.check.residuals(g.results)
            bad |= {n for c, n in enumerate(self.check.coded) if not np.isfinite(res[c])}
        R = sorted(s for s in g.results if s not in bad)
        Yhat = None
        if R and any(g.results[s] is None for s in R):
            Yhat = [None] * self.K
        elif R:
            try:
                Yhat, R = self._decode(g, R)
            except ValueError:
                Yhat = None
        self.decodes += Yhat is not None
        send = set(todo)
        if self.gate is not None and isinstance(Yhat, np.ndarray):  # the gate: send only decodes likely right
            Y = np.stack([g.results[s] for s in R])
            if self.strict:  # a held member is verified below, never answered by one plain copy
                z, _ = self.gate.scores(self.code, Yhat, Y, R, [g.pos[k] for k in todo])
                send = {k for k, zk in zip(todo, z, strict=True) if zk >= self.gate.threshold}
            else:
                send = set(self.gate.screen(self, g, todo, Yhat, Y, R))
        for k in todo:
            r = g.members[k]
            held = Yhat is not None and k not in send
            if held and not self.strict:
                continue  # its own result, or the gate's copies, answer it
            if not held and Yhat is not None and (self.cover is None or self._covered(g, k, set(R))):
                self.unchecked += 1
                r.decoded_from = R
                self.answer(r, Yhat[g.pos[k]], degraded=True)
            elif self.strict:  # two workers must agree on it
                g.votes.setdefault(k, [])
                if not self._send_verify(g, k):
                    self.answer(r, None, status=503, error="too few consistent results to decode or verify")
            else:
                fresh = not any(t.kind == "copy" for t in r.tasks)
                if not self._copy(g, r):
                    self.answer(r, None, status=503, error="too few consistent results to decode")
                elif fresh:
                    self.unchecked += 1
