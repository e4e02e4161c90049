"""Load-adaptive redundancy: a coded group spends coded tasks only where they fit.

Coding adds (N - K) / K tasks per request, and they queue in front of requests. At low load idle workers run
them at once and a straggling member is decoded; near saturation every worker already has a queue, a coded task
waits behind it (and delays the requests queued after it), and the extra work pushes the workers past capacity:
measured, eager GCC's p99.9 then fell behind hedged requests' and even uncoded serving's.

`Redundancy` watches the workers' queues at the moment a coded task would leave: a coded task of a forming group
goes only to a worker holding at most `max_queue` tasks (queued or running). So a lightly loaded service codes
every group in full, a busier one sends fewer coded tasks per group, a saturated one none, and it codes in full
again as soon as the queues drain: the rule reads the queues, not a load estimate, so it follows the load both
ways at once. With `late` a member still unanswered after the dispatcher's observed p90 of latency gets a task
anyway, whatever the queues, which is the redundancy that still pays when they are long: "coded", a coded task
(the coded hedge, `CodedDispatcher` mode "hedge"), whose decode answers the member; "copy", plain copies of the
member (hedged requests' move: the gate's copy rule, idle workers not slow on their last task first); "auto"
(default), "copy" when a gate judges the decodes and "coded" without one. Behind a gate a late coded task
mostly buys a decode the gate holds, and the held member's copies then leave a turnaround later than they
could have: in the simulator with every decode held, eager SGCC's p99 / p99.9 at 0.76 of uncoded's capacity
fell from 188 / 231 ms with late coded tasks to 136 / 164 ms with late copies (hedged requests: 130 / 500), and
at 0.95 from 231 / 333 to 157 / 211; without a gate the late coded task's decode was the faster answer
(p99.9 142 against 173 ms at 0.76). Behind a gate that holds every decode (threshold inf: no training inputs,
or a calibration still running) with late copies, a group sends no coded task at all: their one effect was the
decode deadline, at which the members still unanswered get the gate's copies, and the group keeps that deadline
without them (`CodedDispatcher.coding_pays`).

The default, `max_queue=0` (coded tasks only to idle workers) with a late task, won in the simulator against
coding in full, thresholds of one or two queued tasks (with the late task) and idle-only without the late task:
of the rules with the late task the lowest p50 at every load, and the lowest p99.9 of all near uncoded's
capacity; a threshold of one or two codes more near saturation, which costs p50 there, and without the late
task a group left uncoded has uncoded's tail (`python benchmarks/serving_sweep.py policies`,
docs/guides/serving.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._util.validate import check_int

#: what a late member gets (`Redundancy.late`): "auto" (copies behind a gate, else a coded task), a plain
#: "copy", a "coded" task, or nothing ("off")
LATE = ("auto", "copy", "coded", "off")


@dataclass(frozen=True)
class Redundancy:
    """A group's coded task goes to a worker only if that worker holds at most `max_queue` tasks (queued or
    running; 0: only idle workers); `late`: what a member unanswered after the observed p90 of latency gets
    whatever the queues, one of LATE (see the module docstring)."""

    max_queue: int = 0
    late: str = "auto"

    def __post_init__(self):
        object.__setattr__(self, "max_queue", check_int("max_queue", self.max_queue, 0))
        if self.late not in LATE:
            raise ValueError(f"unknown late task {self.late!r}; choose one of {', '.join(LATE)}")

    def late_task(self, gated: bool) -> str | None:
        """What a late member gets: "coded", "copy" or None; `gated`: whether a gate judges the decodes."""
        if self.late == "off":
            return None
        if self.late == "auto":
            return "copy" if gated else "coded"
        return self.late

    def admit(self, load: float) -> bool:
        """Whether a forming group's coded task may go to a worker holding `load` tasks."""
        return load <= self.max_queue


#: what eager coded schemes get unless told otherwise (`make_dispatcher(..., redundancy=None)`: code in full)
DEFAULT_REDUNDANCY = Redundancy()
