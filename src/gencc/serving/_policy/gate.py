"""The gate: a decoded (degraded) answer leaves only when the decoder's own uncertainty says it is likely right.

At the moment a coded group decodes a member whose own worker has not answered, the gate scores the estimate:
z = (top-1 margin of the decoded output) / (estimated standard deviation of its error), the estimate being

- the code's own, `code.decode_uncertainty(Y, returned)`: the kriging posterior variance of `SystematicGCC`
  (with or without a parity model) and the GP reading of GCC's RKHS fit, each times the signal variance that
  the returned results themselves estimate (REML);
- for other codes (BACC) the jackknife spread of the decodes that leave one returned result out;
- none (ParM's exact recovery): z is the raw margin.

z >= threshold: the decode is sent (`degraded`, `gate` "passed"). Otherwise it is held (`gate` "held"): the
request waits for its own result, or for plain copies sent at that moment to idle workers not slow on their last
task (none idle: as soon as one frees), or for a later decode of its group (more results) that passes. The
threshold is chosen per model by `calibrate_gate`: the dispatcher itself in virtual time, fed *training* inputs,
records every decode it would send with its score, and the smallest threshold whose sent decodes agree with f on
top-1 at the target rate is kept (an upper confidence bound over bootstrap resamples), never below the score at
which the decoder's own error estimate makes the top-1 likely right (`gencc.serving._policy.gate_threshold`;
`GateCalibration.frontier` holds the whole agreement / share-sent curve).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...engine import Task, VirtualWorkers
from ...errors import CalibrationStopped
from ...model import apply_batch
from ..dispatch import Env, Request, RollingQuantile
from .gate_threshold import DEFAULT_TARGET, GateCalibration, choose_threshold, score_floor
from .sim import simulate_load

log = logging.getLogger(__name__)

#: independent simulated runs a calibration pools (different arrivals and slow periods): with 3 (about 450
#: degraded requests) the threshold of digits-cnn's sgcc moved from 1.6 to 2.4 across three seeds, with 6 from
#: 1.5 to 1.9 (8: 1.7 to 1.9; gate_seeds.md), but a fourth seed
#: (benchmarks/investigations/gate.py --real --seed 3) gave 3.4
CALIBRATION_RUNS = 6
RUN_IDS = 10**9  # request ids of run i are offset by i * RUN_IDS when pooled
#: a worker whose last task took more than this times the median task is avoided for held requests' copies
SLOW_RATIO = 2.5
#: reference conditions the calibration simulates when the service has no injected service time of its own:
#: (service ms, slow fraction, slow factor, load as a fraction of uncoded capacity)
REFERENCE = (40.0, 0.1, 10.0, 0.3)
#: training inputs a service's calibration cycles through (its requests)
CALIBRATION_INPUTS = 2000


def margins(Yhat: np.ndarray) -> np.ndarray:
    """Per row: top-1 minus top-2 of the flattened output (|y| for one-coordinate outputs)."""
    Z = np.asarray(Yhat, dtype=float).reshape(len(Yhat), -1)
    if Z.shape[1] < 2:
        return np.abs(Z[:, 0])
    top = np.partition(Z, Z.shape[1] - 2, axis=1)[:, -2:]
    return top[:, 1] - top[:, 0]


def jackknife_std(code: Any, Y: np.ndarray, returned: Sequence[int]) -> np.ndarray | None:
    """Per input, the jackknife standard deviation (per output coordinate) of the decode over leaving one returned
    result out; None when fewer than two such decodes exist."""
    R = list(returned)
    outs = []
    for i in range(len(R)):
        keep = [j for j in range(len(R)) if j != i]
        if len(keep) < code.min_results:
            continue
        try:
            outs.append(np.asarray(code.decode(Y[keep], [R[j] for j in keep]), dtype=float).reshape(code.K, -1))
        except ValueError:
            continue
    if len(outs) < 2:
        return None
    A = np.stack(outs)
    n = len(outs)
    return np.sqrt((n - 1) / n * ((A - A.mean(axis=0)) ** 2).sum(axis=0).mean(axis=1))


def uncertainty(code: Any, Y: np.ndarray, returned: Sequence[int]) -> np.ndarray | None:
    """Per input, the estimated error standard deviation of `code.decode(Y, returned)` (module docstring), or None
    when the code offers no estimate."""
    caps = code.capabilities
    if caps.uncertainty:
        try:
            return np.asarray(code.decode_uncertainty(Y, returned), dtype=float)
        except (ValueError, np.linalg.LinAlgError):
            return None
    if caps.partial:  # an exact recovery (ParM, replication): no spread to measure
        return None
    return jackknife_std(code, Y, returned)


@dataclass
class Gate:
    """The gate's policy (module docstring). threshold: the least score z a decode needs to be sent (0 sends
    every decode; inf holds every one); record: keep (request id, score, decoded top-1) of every decode judged,
    for calibration; copies: plain copies a held request gets."""

    threshold: float = 0.0
    record: bool = False
    copies: int = 2
    calibration: Any = field(default=None, repr=False)  # the GateCalibration that chose the threshold, if any
    records: list[tuple[int, float, int]] = field(default_factory=list, repr=False)

    def __post_init__(self):
        t = float(self.threshold)
        if math.isnan(t) or t < 0:
            raise ValueError(f"gate threshold must be a non-negative number (inf holds every decode), got {t}")
        self.threshold = t
        if isinstance(self.copies, bool) or not isinstance(self.copies, int) or self.copies < 1:
            raise ValueError(f"gate copies must be a positive integer, got {self.copies!r}")
        self.ready = threading.Event()  # set once the threshold is final (calibrated, or given)
        self.stopped = threading.Event()  # set to abandon a calibration still running
        self._last: dict[int, float] = {}  # worker -> duration of its last finished task
        self._median = RollingQuantile(0.5, default=math.inf, min_count=20)
        self.held = self.passed = 0
        self.estimated = False  # whether a decode judged came with an error estimate (its score a z-score)
        self._wanting: dict[Request, Any] = {}  # held request -> its dispatcher, while short of its copies
        self._refill_due = False

    def scores(self, code: Any, Yhat: np.ndarray, Y: np.ndarray, returned: Sequence[int],
               positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(z, estimated error sd) of the decoded outputs at `positions` (sd nan: no estimate, z the margin)."""
        pos = list(positions)
        marg = margins(np.asarray(Yhat)[pos])
        sd = uncertainty(code, Y, returned)
        if sd is None:
            return marg, np.full(len(pos), math.nan)
        self.estimated = True
        s = sd[pos]
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(s > 0, marg / np.where(s > 0, s, 1.0), math.inf)
        return z, s

    def screen(self, disp: Any, g: Any, todo: list[int], Yhat: np.ndarray, Y: np.ndarray,
               returned: Sequence[int], copies: bool = True) -> list[int]:
        """The members of group g (indices in `todo`) whose decode may be sent now; each held one gets its plain
        copies (`copy`) on fast workers the group does not occupy (`copies` False: only marked held, at its
        deadline)."""
        z, sd = self.scores(disp.code, Yhat, Y, returned, [g.pos[k] for k in todo])
        send = []
        for k, zk, sk in zip(todo, z, sd, strict=True):
            r: Request = g.members[k]
            r.gate_score, r.uncertainty = float(zk), float(sk)
            if self.record:
                r_top = int(np.argmax(np.asarray(Yhat[g.pos[k]]).ravel()))
                self.records.append((r.id, float(zk), r_top))
            if zk >= self.threshold:
                r.gate = "passed"
                self.passed += 1
                send.append(k)
                continue
            if copies:
                self.hold(disp, r, disp.busy_workers(g))
            elif r.gate != "held":
                r.gate = "held"
                self.held += 1
        return send

    def hold(self, disp: Any, r: Request, busy: set[int]) -> None:
        """Request r waits for its own result or its copies (sent now, or as workers free)."""
        if r.gate != "held":
            r.gate = "held"
            self.held += 1
        self.copy(disp, r, busy)

    def hold_rest(self, disp: Any, g: Any) -> None:
        """At group g's decode deadline: every member still unanswered (no decode could be made, or none passed)
        is held and gets its copy."""
        for r in g.members:
            if not r.status:
                self.hold(disp, r, disp.busy_workers(g))

    def copy(self, disp: Any, r: Request, busy: set[int]) -> None:
        """Up to `copies` plain copies of a held request in all, each on an idle worker outside `busy`, preferring
        one that was not slow on its last task: at the p99.9 a copy that lands on a slow worker counts, and two
        rarely both do. No idle worker at all (near saturation): one copy at once on the least-loaded such worker
        (a hedge's copy; waiting for an idle worker left held requests behind their slow workers), and
        the rest wait for a worker to free (`observe`)."""
        have = sum(t.kind == "copy" for t in r.tasks)
        if have >= self.copies or r.status or not disp.can_make(r):  # none for a request whose target is lost
            return
        med = self._median.value
        slow = {w for w, d in self._last.items() if d > SLOW_RATIO * med}
        used = set(busy) | {int(w) for w in np.flatnonzero(np.asarray(disp.env.loads()) > 0)}
        used |= {t.worker for t in r.tasks if t.kind == "copy"}
        for _ in range(self.copies - have):
            t = disp.send_copy(r, "copy", exclude=used | slow) or disp.send_copy(r, "copy", exclude=used)
            if t is None:
                if not any(c.kind == "copy" for c in r.tasks):  # none idle: the first copy leaves now anyway
                    mine = set(busy) | {c.worker for c in r.tasks}
                    if disp.send_copy(r, "copy", exclude=mine | slow) is None:
                        disp.send_copy(r, "copy", exclude=mine)
                if r not in self._wanting:
                    self._wanting[r] = disp
                return
            used.add(t.worker)
        self._wanting.pop(r, None)

    def _refill(self) -> None:
        """A worker freed: the held requests still short of their copies (oldest first) get them, while idle
        workers last."""
        self._refill_due = False
        for r, disp in list(self._wanting.items()):
            if r.status:
                del self._wanting[r]
                continue
            if not np.any(np.asarray(disp.env.loads()) == 0):
                return
            self.copy(disp, r, disp.busy_workers(r.group))

    def observe(self, task: Task) -> None:
        """Learn each worker's speed from its finished tasks; a held request short of its copies gets them once
        the dispatcher has handled this result (its worker may be idle now)."""
        if task.ok and task.worker >= 0 and not math.isnan(task.t_start):
            d = task.t_end - task.t_start
            self._last[task.worker] = d
            self._median.add(d)
        if self._wanting and not self._refill_due:
            self._refill_due = True
            next(iter(self._wanting.values())).env.call_later(0.0, self._refill)


class Memo:
    """A batched f that looks up the outputs of inputs it was given up front (computed in one batch) and calls f
    on the others: a simulation's systematic tasks and copies then cost nothing, only its coded tasks run f."""

    batched = True

    def __init__(self, f: Callable, X: np.ndarray, stop: threading.Event | None = None):
        self.f, self.stop = f, stop
        X = np.asarray(X, dtype=np.float32)
        F = apply_batch(f, X)
        self.out_shape = F.shape[1:]
        self.table = {x.tobytes(): y for x, y in zip(X, F, strict=True)}

    def __call__(self, Z: Any) -> np.ndarray:
        if self.stop is not None:  # a service's background calibration: yield the GIL to its serving threads
            time.sleep(0)
            if self.stop.is_set():
                raise CalibrationStopped("the service closed during the gate's calibration")
        Z = np.asarray(Z, dtype=np.float32)
        out = np.empty((len(Z), *self.out_shape))
        miss = []
        for i, z in enumerate(Z):
            y = self.table.get(z.tobytes())
            if y is None:
                miss.append(i)
            else:
                out[i] = y
        if miss:
            out[miss] = apply_batch(self.f, Z[miss]).reshape(len(miss), *self.out_shape)
        return out


class Pooled:
    """A batched f shared by `n` simulations running side by side in threads: a call waits until every simulation
    still running is waiting in a call (or has ended: `leave`), then one call of f on all their rows answers them
    all. A model whose rows do not depend on each other gives each simulation the outputs it would get alone; a
    remote one (a request per call) answers the simulations in a fraction of the calls."""

    batched = True

    def __init__(self, f: Callable, n: int):
        self.f, self.live = f, int(n)
        self.calls = 0  # calls of f made
        self._cv = threading.Condition()
        self._waiting: list[dict[str, Any]] = []

    def __call__(self, Z: Any) -> np.ndarray:
        slot: dict[str, Any] = {"x": np.asarray(Z)}
        with self._cv:
            self._waiting.append(slot)
            self._flush()
            while "y" not in slot:
                self._cv.wait()
        if isinstance(slot["y"], BaseException):
            raise slot["y"]
        return slot["y"]

    def leave(self) -> None:
        """A simulation ended: the others no longer wait for it."""
        with self._cv:
            self.live -= 1
            self._flush()

    def _flush(self) -> None:
        """With every live simulation waiting (the condition's lock held): one call of f for all of them."""
        if not self._waiting or len(self._waiting) < self.live:
            return
        batch, self._waiting = self._waiting, []
        sizes = [len(s["x"]) for s in batch]
        try:
            self.calls += 1
            Y = apply_batch(self.f, np.concatenate([s["x"] for s in batch]))
            for s, y in zip(batch, np.split(Y, np.cumsum(sizes)[:-1]), strict=True):
                s["y"] = y
        except BaseException as e:  # noqa: BLE001 - every simulation waiting gets the model's error (a stop)
            for s in batch:
                s["y"] = e
        self._cv.notify_all()


def calibrate_gate(make: Callable[[Gate], Callable[[Env], Any]], functions: dict[str, Callable], X: np.ndarray, *,
                   workers: int, service_ms: float = 0.0, slow_fraction: float = 0.1, slow_factor: float = 10.0,
                   load: float | None = None, duration: float = 60.0, seed: int = 0, runs: int = CALIBRATION_RUNS,
                   target: float = DEFAULT_TARGET, stop: threading.Event | None = None,
                   batch: bool = True) -> GateCalibration:
    """The gate's threshold for a model: the dispatcher `make(gate)` in virtual time on `workers` workers
    running `functions` ("f": the model; "parity" if the scheme runs one), fed the *training* inputs X, its gate
    recording every decode (and holding it, so each request also gets its copy), `runs` times (seeds seed,
    seed + 1, ...; the records pooled); then `choose_threshold`, floored at `score_floor(target)` where the
    decoder gave error estimates.
    Service time `service_ms` with persistent stragglers (slow_fraction, slow_factor), Poisson arrivals at
    `load` of uncoded capacity; service_ms 0 (unknown): the REFERENCE conditions. `stop` set: raises
    CalibrationStopped at the next model call.
    f runs on the training inputs once, in one batch (`Memo`); the coded inputs the runs make are evaluated in
    batches: the runs are simulated side by side (threads) and each call of f takes the inputs of every task
    running at that moment in every run (`VirtualWorkers`, `Pooled`). batch False: one call per task, run after
    run; for a model whose rows do not depend on each other, the threshold is the same."""
    from ...faults import PersistentStragglers, ServiceTimes

    if not service_ms > 0:
        service_ms, slow_fraction, slow_factor, ref_load = REFERENCE
        load = ref_load if load is None else load
    load = REFERENCE[3] if load is None else load
    X = np.asarray(X)
    if X.shape[0] == 0:
        raise ValueError("gate calibration needs training inputs")
    memo = Memo(functions["f"], X, stop)
    functions = {**functions, "f": memo}
    top = np.argmax(memo(X).reshape(len(X), -1), axis=1)
    s = service_ms / 1000
    rate = load * workers / (s * (1 - slow_fraction + slow_fraction * slow_factor))
    n = int(runs)
    pooled = Pooled(memo.f, n) if batch and n > 1 else None
    if pooled is not None:
        memo.f = pooled
    gates: list[Gate | None] = [None] * n
    errors: list[BaseException | None] = [None] * n

    def run(i: int) -> None:
        try:
            env = VirtualWorkers(workers, ServiceTimes(s), PersistentStragglers(
                workers, slow_fraction, slow_factor, 1.0, seed=seed + i), functions=functions, seed=seed + i,
                batch=batch)
            gates[i] = Gate(math.inf, record=True)
            simulate_load(make(gates[i]), env, rate, duration, inputs=X, seed=seed + i)
        except BaseException as e:  # noqa: BLE001 - raised below, in run order
            errors[i] = e
        finally:
            if pooled is not None:
                pooled.leave()

    if pooled is None:
        for i in range(n):
            run(i)
            if errors[i] is not None:
                raise errors[i]
    else:
        threads = [threading.Thread(target=run, args=(i,), name=f"gencc-gate-run-{i}", daemon=True)
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for e in errors:
            if e is not None:
                raise e
    records: list[tuple[int, float, int]] = []
    estimated = False
    for i, gate in enumerate(gates):
        estimated |= gate.estimated
        records += [(i * RUN_IDS + rid, z, top_) for rid, z, top_ in gate.records]
    return choose_threshold(records, lambda rid: int(top[(rid % RUN_IDS) % len(X)]), target, seed=seed,
                            floor=score_floor(target) if estimated and target < 1 else 0.0)


_cache: dict[tuple, GateCalibration] = {}
_lock = threading.Lock()


def service_gate(config: Any, slowdown: Any, make: Callable[[Gate | None], Callable[[Env], Any]],
                 functions: dict[str, Callable], X_train: np.ndarray, key: Any = None) -> Gate | None:
    """The gate of a service (`ServiceConfig` config, `Slowdown` slowdown): None for a scheme that decodes
    nothing, under a wrong-result check (the service asks with its unchecked configuration: the same code's
    decodes) or with gate "off"; else a Gate at `config.gate_threshold`, or at the threshold `calibrate_gate` finds
    on the training inputs (the service's injected slowdown when it has one, else the REFERENCE conditions),
    kept per (key, configuration) for the life of the process. A calibration runs in a background thread; until
    it ends (`gate.ready`) the gate holds every decode (the service answers only with the model's own outputs);
    `gate.stopped` abandons it."""
    from ..config import scheme as scheme_entry

    if config.gate == "off" or scheme_entry(config.scheme).dispatcher != "coded" or config.check != "off":
        return None
    if config.gate_threshold is not None:
        gate = Gate(config.gate_threshold)
        gate.ready.set()
        return gate
    slow = slowdown.service_ms > 0 and slowdown.slow_fraction > 0
    cond = (slowdown.service_ms, slowdown.slow_fraction, slowdown.slow_factor) if slow else REFERENCE[:3]
    ck = (repr(key), config.scheme, config.workers, config.K, config.parm_k, config.max_wait_ms,
          config.packed_parity, config.seed, cond)
    with _lock:
        cal = _cache.get(ck)
    if cal is not None:
        gate = Gate(cal.threshold, calibration=cal)
        gate.ready.set()
        return gate
    gate = Gate(math.inf)
    if X_train is None:  # nothing to calibrate on: every decode stays held (answers are the model's own)
        log.warning("the gate has no training inputs to calibrate on (--data): decoded answers stay held")
        gate.ready.set()
        return gate

    def work() -> None:
        try:
            c = calibrate_gate(make, functions, X_train[:CALIBRATION_INPUTS], workers=config.workers,
                          service_ms=cond[0], slow_fraction=cond[1], slow_factor=cond[2], seed=config.seed + 100,
                          stop=gate.stopped)
        except CalibrationStopped:
            gate.ready.set()
            return
        except Exception:  # the gate keeps holding every decode: safe, and said in the log
            log.exception("the gate's calibration failed; decoded answers stay held")
            gate.ready.set()
            return
        with _lock:
            _cache[ck] = c
        gate.calibration, gate.threshold = c, c.threshold
        log.info("gate calibrated: threshold %.3g on %d degraded training requests", c.threshold, c.candidates)
        gate.ready.set()

    threading.Thread(target=work, name="gencc-gate-calibration", daemon=True).start()
    return gate
