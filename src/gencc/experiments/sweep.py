"""Sweeps: a grid over workload x scheme x K x N x straggler model x seed, run into a tidy CSV.

Every grid point seeds its own random numbers from its key (`stable_seed`), so results do not depend on the
order points run in or on how many processes run them. The K inputs depend on (workload, K, seed) only and
the straggler draws on (workload, K, N, straggler, seed) only: every scheme at a grid point sees the same
inputs and the same straggler sets (common random numbers), so scheme comparisons are paired.

With `adversaries` (specs `model:A` or `model:N^a`, see `parse_adversary`) each grid point also corrupts A of
the returned results per draw and decodes with `code.robust_decode`; those CSVs carry ADV_COLUMNS too.

The CSV is appended to after every grid point; a rerun skips the points already complete in it (with the
same code, as its `repr`), so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import csv
import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from ..faults.stragglers import Bernoulli, FixedCount
from ..runtime.simulate import simulate
from .adversarial import parse_adversary
from .schemes import scheme_label, sweep_code
from .toy_workloads import get_workload

#: columns of the tidy sweep CSV, in order (one row per straggler draw)
COLUMNS = (
    "workload", "scheme", "K", "N", "straggler", "S", "p", "pattern", "seed", "trial", "draw_seed",
    "n_returned", "decodable", "missing", "exact", "mse", "rmse", "rel_mse", "agreement", "rel_acc",
    "encode_time", "decode_time", "code",
)
#: extra columns of a sweep with adversaries (adversary: the spec as given, A: the number it resolved to)
ADV_COLUMNS = ("adversary", "A", "recall", "false_alarms", "rel_mse_excluded")
#: the columns that identify a grid point (adversary: empty without adversaries)
KEY = ("workload", "scheme", "K", "N", "straggler", "seed", "adversary")
#: columns that measure wall-clock time (excluded when comparing runs)
TIMING = ("encode_time", "decode_time")
_INT = {"K", "N", "S", "seed", "trial", "draw_seed", "n_returned", "missing", "A", "false_alarms"}
_FLOAT = {"p", "mse", "rmse", "rel_mse", "agreement", "rel_acc", "encode_time", "decode_time", "recall",
          "rel_mse_excluded"}
_BOOL = {"decodable", "exact"}
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def stable_seed(*parts: Any) -> int:
    """A seed in [0, 2^63) from the text of `parts` (the same in every process and on every run)."""
    text = "|".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def parse_straggler(spec: str, N: int) -> FixedCount | Bernoulli:
    """A straggler model from its text: `worst:2`, `random:5`, `block:5`, `random:10%` (S = round(0.1 N),
    at least 1), or `bernoulli:0.1`."""
    try:
        kind, _, arg = spec.partition(":")
        if kind == "bernoulli":
            return Bernoulli(float(arg))
        if arg.endswith("%"):
            S = max(1, int(round(float(arg[:-1]) / 100.0 * N)))
        else:
            S = int(arg)
        return FixedCount(S, kind)
    except (ValueError, TypeError) as err:
        raise ValueError(f"bad straggler spec {spec!r} ({err}); use worst:S, worst-agreement:S, random:S, block:S, "
                         "random:10%, or bernoulli:p") from None


@dataclass(frozen=True)
class GridPoint:
    """One grid point: everything needed to run it in any process."""

    workload: str
    scheme: str
    K: int
    N: int
    straggler: str
    seed: int
    trials: int
    opts: tuple[tuple[str, Any], ...] = ()
    adversary: str = ""

    @property
    def label(self) -> str:
        return scheme_label(self.scheme, dict(self.opts))

    @property
    def key(self) -> tuple:
        return (self.workload, self.label, self.K, self.N, self.straggler, self.seed, self.adversary)

    @property
    def n_rows(self) -> int:
        """Rows this point writes: one for the (deterministic) worst case, else one per trial."""
        return 1 if self.straggler.startswith("worst") else self.trials

    def code(self):
        return sweep_code(self.scheme, self.K, self.N, self.workload, **dict(self.opts))


#: the most workers one code of a sweep may have
MAX_WORKERS = 100_000


@dataclass
class SweepSpec:
    """The grid. N comes from `N` (absolute) and/or `ratios` (N = ratio K, rounded); `opts` maps a scheme to
    keyword options for its code (omitted: the math layer's defaults). `K_frac` adds points at a fixed load K / N:
    K = round(frac N) for every N of `N` (ratios do not apply to them); with `K_frac` alone, pass K=()."""

    workloads: Sequence[str]
    schemes: Sequence[str] = ("gcc", "bacc")
    K: Sequence[int] = (10,)
    N: Sequence[int] = ()
    ratios: Sequence[float] = ()
    stragglers: Sequence[str] = ("worst:2",)
    seeds: Sequence[int] = (0,)
    trials: int = 20
    opts: dict[str, dict[str, Any]] = field(default_factory=dict)
    adversaries: Sequence[str] = ()
    K_frac: Sequence[float] = ()

    def __post_init__(self) -> None:
        bad = [f for f in self.K_frac if not (isinstance(f, (int, float)) and 0.0 < float(f) <= 1.0)]
        if bad:
            raise ValueError(f"K_frac values are loads K / N in (0, 1], got {bad[0]!r}")

    def _pairs(self) -> Iterator[tuple[str, int, int, list[int]]]:
        """(workload, K, seed, the Ns for that K): the K grid with N and ratios, then the K_frac points."""
        for w, K, seed in product(self.workloads, self.K, self.seeds):
            yield w, int(K), int(seed), sorted(set(int(n) for n in self.N) | {int(round(r * K)) for r in self.ratios})
        for w, frac, seed in product(self.workloads, self.K_frac, self.seeds):
            for N in sorted(set(int(n) for n in self.N)):
                yield w, int(round(float(frac) * N)), int(seed), [N]

    def points(self) -> list[GridPoint]:
        """Every valid grid point, in a fixed order (see `plan` for what is left out)."""
        return self.plan()[0]

    def check(self) -> list[GridPoint]:
        """Every check of the grid that runs no simulation, so a bad grid is refused before any work: no empty
        field, schemes the sweeps simulate, known workloads, K >= 1, finite ratios > 0, at most MAX_WORKERS
        workers, straggler and adversary specs that parse at every N, a grid that is not empty, and each grid
        point's code built (ParM without its parity model). Returns the grid points; a `ConfigError` naming
        the field to fix otherwise."""
        import math

        from ..codes.registry import make_code
        from ..errors import ConfigError
        from .schemes import check_scheme
        from .toy_workloads import TOYS

        for name in ("workloads", "schemes", "stragglers", "seeds"):
            if not getattr(self, name):
                raise ConfigError(f"no {name} given (an empty list)", name)
        if not self.K and not self.K_frac:
            raise ConfigError("no K given (an empty list), and no loads K/N (K_frac) either", "K")
        for scheme in self.schemes:
            try:
                check_scheme(scheme)
            except ValueError as e:
                raise ConfigError(str(e), "schemes") from None
        try:
            from ..workloads import WORKLOADS as TRAINED
        except ImportError:  # pragma: no cover - depends on the install
            TRAINED = {}  # noqa: N806
        known = (*TOYS, *TRAINED)
        for w in self.workloads:
            if w not in known:
                raise ConfigError(f"unknown workload {w!r}; choose one of {', '.join(known)}", "workloads")
        if self.trials < 1:
            raise ConfigError(f"trials must be a positive integer, got {self.trials}", "trials")
        for k in self.K:
            if k < 1:
                raise ConfigError(f"K (inputs per code) must be a positive integer, got {k}", "K")
        for r in self.ratios:
            if not (math.isfinite(r) and r > 0):
                raise ConfigError(f"ratios must be finite numbers > 0 (N = round(ratio K)), got {r:g}", "ratios")
        Ns = sorted({int(n) for n in self.N} | {int(round(r * k)) for r in self.ratios for k in self.K})
        if Ns and Ns[-1] > MAX_WORKERS:
            where = "N" if Ns[-1] in {int(n) for n in self.N} else "ratios"
            raise ConfigError(f"N must be at most {MAX_WORKERS} workers (the presets go to 640), got N={Ns[-1]}",
                              where)
        for st in self.stragglers:
            for n in (n for n in Ns if n >= 1):
                try:
                    parse_straggler(st, n)
                except (ValueError, OverflowError) as e:
                    raise ConfigError(str(e) if isinstance(e, ValueError) else
                                      f"bad straggler spec {st!r} ({e}); give S or a percentage as a finite number",
                                      "stragglers") from None
        try:
            points, dropped = self.plan()
        except (ValueError, OverflowError) as e:
            raise ConfigError(str(e), "adversaries" if self.adversaries else "stragglers") from None
        if not points:
            raise ConfigError("the grid is empty: " + "; ".join(dropped), "N")
        for scheme, k, n, opts in dict.fromkeys((pt.scheme, pt.K, pt.N, pt.opts) for pt in points):
            try:
                make_code(scheme, k, n, **dict(opts))
            except ValueError as e:
                raise ConfigError(str(e), "opts" if opts or "needs option" in str(e) else "schemes") from None
        return points

    def plan(self) -> tuple[list[GridPoint], list[str]]:
        """The valid grid points in a fixed order, and what was left out and why: one line per reason, with
        its count. Left out: points with N < K (a code needs at least K workers) and fixed-count stragglers with
        S >= N (no worker would return), and adversaries with worst-case stragglers (the worst-case search runs
        without them); an empty field leaves out everything. A bad adversary spec is a ValueError."""
        empty = [name for name in ("workloads", "schemes", "stragglers", "seeds") if not getattr(self, name)]
        if not self.K and not self.K_frac:
            empty.append("K or K_frac")
        if not self.N and not (self.ratios and self.K):
            empty.append("N" if self.K_frac and not self.K else "N or ratios")
        if empty:
            return [], [f"no {name} given" for name in empty]
        out, dropped, seen = [], {}, set()
        advs = tuple(self.adversaries) or ("",)
        for w, K, seed, Ns in self._pairs():
            for N, st, adv, scheme in product(Ns, self.stragglers, advs, self.schemes):
                why = None
                if adv:
                    parse_adversary(adv, N)
                if K < 1:
                    why = f"K={K} at N={N} (K_frac too small: a code needs K >= 1)"
                elif N < K:
                    why = f"N={N} < K={K} (a code needs at least K workers)"
                else:
                    model = parse_straggler(st, N)
                    if isinstance(model, FixedCount) and model.S >= N:
                        why = f"{st} at N={N} (S={model.S} >= N: no worker would return)"
                    elif adv and isinstance(model, FixedCount) and model.searched:
                        why = f"adversaries with {st} (the worst-case search runs without adversaries)"
                if why:
                    dropped[why] = dropped.get(why, 0) + 1
                    continue
                opts = tuple(sorted(self.opts.get(scheme, {}).items()))
                pt = GridPoint(w, scheme, K, N, st, seed, int(self.trials), opts, adv)
                if pt.key not in seen:  # a K_frac point may repeat one of the K grid
                    seen.add(pt.key)
                    out.append(pt)
        return out, [f"{why}: {n} point{'s' if n > 1 else ''}" for why, n in dropped.items()]


def run_point(pt: GridPoint) -> list[dict]:
    """Simulate one grid point; rows in the CSV's columns."""
    w = get_workload(pt.workload)
    X, y = w.sample(pt.K, np.random.default_rng(stable_seed("inputs", pt.workload, pt.K, pt.seed)))
    code = pt.code()
    model = parse_straggler(pt.straggler, pt.N)
    draw_seed = stable_seed("draws", pt.workload, pt.K, pt.N, pt.straggler, pt.seed)
    clf = bool(getattr(w, "classifier", False))
    adv = parse_adversary(pt.adversary, pt.N) if pt.adversary else None
    recs = simulate(w.f, X, code, model, trials=pt.trials, seed=draw_seed, labels=y if clf else None,
                    classifier=clf, adversaries=adv)
    rows = []
    for r in recs:
        row = {c: r.get(c) for c in (*COLUMNS, *(ADV_COLUMNS if adv else ()))}
        row.update(workload=pt.workload, scheme=pt.label, straggler=pt.straggler, seed=pt.seed,
                   draw_seed=draw_seed, code=repr(code))
        if adv:
            row.update(adversary=pt.adversary, A=int(adv.A))
        rows.append(row)
    return rows


# ----- CSV ------------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _parse(col: str, s: str) -> Any:
    if s == "":
        return None
    if col in _INT:
        return int(s)
    if col in _FLOAT:
        return float(s)
    if col in _BOOL:
        return s == "True"
    return s


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a sweep CSV with typed values (a torn last line, from an interrupted write, is dropped).

    Raises FileNotFoundError for a missing file and ValueError for a CSV without the sweep columns."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a sweep CSV")
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    reader = csv.DictReader(lines)
    cols = (*COLUMNS, *ADV_COLUMNS) if "adversary" in (reader.fieldnames or []) else COLUMNS
    missing = [c for c in cols if c not in (reader.fieldnames or [])]
    if missing and text.strip():
        raise ValueError(f"{path} is not a sweep CSV (written by `gencc sweep` or `gencc reproduce`): missing "
                         f"column(s) {', '.join(missing)}")
    rows = []
    for raw in reader:
        if None in raw or any(v is None for v in raw.values()):
            continue
        rows.append({c: _parse(c, raw.get(c, "")) for c in cols})
    return rows


def _write(path: Path, rows: list[dict], mode: str, columns: Sequence[str] = COLUMNS) -> None:
    with path.open(mode, newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        if mode == "w":
            wr.writeheader()
        for r in rows:
            wr.writerow({c: _fmt(r.get(c)) for c in columns})
        fh.flush()
        os.fsync(fh.fileno())


def row_key(r: dict) -> tuple:
    """The grid point key of a CSV row (GridPoint.key)."""
    return (*(r[k] for k in KEY[:-1]), r.get("adversary") or "")


# ----- running ----------------------------------------------------------------------------------------------
@contextmanager
def _single_threaded() -> Iterator[None]:
    """BLAS and torch on one thread, so a point gives the same numbers in-process and in a worker."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        threadpool_limits = None
    torch = sys.modules.get("torch")
    old = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        if threadpool_limits is not None:
            with threadpool_limits(1):
                yield
        else:  # pragma: no cover
            yield
    finally:
        if torch is not None and old is not None:
            torch.set_num_threads(old)


def _worker_init() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:  # pragma: no cover - only with torch workloads
        torch.set_num_threads(1)


def _run_in_worker(pt: GridPoint) -> list[dict]:
    get_workload(pt.workload)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    with _single_threaded():
        return run_point(pt)


@dataclass
class SweepResult:
    """What a sweep did: points in the grid, skipped (already in the CSV), run now, rows written, and the grid
    points left out (one line per reason, see `SweepSpec.plan`)."""

    path: Path
    total: int
    skipped: int
    ran: int
    rows_written: int
    dropped: list[str] = field(default_factory=list)


def run_sweep(spec: SweepSpec, out: str | Path, jobs: int = 1, progress: bool = True,
              limit: int | None = None) -> SweepResult:
    """Run every grid point of `spec` not yet complete in the CSV `out`, appending rows as points finish.

    `jobs` > 1 runs points in that many processes; rows are written in grid order either way, and each point
    seeds itself from its key, so the CSV is the same for any `jobs`. `limit` stops after that many new
    points (used to simulate an interruption). An empty grid (every point left out) is a ValueError.
    """
    out = Path(out)
    points, dropped = spec.plan()
    if not points:
        raise ValueError("the grid is empty: " + "; ".join(dropped))
    want = {pt.key: pt for pt in points}
    existing = read_rows(out) if out.exists() else []
    # a CSV holding adversarial rows (or about to) carries the adversary columns; plain sweeps keep COLUMNS
    adv = bool(spec.adversaries) or (out.exists() and "adversary" in out.read_text().partition("\n")[0].split(","))
    columns = (*COLUMNS, *ADV_COLUMNS) if adv else COLUMNS
    out.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[tuple, int] = {}
    code_of: dict[tuple, str] = {}
    for r in existing:
        k = row_key(r)
        counts[k] = counts.get(k, 0) + 1
        code_of[k] = r["code"]
    done = {k for k, n in counts.items()
            if k in want and n == want[k].n_rows and code_of[k] == repr(want[k].code())}
    # rows of points outside this grid stay; rows of incomplete or stale points of this grid go
    keep = [r for r in existing if row_key(r) in done or row_key(r) not in want]
    text = out.read_text() if out.exists() else ""
    if (not out.exists() or len(keep) != len(existing) or not text.endswith("\n")
            or text.partition("\n")[0].split(",") != list(columns)):
        _write(out, keep, "w", columns)
    todo = [pt for pt in points if pt.key not in done]
    skipped = len(points) - len(todo)
    if limit is not None:
        todo = todo[:limit]
    written = 0
    for rows in _execute(todo, jobs, progress, len(points), skipped):
        _write(out, rows, "a", columns)
        written += len(rows)
    return SweepResult(out, len(points), skipped, len(todo), written, dropped)


def _execute(todo: list[GridPoint], jobs: int, progress: bool, total: int, skipped: int) -> Iterator[list[dict]]:
    bar = _progress(progress)
    task = bar.add_task(f"sweep ({skipped} of {total} points already done)", total=len(todo)) if bar else None
    try:
        if bar:
            bar.start()
        for name in dict.fromkeys(pt.workload for pt in todo):
            get_workload(name)  # train / cache once here, before any worker process loads it
        if jobs <= 1 or len(todo) <= 1:
            with _single_threaded():
                for pt in todo:
                    rows = run_point(pt)
                    if bar:
                        bar.advance(task)
                    yield rows
        else:
            yield from _execute_pool(todo, jobs, bar, task)
    finally:
        if bar:
            bar.stop()


def _execute_pool(todo: list[GridPoint], jobs: int, bar: Any, task: Any) -> Iterator[list[dict]]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    saved = {v: os.environ.get(v) for v in _THREAD_VARS}
    os.environ.update({v: "1" for v in _THREAD_VARS})
    try:
        ex = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_worker_init)
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    try:
        futures = [ex.submit(_run_in_worker, pt) for pt in todo]
        for fut in futures:
            rows = fut.result()
            if bar:
                bar.advance(task)
            yield rows
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def _progress(enabled: bool) -> Any:
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=False)
