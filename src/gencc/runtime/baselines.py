"""What engineers use today against tail latency, as schemes the runtime runs like a code.

- Uncoded(K): K workers, input k on worker k, wait for all.
- Replicated(K, N): input k on workers k, k + K, k + 2K, ...; the first replica to answer wins.
- Hedged(K, N, hedge_delay): send to K workers; after `hedge_delay` seconds re-send every unfinished input to
  the N - K spare workers (round robin); the first answer wins. An input whose tasks all failed is re-sent at
  once while spares remain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._util.validate import check_int, check_nonneg
from ..engine import Task
from .policy import Policy


class Baseline:
    """A scheme with its own stop rule (first answer per input); run() dispatches it like a code."""

    name = "baseline"
    K: int
    N: int

    def policy(self, X: object, delays: np.ndarray, hedge_default: float | None) -> tuple[Policy, list[Task]]:
        """The collection policy and the first tasks for inputs X (rows in the caller's order)."""
        raise NotImplementedError

    def _check_workers(self) -> None:
        """K and N checked and stored as ints, N >= K (for the frozen dataclasses below that have N)."""
        object.__setattr__(self, "K", check_int("K", self.K, 1))
        object.__setattr__(self, "N", check_int("N", self.N, 1))
        if self.N < self.K:
            raise ValueError(f"{self.name} needs N >= K workers, got N={self.N} < K={self.K}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.K}, N={self.N})"


class FirstAnswerPolicy(Policy):
    """Each input is done at its first valid answer; stop when every input is done. `assignment[w]` is the
    input of worker w (filled in as tasks are dispatched)."""

    def __init__(self, K: int, N: int):
        self.K, self.N = K, N
        self.assignment: dict[int, int] = {}

    def _done(self, valid: dict[int, np.ndarray]) -> set[int]:
        return {self.assignment[w] for w in valid}

    def decodable(self, valid: dict[int, np.ndarray]) -> bool:
        return len(self._done(valid)) == self.K

    def satisfied(self, valid: dict[int, np.ndarray], elapsed: float) -> bool:
        return True

    def assemble(self, valid: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        first: dict[int, int] = {}
        for w in valid:  # valid keeps arrival order
            first.setdefault(self.assignment[w], w)
        shape = next(iter(valid.values())).shape
        out = np.zeros((self.K, *shape))
        for k, w in first.items():
            out[k] = valid[w]
        missing = np.array(sorted(set(range(self.K)) - set(first)), dtype=np.int64)
        return out, np.array(sorted(first.values()), dtype=np.int64), missing


class _StaticPolicy(FirstAnswerPolicy):
    def __init__(self, K: int, N: int):
        super().__init__(K, N)
        self.assignment = {w: w % K for w in range(N)}


class _HedgePolicy(FirstAnswerPolicy):
    def __init__(self, K: int, N: int, X: object, delays: np.ndarray, hedge_delay: float):
        super().__init__(K, N)
        self.X, self.delays, self.hedge_delay = X, delays, hedge_delay
        self.assignment = {k: k for k in range(K)}
        self.next_spare = K
        self.hedged = False

    def wakeup(self, elapsed: float) -> float | None:
        return None if self.hedged or self.next_spare >= self.N else self.hedge_delay

    def extra_tasks(self, valid, outstanding, elapsed) -> list[Task]:
        spares = self.N - self.next_spare
        if spares <= 0:
            return []
        done = self._done(valid)
        if not self.hedged and elapsed >= self.hedge_delay:
            self.hedged = True  # the hedge: one spare copy of every unfinished input
            todo = [k for k in range(self.K) if k not in done]
        else:  # an input with no answer and nothing in flight (its tasks failed) is re-sent at once
            busy = {self.assignment[w] for w in outstanding}
            todo = [k for k in range(self.K) if k not in done and k not in busy]
        tasks = []
        for k in todo[:spares]:
            w = self.next_spare
            self.next_spare += 1
            self.assignment[w] = k
            tasks.append(Task(w, self.X[k], float(self.delays[w])))
        return tasks


@dataclass(frozen=True, repr=False)
class Uncoded(Baseline):
    """K workers, one input each, wait for every one of them."""

    K: int

    name = "uncoded"

    def __post_init__(self):
        object.__setattr__(self, "K", check_int("K", self.K, 1))

    @property
    def N(self) -> int:  # noqa: N802 - matches the Code interface
        return self.K

    def policy(self, X, delays, hedge_default):
        p = _StaticPolicy(self.K, self.K)
        return p, [Task(k, X[k], float(delays[k])) for k in range(self.K)]


@dataclass(frozen=True, repr=False)
class Replicated(Baseline):
    """Input k on workers k, k + K, ...; the first replica to answer wins (N >= K)."""

    K: int
    N: int

    name = "replication"

    def __post_init__(self):
        self._check_workers()

    def policy(self, X, delays, hedge_default):
        p = _StaticPolicy(self.K, self.N)
        return p, [Task(w, X[w % self.K], float(delays[w])) for w in range(self.N)]


@dataclass(frozen=True, repr=False)
class Hedged(Baseline):
    """Send to K workers; after `hedge_delay` seconds send each unfinished input to spare workers (N - K of
    them, round robin); the first answer wins. hedge_delay None: the 95th percentile of the injected latency
    model (the usual choice in practice)."""

    K: int
    N: int
    hedge_delay: float | None = None

    name = "hedged"

    def __post_init__(self):
        self._check_workers()
        object.__setattr__(self, "hedge_delay", check_nonneg("hedge_delay", self.hedge_delay, optional=True,
                                                             unit="seconds"))

    def policy(self, X, delays, hedge_default):
        delay = self.hedge_delay if self.hedge_delay is not None else hedge_default
        if delay is None:
            raise ValueError("Hedged needs hedge_delay (seconds) when no latency model is given to derive it")
        p = _HedgePolicy(self.K, self.N, X, delays, float(delay))
        return p, [Task(k, X[k], float(delays[k])) for k in range(self.K)]
