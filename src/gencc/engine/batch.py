"""One batched call of f for several workers' tasks, with each task's injection kept its own.

A worker thread that serves several workers (or one worker) takes the task at the head of each idle worker's
queue; the tasks that share a function are stacked into one call of that function, and its rows are split
back. A block task (`Task.block`) brings several inputs, stacked as rows with the others, and gets its rows'
outputs back as one block, non-finite rows included (its owner judges them). When the batched call raises (or
the inputs cannot be stacked), each task is called on its own (a block row by row), so one bad input fails only
its task (or its row). Per task, as in `gencc.faults.run_injected`: the injected busy time
(`extra_s` x `slow`, plus the compute slowed by `slow`), the fault drawn for it (raise, NaN, hang: a hang is
a failure `hang_s` later, with no call), a non-finite output being a failure; the busy time and the task's
delay are then a hold that the thread waits out for all its workers at once (see `Workers`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._util.arrays import is_torch, to_numpy
from ..faults import InjectedFault
from ..model import apply_batch, apply_one
from .task import Task


@dataclass(slots=True)
class Item:
    """A task with what was drawn for it at its start: straggler multiplier, fault, injected service time."""

    task: Task
    mult: float
    fault: str
    extra: float
    hang_s: float
    outcome: Any = None  # the float64 output, or the exception that failed the task
    rest: float = 0.0  # seconds the worker stays busy after the call (injected), before the task's delay
    finite: bool = False  # whether the output is finite (checked once for the whole batch)


def stack_inputs(xs: Sequence[Any]) -> Any:
    """Inputs of one shape as one array along a new first axis (torch stays torch): one copy."""
    if is_torch(xs[0]):
        import torch

        return torch.stack(list(xs))
    try:
        return np.array(xs)  # one copy; np.stack's checks cost more than the copy at a job's sizes
    except ValueError:  # shapes differ: np.stack says so
        return np.stack([np.asarray(x) for x in xs])


def _stack_rows(items: list[Item], xs: list[Any]) -> tuple[Any, list[int]]:
    """The items' inputs as one stack (a block brings its rows, a task one row), and where each item's rows
    end in it."""
    if len(items) == 1 and items[0].task.block:  # a job's block alone: its rows are the call's stack
        return xs[0], [len(xs[0])]
    if not any(it.task.block for it in items):
        return stack_inputs(xs), list(range(1, len(items) + 1))
    ends, n = [], 0
    for it, x in zip(items, xs, strict=True):
        n += len(x) if it.task.block else 1
        ends.append(n)
    parts = [x if it.task.block else x[None] for it, x in zip(items, xs, strict=True)]
    if is_torch(parts[0]):
        import torch

        return torch.cat(parts), ends
    return np.concatenate([np.asarray(p) for p in parts]), ends


def _call_batched(fn: Callable, items: list[Item], xs: list[Any]) -> bool:
    """One call of a batched `fn` on every item's rows: a block gets its rows back (non-finite ones are its
    owner's to judge), a task its row; False when the call raised (the caller retries item by item)."""
    try:
        stacked, ends = _stack_rows(items, xs)
        out = apply_batch(fn, stacked, True)
    except Exception:  # noqa: BLE001 - one bad input must fail only its own task (or row): retried one by one
        return False
    finite = None  # per row, scanned once when a task (not a block) needs it
    start = 0
    for it, end in zip(items, ends, strict=True):
        if it.task.block:
            it.outcome, it.finite = out[start:end], True
        else:
            if finite is None:
                finite = np.isfinite(out.reshape(len(out), -1)).all(axis=1).tolist()
            it.outcome, it.finite = out[start], finite[start]
        start = end
    return True


_F64 = np.dtype(np.float64)


def _float64(o: Any) -> np.ndarray:
    """f's output as a float64 numpy array of its own (a float64 array is copied without the conversion)."""
    return o.copy() if type(o) is np.ndarray and o.dtype is _F64 else np.array(to_numpy(o), dtype=float)


def _call_one(fn: Callable, x: Any, batched: bool | None) -> Any:
    """`fn` on one input: its output (a float64 numpy array of its own), or the exception it raised. An f that
    takes one input at a time is called on it directly (no batch of one around it)."""
    try:
        if batched is False or batched is None and not getattr(fn, "batched", False):
            return _float64(fn(x if is_torch(x) else np.asarray(x)))
        return apply_one(fn, x, batched)
    except Exception as e:  # noqa: BLE001 - f raised: that task (or row) fails
        return e


def _all_finite(o: np.ndarray) -> bool:
    """Whether every entry of an output is finite: the count of finite entries against the size (half of
    `np.isfinite(o).all()`'s cost per task, whose reduction goes through a Python wrapper)."""
    return int(np.count_nonzero(np.isfinite(o))) == o.size


def _call_group(fn: Callable, batched: bool | None, items: list[Item], cast: Any) -> float:
    """Outcomes of `fn` on the items' inputs (one call when it takes batches); returns the seconds it took."""
    xs = [it.task.x for it in items] if cast is None else [np.asarray(it.task.x, dtype=cast) for it in items]
    t0 = time.perf_counter()
    takes_batches = batched or batched is None and getattr(fn, "batched", False)
    if takes_batches and (len(items) > 1 or items[0].task.block) and _call_batched(fn, items, xs):
        return time.perf_counter() - t0
    for it, x in zip(items, xs, strict=True):
        t = time.perf_counter()
        if it.task.block:  # each row on its own: one bad row fails only its worker
            it.outcome, it.finite = [_call_one(fn, x[i], batched) for i in range(len(x))], True
        else:
            it.outcome = _call_one(fn, x, batched)
            it.finite = not isinstance(it.outcome, BaseException) and _all_finite(it.outcome)
        if len(items) == 1:
            return time.perf_counter() - t
    return time.perf_counter() - t0


def run_items(resolve: Callable[[Task], tuple[Callable, bool | None]], items: list[Item], cast: Any = None) -> None:
    """Fill each item's outcome and rest: the calls grouped by function, the injection applied per task."""
    if len(items) == 1:  # a shared thread's call: no grouping
        _run_one(resolve, items[0], cast)
        return
    groups: dict[int, tuple[Callable, bool | None, list[Item]]] = {}
    seen: dict[int, tuple[Callable, bool | None]] = {}  # id(task.fn) -> resolved (a job's tasks share one)
    last, group = None, None  # the previous item's task.fn and its group (consecutive items mostly share one)
    for it in items:
        if it.fault == "hang":
            it.outcome, it.rest = InjectedFault("hang"), it.hang_s
            continue
        tfn = it.task.fn
        if group is None or tfn is not last:
            key = id(tfn)  # the tasks hold their fn for this call, so its id stays its own
            got = seen.get(key)
            if got is None:
                try:
                    got = seen[key] = resolve(it.task)
                except Exception as e:  # noqa: BLE001 - an unknown function fails its task
                    it.outcome, group = e, None
                    continue
            fn, batched = got
            group = groups.get(id(fn))
            if group is None:
                group = groups[id(fn)] = (fn, batched, [])
            last = tfn
        group[2].append(it)
    for fn, batched, group in groups.values():
        compute = _call_group(fn, batched, group, cast)
        for it in group:
            _inject(it, compute)


def call_plain(fn: Callable, x: np.ndarray, check_finite: bool = True) -> Any:
    """`call_task`'s outcome for a per-input `fn` on one numpy input with nothing injected and no cast, without
    its layers (shared threads call this per task): f's output as a float64 array of its own, or the exception
    (f raised; with `check_finite`, a non-finite output is an `InjectedFault("nan")` holding it; without, the
    task's owner judges it, as a job's collector does once for the outputs delivered together)."""
    try:
        o = fn(x)
        o = o.copy() if type(o) is np.ndarray and o.dtype is _F64 else _float64(o)  # `_float64`, its common case first
    except Exception as e:  # noqa: BLE001 - f raised: that task fails
        return e
    if check_finite and not _all_finite(o):
        return InjectedFault("nan", o)
    return o


def call_task(resolve: Callable[[Task], tuple[Callable, bool | None]], task: Task, cast: Any = None) -> Any:
    """The outcome of one task with nothing injected, as `run_items` gives it: f's float64 output, or the
    exception (f raised, or its output is not finite: an `InjectedFault("nan")` holding it)."""
    it = Item(task, 1.0, "", 0.0, 0.0)
    _run_one(resolve, it, cast)
    return it.outcome


def _run_one(resolve: Callable[[Task], tuple[Callable, bool | None]], it: Item, cast: Any) -> None:
    """`run_items` of one item: an input taken one at a time is passed to f directly."""
    if it.fault == "hang":
        it.outcome, it.rest = InjectedFault("hang"), it.hang_s
        return
    task = it.task
    try:
        fn, batched = resolve(task)
    except Exception as e:  # noqa: BLE001 - an unknown function fails its task
        it.outcome = e
        return
    if task.block or batched or batched is None and getattr(fn, "batched", False):
        _inject(it, _call_group(fn, batched, [it], cast))
        return
    x = task.x if cast is None else np.asarray(task.x, dtype=cast)
    t0 = time.perf_counter()
    o = it.outcome = _call_one(fn, x, False)
    compute = time.perf_counter() - t0
    it.finite = not isinstance(o, BaseException) and _all_finite(o)
    _inject(it, compute)


def _inject(it: Item, compute: float) -> None:
    """The item's injected busy time (`rest`) from its call's `compute` seconds, and its fault on the outcome."""
    if it.mult != 1.0 or it.extra:
        it.rest = it.extra * it.mult + compute * (it.mult - 1)
    if it.finite and not it.fault:  # the common case: a finite output (never an exception), no fault
        return
    if isinstance(it.outcome, BaseException):
        return
    if not it.fault:
        it.outcome = InjectedFault("nan", it.outcome)  # not finite
    elif it.fault == "raise":
        it.outcome = InjectedFault("raise")
    elif it.fault == "nan":
        it.outcome = InjectedFault("nan", it.outcome * np.nan)
    elif not it.finite:
        it.outcome = InjectedFault("nan", it.outcome)
