"""The collection loop: gather completions until the policy stops, sort out the stragglers, assemble.

A worker that raises, returns a non-finite or wrongly shaped output, is late, or is lost is a straggler: it
is listed with its reason and its result is never used.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from .._util.arrays import all_finite
from ..engine import Task
from ..errors import JobFailed, JobTimeout
from .executor import Batch, BlockCompletion, Executor, JobTasks
from .policy import Policy

_F64 = np.dtype(np.float64)


def collect(batch: Batch, policy: Policy, timeout: float, t_dispatch: float,
            outstanding: set[int]) -> tuple[dict[int, np.ndarray], dict[int, str], dict[int, float], float]:
    """Gather completions until the policy stops; returns (valid, stragglers, arrivals, first_result).

    Validation: errors and lost workers are stragglers at once; non-finite outputs likewise; shapes are
    judged against the most common shape among the finite results, so one worker with a wrong shape can
    never set the reference. Completions are taken one at a time, the stop rule asked after each, so "the
    first wait_for" is exact even when several arrive together; the ones already delivered are taken without
    waiting, in one go (a job whose tasks ran as one batched call gets them all at once). A block of results
    (`BlockCompletion`) is taken in its order: its leading rows at once, up to `Policy.min_valid` (the policy
    cannot stop before that), when they are finite and of the reference shape; any other row one at a time.
    """
    finite: dict[int, np.ndarray] = {}
    stragglers: dict[int, str] = {}
    arrivals: dict[int, float] = {}
    first = math.nan
    shapes: dict[tuple, int] = {}  # finite results per shape (a plain dict: Counter's Python methods cost more)
    lowest: dict[tuple, int] = {}  # per shape, the lowest worker with it (the tie-break)
    valid: dict[int, np.ndarray] = {}
    ref = None
    hedges = type(policy).extra_tasks is not Policy.extra_tasks
    timed = type(policy).wakeup is not Policy.wakeup
    min_valid = policy.min_valid  # no stop with fewer valid results while workers are outstanding
    clock, satisfied, decodable, ready = time.perf_counter, policy.satisfied, policy.decodable, batch.ready
    pending: deque = deque()  # completions taken from the batch, not yet looked at
    if not hedges and min_valid > 0:
        # the first wait, as the loop below waits; then the common batched job in one step: a block whose leading
        # `min_valid` rows are finite float64 outputs after which the policy stops (the loop takes it the same way)
        elapsed = clock() - t_dispatch
        limit = timeout - elapsed
        if timed and (wake := policy.wakeup(elapsed)) is not None:
            limit = min(limit, max(wake - elapsed, 0.0))
        got = batch.take(limit if limit > 0 else 0.0)
        if len(got) == 1 and type(c := got[0]) is BlockCompletion:
            v, ws = c.values, c.workers[:min_valid]
            if len(ws) == min_valid and type(v) is np.ndarray and v.dtype is _F64 and v.ndim \
                    and all_finite(v[:min_valid]):
                now = clock() - t_dispatch
                valid = dict(zip(ws, v, strict=False))  # the leading rows: ws is the shorter
                if len(valid) == min_valid and (outstanding.issubset(valid) or satisfied(valid, now)) \
                        and decodable(valid):
                    outstanding.difference_update(ws)
                    return valid, {}, dict.fromkeys(ws, now), now
                valid = {}
        pending.extend(got)
    while True:
        elapsed = clock() - t_dispatch
        if hedges:
            for t in policy.extra_tasks(valid, outstanding, elapsed):
                outstanding.add(t.worker)
                batch.add([t])
        if (not outstanding or satisfied(valid, elapsed)) and decodable(valid):
            break
        if not outstanding:
            raise JobFailed(_too_few(policy, valid, finite, stragglers, "every worker has answered or failed"),
                            _reasons(stragglers, finite, valid))
        if elapsed >= timeout:
            raise JobTimeout(_too_few(policy, valid, finite, stragglers, f"hard timeout of {timeout:g} s passed"),
                             _reasons(stragglers, finite, valid))
        limit = timeout - elapsed
        if timed:
            wake = policy.wakeup(elapsed)
            if wake is not None:
                limit = min(limit, max(wake - elapsed, 0.0))
        if not pending:
            pending.extend(batch.take(limit if limit > 0 else 0.0))
        while pending:
            c = pending.popleft()
            now = clock() - t_dispatch
            if first != first:  # nan: this is the first
                first = now
            if type(c) is BlockCompletion:
                taken = _take_block(c, min_valid, hedges, ref, valid)
                if not taken:  # judged row by row, as separate completions
                    pending.extendleft(reversed(c.rows()))
                    continue
                if taken < len(c.workers):  # the rest, looked at only if the policy does not stop first
                    pending.appendleft(BlockCompletion(c.workers[taken:], c.values[taken:], c.compute_time))
                # the first `taken` rows, all finite and of the reference's shape, are valid results taken
                # before the policy could stop, so it is asked once, after them
                ws = c.workers[:taken]
                rows = dict(zip(ws, c.values[:taken], strict=True))
                outstanding.difference_update(ws)
                arrivals.update(dict.fromkeys(ws, now))
                finite.update(rows)
                valid.update(rows)
                shape = c.values.shape[1:]
                shapes[shape] = shapes.get(shape, 0) + taken
                lowest[shape] = min(lowest.get(shape, ws[0]), min(ws))
                ref = shape
            else:
                w = c.worker
                outstanding.discard(w)
                arrivals[w] = now
                if c.lost:
                    stragglers[w] = f"lost: {c.error}"
                elif c.error is not None:
                    stragglers[w] = f"raised: {c.error}"
                else:
                    v, why = c.value, None
                    if not (c.finite is True and type(v) is np.ndarray and v.dtype is _F64):  # else: used as it is
                        if type(v) is not np.ndarray or v.dtype != np.float64:
                            try:
                                v = np.asarray(v, dtype=float)
                            except (TypeError, ValueError) as e:
                                why = f"wrong shape: output is not a numeric array ({e})"
                        if why is None and not (c.finite if c.finite is not None else np.isfinite(v).all()):
                            why = "non-finite output (NaN or inf)"
                    if why is not None:
                        stragglers[w] = why
                    else:
                        finite[w] = v
                        shape = v.shape
                        shapes[shape] = shapes.get(shape, 0) + 1
                        if shape == ref:  # one more for the most common shape: it stays the reference
                            if w < lowest[shape]:
                                lowest[shape] = w
                            valid[w] = v
                        else:
                            lowest[shape] = min(lowest.get(shape, w), w)
                            new = max(shapes, key=lambda s: (shapes[s], -lowest[s]))
                            if new != ref:  # the reference changed: the valid results are rebuilt
                                ref = new
                                valid = {u: x for u, x in finite.items() if x.shape == new}
            if hedges:  # the policy may add tasks after each completion (its wake-up only matters before a wait)
                break
            if (not outstanding or satisfied(valid, now)) and decodable(valid):
                return valid, _reasons(stragglers, finite, valid), arrivals, first  # the rest are past the stop
            if not pending and ready():
                pending.extend(batch.take(0.0))
    return valid, _reasons(stragglers, finite, valid), arrivals, first


def _take_block(c: BlockCompletion, min_valid: int, hedges: bool, ref: tuple | None,
                valid: dict[int, np.ndarray]) -> int:
    """How many leading rows of a block the collector takes at once: up to the valid results below which the
    policy cannot stop (`Policy.min_valid`), when they are all finite float64 outputs of the reference shape
    (or the first shape); 0 when the block is judged row by row (hedges, a non-finite row among them, another
    shape)."""
    v = c.values
    if hedges or type(v) is not np.ndarray or v.dtype != np.float64 or v.ndim < 1 \
            or (ref is not None and v.shape[1:] != ref) or (ref is None and valid):
        return 0
    taken = min(len(v), min_valid - len(valid))
    if taken <= 0 or not all_finite(v[:taken]):
        return 0
    return taken


def _reasons(stragglers: dict[int, str], finite: dict[int, np.ndarray], valid: dict[int, np.ndarray]) -> dict:
    out = dict(stragglers)
    if valid and len(valid) < len(finite):  # valid is the finite results of the reference shape
        ref = next(iter(valid.values())).shape
        for w, v in finite.items():
            if w not in valid:
                out[w] = f"wrong shape: output {v.shape}, expected {ref}"
    return out


def _too_few(policy: Policy, valid: dict, finite: dict, stragglers: dict, why: str) -> str:
    reasons = _reasons(stragglers, finite, valid)
    listed = "; ".join(f"worker {w}: {r}" for w, r in sorted(reasons.items())[:6])
    more = f" (and {len(reasons) - 6} more)" if len(reasons) > 6 else ""
    return (f"job cannot decode: {why} with {len(valid)} valid result(s) of N={policy.N}, not enough to "
            f"estimate every input. Stragglers: {listed or 'none yet'}{more}. Raise the timeout, add workers, "
            "or fix the failing workers.")


def execute(executor: Executor, f: Callable | None, tasks: Sequence[Task], policy: Policy | Callable[[], Policy],
            timeout: float, t_start: float, t_encode: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict, dict, dict]:
    """Dispatch `tasks`, collect by `policy` (or by the policy that function builds, once the tasks are out: the
    workers start meanwhile), cancel the rest, assemble.

    Returns (outputs, used workers, missing inputs, stragglers, arrivals, timings).
    """
    outstanding = set(tasks.workers) if type(tasks) is JobTasks else {t.worker for t in tasks}
    executor.prepare(f, max(outstanding, default=0) + 1)
    t0 = time.perf_counter()
    batch = executor.submit(f, tasks)
    t_dispatch = time.perf_counter() - t0
    try:
        if callable(policy):
            policy = policy()
        valid, stragglers, arrivals, first = collect(batch, policy, timeout, t0, outstanding)
        if outstanding:
            batch.cancel(sorted(outstanding))
        for w in outstanding:
            stragglers.setdefault(w, "late: no result when the job stopped")
    finally:
        batch.close()
    t1 = time.perf_counter()
    out, used, missing = policy.assemble(valid)
    t_dec = time.perf_counter() - t1
    excluded = getattr(policy, "excluded", None)
    if excluded:  # results a robust decode flagged and left out
        stragglers.update(excluded)
    if len(valid) > len(used):
        for w in valid.keys() - set(used.tolist()):
            stragglers.setdefault(w, "unused: another replica answered first")
    timings = {"encode": t_encode, "dispatch": t_dispatch, "first_result": first, "decode": t_dec,
               "total": time.perf_counter() - t_start}
    return out, used, missing, stragglers, arrivals, timings
