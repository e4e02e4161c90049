"""Load-adaptive redundancy: a coded group spends coded tasks only where they fit.

Coding adds (N - K) / K tasks per request, and they queue in front of requests. At low load idle workers run
them at once and a straggling member is decoded; near saturation every worker already has a queue, a coded task
waits behind it (and delays the requests queued after it), and the extra work pushes the workers past capacity:
measured, eager GCC's p99.9 then fell behind hedged requests' and even uncoded serving's (issue 35).

`Redundancy` watches the workers' queues at the moment a coded task would leave: a coded task of a forming group
goes only to a worker holding at most `max_queue` tasks (queued or running). So a lightly loaded service codes
every group in full, a busier one sends fewer coded tasks per group, a saturated one none, and it codes in full
again as soon as the queues drain: the rule reads the queues, not a load estimate, so it follows the load both
ways at once. With `late` a member still unanswered after the dispatcher's observed p90 of latency gets a coded
task anyway (the coded hedge, `CodedDispatcher` mode "hedge"): one late task per straggling member, which is the
redundancy that still pays when the queues are long.

The default, `max_queue=0` (coded tasks only to idle workers) with `late=True`, won in the simulator against
coding in full, thresholds of one or two queued tasks (with the late task) and idle-only without the late task:
of the rules with the late task the lowest p50 at every load, and the lowest p99.9 of all near uncoded's
capacity; a threshold of one or two codes more near saturation, which costs p50 there, and without the late
task a group left uncoded has uncoded's tail (`python benchmarks/serving_sweep.py policies`,
docs/guides/serving.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._validate import check_int


@dataclass(frozen=True)
class Redundancy:
    """A group's coded task goes to a worker only if that worker holds at most `max_queue` tasks (queued or
    running; 0: only idle workers); `late`: a member unanswered after the observed p90 of latency gets a coded
    task whatever the queues (see the module docstring)."""

    max_queue: int = 0
    late: bool = True

    def __post_init__(self):
        object.__setattr__(self, "max_queue", check_int("max_queue", self.max_queue, 0))
        if not isinstance(self.late, bool):
            raise ValueError(f"late must be True or False, got {self.late!r}")

    def admit(self, load: float) -> bool:
        """Whether a forming group's coded task may go to a worker holding `load` tasks."""
        return load <= self.max_queue


#: what eager coded schemes get unless told otherwise (`make_dispatcher(..., redundancy=None)`: code in full)
DEFAULT_REDUNDANCY = Redundancy()
