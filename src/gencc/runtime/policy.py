"""Collection policies: when a job stops, and how the valid results become outputs."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..codes.base import Code
from ..engine import Task


class Policy(ABC):
    """Decides when a job stops and assembles the outputs from the valid results."""

    N: int
    #: the job never stops with fewer valid results while a worker is still outstanding, so a collector may take
    #: up to that many results that arrived together at once and ask the policy once, after them
    min_valid: int = 0

    @abstractmethod
    def decodable(self, valid: dict[int, np.ndarray]) -> bool: ...

    @abstractmethod
    def satisfied(self, valid: dict[int, np.ndarray], elapsed: float) -> bool:
        """True when the stop rule is met (the caller also requires decodable)."""

    def wakeup(self, elapsed: float) -> float | None:
        """Seconds from dispatch at which the policy wants to be asked again (deadline, hedge)."""
        return None

    def extra_tasks(self, valid: dict[int, np.ndarray], outstanding: set[int], elapsed: float) -> list[Task]:
        """Tasks to add now (hedging); the default adds none."""
        return []

    @abstractmethod
    def assemble(self, valid: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(outputs in the code's input order, used workers sorted, missing inputs)."""


class CodedPolicy(Policy):
    """Stop at the first `wait_for` valid results, at `deadline` seconds, or both (whichever first), never
    before the code can decode (every input estimated); with neither, wait for every worker."""

    def __init__(self, code: Code, wait_for: int | None, deadline: float | None):
        self.code, self.N, self.wait_for, self.deadline = code, code.N, wait_for, deadline
        # a code that declares Code's rule (enough distinct workers, every input estimated) is asked by count; one
        # that keeps only its count (partial: which inputs have a copy back) by count, then `missing`
        caps = code.capabilities
        self._partial = caps.partial
        self._least = code.min_results if caps.count_rule else None
        self._count = self._least if not caps.partial else None
        if type(self).satisfied is CodedPolicy.satisfied and type(self).decodable is CodedPolicy.decodable:
            # satisfied needs wait_for results (with neither rule: never, so every worker must answer first);
            # a deadline may be met at any count; decodable needs at least the code's fewest results
            waits = 0 if deadline is not None else wait_for if wait_for is not None else self.N
            self.min_valid = max(waits, code.min_results)

    def decodable(self, valid: dict[int, np.ndarray]) -> bool:
        if self._count is not None:  # valid's keys are distinct workers
            return len(valid) >= self._count
        if self._least is not None:  # with every worker back, every input has its estimate
            n = len(valid)
            return n >= self._least and (n == self.N or self.code.missing(list(valid)).size == 0)
        r = sorted(valid)
        return self.code.can_decode(r) and self.code.missing(r).size == 0

    def satisfied(self, valid: dict[int, np.ndarray], elapsed: float) -> bool:
        if self.wait_for is None and self.deadline is None:
            return False
        if self.wait_for is not None and len(valid) >= self.wait_for:
            return True
        return self.deadline is not None and elapsed >= self.deadline

    def wakeup(self, elapsed: float) -> float | None:
        return self.deadline if self.deadline is not None and elapsed < self.deadline else None

    def assemble(self, valid: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ws = sorted(valid)
        r = np.array(ws, dtype=np.int64)
        Y = np.array(list(map(valid.__getitem__, ws)), dtype=float)  # one copy (np.stack costs three times as much)
        missing = np.zeros(0, dtype=np.int64) if len(ws) == self.N or not self._partial \
            else np.asarray(self.code.missing(r), dtype=np.int64)  # only a partial code leaves inputs without one
        return np.asarray(self.code.decode(Y, r)), r, missing
