"""Runtime: what a job through `gencc.run` costs on top of calling f, what batching and BLAS threads buy, and the
tail it buys under stragglers. Every figure is measured side by side with its floor: each configuration in a
stretch of jobs of its own (the first two untimed, so no stretch times what the previous one left running), the
stretches alternated; the BLAS settings alternate in rounds (OpenBLAS's thread count is process-wide, so two
settings cannot be live at once), each round with fresh executors.

- per-job latency and CPU per job (process time, every thread), no injected latency, K = 8: uncoded
  (Replication(K, K)) and GCC on N = 12 with the first 10, vs f(X) called directly; on three executors, the
  default (`LocalExecutor()`: a batched f's ready tasks as one batched call on one thread), a thread per worker
  (`max_threads=64`: each task its own call) and one thread per core running its workers' ready tasks as one
  batched call (`max_threads=cores`), each with single-threaded (`blas_threads=1`) and default-threaded
  (`blas_threads=None`) BLAS. f is a small numpy MLP (`--f mlp`, default), a trivial batched f (`--f trivial`,
  X * 2: the latency is the runtime's own cost) or the digits CNN (`--f digits-cnn`). For GCC, the share of
  the job that is `code.decode` alone, timed on the same job's results right after it. Beside the default
  executor's figures, a minimal threaded job (`MinimalJob`: order, encode, one hand-off of the stacked coded
  inputs to one thread that calls f and checks its rows finite, the first results in a random dispatch order,
  decode; no per-worker queues, faults, cancellation or records): the floor of any runtime that runs f off
  the caller's thread, which moves with the host's speed as gencc's job does.
- one CPU (Linux): per-job latency on the default executor with the job's threads all on one CPU vs free to
  run on any, alternated in rounds (what moving the GIL between CPUs costs);
- digits CNN (needs torch; skipped without): a GCC job on N = 12, first 10, vs one batched call of f on the N
  coded inputs, on the same executors; on the default executor also vs `MinimalJob` with the same f (the
  ordering, encoding, hand-off and decoding any threaded runtime adds to f); f's own call inside those minimal
  jobs vs the same calls made directly one after another (what the work around f, and the wait before it, cost
  the model's call itself); and, in one thread with no runtime, the job's decode timed right after f's call
  and again at once (what f's call leaves in the caches costs the code work that follows it, inside a job or
  not);
- streams: time per job of `gencc.stream` with 1, 2 and 4 jobs in flight vs the same jobs through `gencc.run`
  one after another (default executor; the MLP, and the digits CNN when torch is there, for which also vs f on
  each job's N coded inputs);
- BLAS under load: a cold dense D_F build (GCC K = 30, N = 150, Matern 3/2 kernel, 10 stragglers, a new pattern
  each) in the master thread while a thread-per-worker executor runs a matmul job every 50 ms (each input a
  16 x 256 matrix), default-threaded BLAS vs single-threaded: median and worst build;
- tail latency: p99 per job with injected bimodal latency (each task slow x10 with probability 0.05 over a
  healthy `--base-ms`), GCC and replication at N = 2K vs uncoded on K workers (the floor: what users run today).
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import threading
import time
from collections import defaultdict

import numpy as np
from measure import Figure, median

import gencc
from gencc.runtime import LocalExecutor

SUITE = "runtime"
K, N, WAIT_FOR = 8, 12, 10  # per-job figures
TAIL_N, TAIL_WAIT = 16, 12  # tail figures
ROUNDS = 4  # BLAS settings alternate this many times
WARM_JOBS = 400  # jobs per code and executor before the first round (every pattern's D_F cached)
LOAD_PERIOD_S = 0.05  # one matmul job this often in the background of the D_F builds
BLAS = (("BLAS 1 thread", 1), ("BLAS default threads", None))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jobs", type=int, default=100, help="jobs per scheme and executor (default 100)")
    ap.add_argument("--f", choices=("mlp", "trivial", "digits-cnn"), default="mlp",
                    help="f of the per-job figures (default mlp)")
    ap.add_argument("--base-ms", type=float, default=5.0, help="injected delay of a healthy task, ms (default 5)")
    ap.add_argument("--runtime-parts", nargs="+", choices=tuple(PARTS), default=list(PARTS),
                    help=f"which runtime figures to measure (default all: {' '.join(PARTS)})")


def _mlp():
    rng = np.random.default_rng(0)
    W1, W2 = rng.normal(size=(64, 256)) / 8, rng.normal(size=(256, 10)) / 16

    def mlp(X: np.ndarray) -> np.ndarray:
        return np.tanh(np.asarray(X).reshape(len(X), -1) @ W1) @ W2

    mlp.batched = True  # type: ignore[attr-defined]
    return mlp, lambda rng: rng.normal(size=(K, 64))


def _trivial():
    def double(X: np.ndarray) -> np.ndarray:
        return np.asarray(X) * 2.0

    double.batched = True  # type: ignore[attr-defined]
    return double, lambda rng: rng.normal(size=(K, 64))


def _cnn():
    """(f, sampler) of the digits CNN, or None when torch or the workload is not available."""
    try:
        from gencc.workloads import load

        w = load("digits-cnn", progress=False)
    except Exception as e:  # noqa: BLE001 - the suite runs without torch; say why the figures are missing
        print(f"(digits-cnn figures skipped: {type(e).__name__}: {e})", flush=True)
        return None
    return w.f, lambda rng: w.sample(K, rng)[0]


def _job_f(args: argparse.Namespace):
    """(f, sampler) of the per-job figures, as `--f` names it (the MLP when the CNN is not available)."""
    return _mlp() if args.f == "mlp" else _trivial() if args.f == "trivial" else (_cnn() or _mlp())


def _job_schemes() -> list:
    """The per-job figures' schemes: (name, code, wait_for)."""
    return [("uncoded", gencc.Replication(K, K), None), (f"GCC, N={N}, first {WAIT_FOR}", gencc.GCC(K, N), WAIT_FOR)]


class MinimalJob:
    """The least a threaded runtime does for one job (the floor of the per-job figures): the inputs ordered as
    `gencc.run` orders them, encoded, handed to one long-lived thread as one stacked array, f called on it once
    and its rows checked finite there, the first `wait_for` finite rows in a random dispatch order decoded. No
    per-worker queues, injected latency, faults, cancellation, validation or records."""

    def __init__(self, f) -> None:
        self.f, self.rng = f, np.random.default_rng(0)
        self.f_times: list[float] = []  # seconds of each call of f, timed in the thread
        self._in: queue.SimpleQueue = queue.SimpleQueue()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="minimal-job")
        self._thread.start()

    def _serve(self) -> None:
        while (Z := self._in.get()) is not None:
            t = time.perf_counter()
            Y = np.asarray(self.f(Z), dtype=float)
            self.f_times.append(time.perf_counter() - t)
            self._out.put((Y, np.isfinite(Y.reshape(len(Y), -1)).all(axis=1)))

    def __call__(self, X: np.ndarray, code, wait_for: int | None) -> np.ndarray:
        perm = np.arange(code.K) if isinstance(code, gencc.Replication) else gencc.order_inputs(X)
        self._in.put(code.encode(X[perm]))
        Y, ok = self._out.get()
        order = self.rng.permutation(code.N)
        used = np.sort(order[ok[order]][: wait_for or code.N])
        out = np.empty((code.K, *Y.shape[1:]))
        out[perm] = code.decode(Y[used], used)
        return out

    def close(self) -> None:
        self._in.put(None)
        self._thread.join(5)


class HandRolledJob:
    """What a user writes instead of gencc for one coded job, with the standard library: a
    `ThreadPoolExecutor(N)`, the encoding matrix E precomputed, f (one input at a time) submitted per worker, the
    first `wait_for` finite results taken with `wait(FIRST_COMPLETED)`, the rest cancelled, D_F cached per
    straggler pattern, decode = D_F @ Y_F. No injected latency, faults, records or hung-call handling."""

    def __init__(self, f, code) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.f, self.code = f, code
        self.E = code.encode(np.eye(code.K))  # (N, K): the encoding matrix, once
        self.pool = ThreadPoolExecutor(code.N)
        self.D: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, X: np.ndarray, wait_for: int | None = None) -> np.ndarray:
        from concurrent.futures import FIRST_COMPLETED, wait

        code, f = self.code, self.f
        need = wait_for or code.N
        perm = np.arange(code.K) if isinstance(code, gencc.Replication) else gencc.order_inputs(X)
        Z = np.tensordot(self.E, X[perm], axes=1)
        futs = {self.pool.submit(f, Z[n]): n for n in range(code.N)}
        got: dict[int, np.ndarray] = {}
        pending = set(futs)
        while len(got) < need and pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for d in done:
                y = d.result()
                if np.isfinite(y).all():
                    got[futs[d]] = y
        for p in pending:
            p.cancel()
        used = tuple(sorted(got)[:need])
        D = self.D.get(used)
        if D is None:  # D_F (K, |F|): the decode of the identity on the returned workers
            D = self.D[used] = code.decode(np.eye(len(used)), np.asarray(used))
        Y = np.stack([got[u] for u in used])
        out = np.empty((code.K, *Y.shape[1:]))
        out[perm] = np.tensordot(D, Y, axes=1)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


DEFAULT_EXECUTOR = "default executor (1 batched thread)"


def _executors(blas: int | None) -> dict[str, LocalExecutor]:
    cores = os.cpu_count() or 1
    exs = {DEFAULT_EXECUTOR: LocalExecutor(blas_threads=blas),
           "a thread per worker": LocalExecutor(max_threads=64, blas_threads=blas)}
    if cores > 1:
        exs[f"{cores} threads, batched"] = LocalExecutor(max_threads=cores, blas_threads=blas)
    return exs


SETTLE_JOBS = 2  # untimed jobs at the start of each stretch: what the previous stretch left running ends first


def _stretch(go, inputs: list, out: list, cpu: list | None = None) -> None:
    """Time `go(x)` for each of `inputs` one after another (a stretch of one configuration), after SETTLE_JOBS
    untimed calls: a thread-per-worker job returns while some of its threads are still delivering, so a stretch
    starts once what the previous configuration left running is over, and every timed job follows a job of its
    own kind (its code and data in the caches), as in a loop of jobs."""
    for x in inputs[:SETTLE_JOBS]:
        go(x)
    for x in inputs:
        c, t = time.process_time(), time.perf_counter()
        go(x)
        out.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)


def _jobs_side_by_side(f, jobs: list[np.ndarray], schemes, floor_of) -> tuple[dict, ...]:
    """Latency and CPU per job for every (scheme, executor, BLAS), of the floor and of the minimal threaded job:
    each configuration timed in its own stretch of jobs (`_stretch`), the stretches alternated (every round
    runs each one over its share of the jobs)."""
    lat, cpu, flat, fcpu = defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list)
    dec = defaultdict(list)  # code.decode alone on a job's own results, beside that job's latency
    mini = defaultdict(list)  # the minimal threaded job (MinimalJob) on the same inputs
    f_in = defaultdict(list)  # f's own call inside those minimal jobs
    for r in range(ROUNDS):
        for bname, blas in BLAS:
            exs = _executors(blas)
            minimal = MinimalJob(f)
            try:
                # warm-up: threads started, first model calls done, and (first round) D_F cached for every
                # straggler pattern: a job takes the first wait_for results in its random dispatch order, so
                # C(N, wait_for) patterns come up (66 at N = 12, first 10), each built once per code
                warm = WARM_JOBS if r == 0 else 3
                for ex in exs.values():
                    for _, code, wf in schemes:
                        for j in range(warm):
                            gencc.run(f, jobs[j % len(jobs)], code, ex, wait_for=wf)
                for _, code, wf in schemes:
                    for j in range(min(warm, 20)):
                        minimal(jobs[j % len(jobs)], code, wf)
                share = jobs[r::ROUNDS]
                for sname, code, wf in schemes:
                    for ename, ex in exs.items():
                        returned: list[np.ndarray] = []

                        def job(X, code=code, ex=ex, wf=wf, returned=returned):
                            returned.append(gencc.run(f, X, code, ex, wait_for=wf).returned)

                        _stretch(job, share, lat[sname, ename, bname], cpu[sname, ename, bname])
                        if wf is not None:  # the same jobs' decodes alone, on their own results
                            Ys = [(f(code.encode(X[gencc.order_inputs(X)]))[u], u)
                                  for X, u in zip(share, returned[SETTLE_JOBS:], strict=True)]
                            _stretch(lambda Yu, code=code: code.decode(*Yu), Ys, dec[sname, ename, bname])
                    Zs = [floor_of(code, X) for X in share]
                    _stretch(f, Zs, flat[sname, bname], fcpu[sname, bname])
                    minimal.f_times.clear()
                    _stretch(lambda X, m=minimal, code=code, wf=wf: m(X, code, wf), share, mini[sname, bname])
                    f_in[sname, bname] += minimal.f_times[SETTLE_JOBS:]
            finally:
                minimal.close()
                for ex in exs.values():
                    ex.close()
    return lat, cpu, flat, fcpu, dec, mini, f_in


def per_job(args: argparse.Namespace) -> list[Figure]:
    f, sample = _job_f(args)
    rng = np.random.default_rng(1)
    jobs = [sample(rng) for _ in range(args.jobs)]
    schemes = _job_schemes()
    lat, cpu, flat, fcpu, dec, mini, _ = _jobs_side_by_side(f, jobs, schemes, lambda code, X: X)
    figs = []
    for (sname, ename, bname), v in lat.items():
        figs.append(Figure(SUITE, f"per-job latency, {sname} ({args.f}, K={K}), {ename}, {bname}", 1e3 * median(v),
                           1e3 * median(flat[sname, bname]), "f(X) called directly"))
    for (sname, ename, bname), v in lat.items():
        if ename == DEFAULT_EXECUTOR:
            figs.append(Figure(SUITE, f"per-job latency, {sname} ({args.f}, K={K}), {ename}, {bname}, vs a minimal "
                                      "threaded job", 1e3 * median(v), 1e3 * median(mini[sname, bname]),
                               "a minimal threaded job (MinimalJob)"))
    for (sname, ename, bname), v in cpu.items():
        figs.append(Figure(SUITE, f"CPU per job, {sname} ({args.f}, K={K}), {ename}, {bname}", 1e3 * median(v),
                           1e3 * median(fcpu[sname, bname]), "f(X) called directly, CPU"))
    for (sname, ename, bname), v in dec.items():
        figs.append(Figure(SUITE, f"code.decode alone, {sname} ({args.f}, K={K}), {ename}, {bname}",
                           1e3 * median(v), 1e3 * median(lat[sname, ename, bname]), "the whole job (its latency)"))
    return figs


def cnn_batching(args: argparse.Namespace) -> list[Figure]:
    got = _cnn()
    if got is None:
        return []
    f, sample = got
    rng = np.random.default_rng(2)
    jobs = [sample(rng) for _ in range(args.jobs)]
    schemes = [(f"GCC, N={N}, first {WAIT_FOR}", gencc.GCC(K, N), WAIT_FOR)]
    lat, _, flat, _, _, mini, f_in = _jobs_side_by_side(f, jobs, schemes, lambda code, X: code.encode(X))
    figs = [Figure(SUITE, f"coded job, digits-cnn, {sname}, {ename}, {bname}", 1e3 * median(v),
                   1e3 * median(flat[sname, bname]), f"f on the {N} coded inputs, one batched call")
            for (sname, ename, bname), v in lat.items()]
    # the same job against the least a threaded runtime does (order, encode, one hand-off, f, decode): what of the
    # gap to f alone is gencc's runtime, and what the coding and the hand-off cost any runtime
    figs += [Figure(SUITE, f"coded job, digits-cnn, {sname}, {ename}, {bname}, vs a minimal threaded job",
                    1e3 * median(v), 1e3 * median(mini[sname, bname]), "a minimal threaded job (MinimalJob)")
             for (sname, ename, bname), v in lat.items() if ename == DEFAULT_EXECUTOR]
    # f's own call inside the minimal jobs, against the same calls made directly one after another: what the work
    # around f in a threaded job (and the wait before it) costs the model's call itself
    figs += [Figure(SUITE, f"f's call inside a minimal threaded job, digits-cnn, {sname}, {bname}",
                    1e3 * median(v), 1e3 * median(flat[sname, bname]), "f called directly, one call after another")
             for (sname, bname), v in f_in.items()]
    return figs + [_decode_after_f(f, jobs, schemes[0][1])]


def warm_decoders(code, Y: np.ndarray) -> None:
    """Decode results Y (N rows) once from every first WAIT_FOR of N workers, so that every straggler pattern's
    decoder is cached and no timed decode builds one."""
    for r in itertools.combinations(range(N), WAIT_FOR):
        code.decode(Y[list(r)], np.array(r))


def _decode_after_f(f, jobs: list[np.ndarray], code) -> Figure:
    """One thread, no runtime: order, encode, f, then the job's decode timed twice at once. The first call runs
    on caches that f's call just filled with its own code and data; the second finds them warm, as a decode
    timed alone in a loop does."""
    rng = np.random.default_rng(5)
    warm_decoders(code, f(code.encode(jobs[0])))
    first, again = [], []
    for i in range(2 * len(jobs)):
        X = jobs[i % len(jobs)]
        Y = f(code.encode(X[gencc.order_inputs(X)]))
        used = np.sort(rng.permutation(N)[:WAIT_FOR])
        Yu = Y[used]
        t = time.perf_counter()
        code.decode(Yu, used)
        t1 = time.perf_counter()
        code.decode(Yu, used)
        again.append(time.perf_counter() - t1)
        first.append(t1 - t)
    return Figure(SUITE, f"code.decode right after f (digits-cnn, GCC, N={N}, first {WAIT_FOR}), one thread",
                  1e3 * median(first), 1e3 * median(again), "the same decode again at once")


def blas_under_load(args: argparse.Namespace) -> list[Figure]:
    """Cold dense D_F builds in the master while worker threads run matmul jobs, per BLAS setting."""
    Kd, Nd, S = 30, 150, 10
    rng = np.random.default_rng(4)
    Wm = rng.normal(size=(256, 256)) / 16

    def heavy(X: np.ndarray) -> np.ndarray:  # each input a (16, 256) matrix: a matmul big enough for BLAS threads
        Z = np.asarray(X).reshape(-1, 256)
        for _ in range(2):
            Z = np.tanh(Z @ Wm)
        return Z.reshape(len(X), -1)[:, :4]

    heavy.batched = True  # type: ignore[attr-defined]
    builds: dict[str, list[float]] = defaultdict(list)
    for _ in range(2):
        for bname, blas in BLAS:
            stop = threading.Event()
            ex = LocalExecutor(blas_threads=blas)
            Xl = rng.normal(size=(K, 16, 256))

            def load(ex=ex, stop=stop, Xl=Xl) -> None:  # paced: the same work per second for both settings
                code, t = gencc.GCC(K, N), time.perf_counter()
                while not stop.is_set():
                    gencc.run(heavy, Xl, code, ex, order=False)
                    t += LOAD_PERIOD_S
                    stop.wait(max(t - time.perf_counter(), 0.0))

            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            try:
                time.sleep(0.2)
                for _ in range(20):
                    returned = np.sort(rng.choice(Nd, Nd - S, replace=False))
                    t = time.perf_counter()
                    gencc.GCC(Kd, Nd, kernel="matern32").decoding_matrix(returned)
                    builds[bname].append(time.perf_counter() - t)
            finally:
                stop.set()
                loader.join(30)
                ex.close()
    one, default = builds[BLAS[0][0]], builds[BLAS[1][0]]
    what = f"cold dense D_F under load, GCC K={Kd}, N={Nd}, S={S}, matern32, default-threaded BLAS"
    return [Figure(SUITE, f"{what}, median", 1e3 * median(default), 1e3 * median(one), "single-threaded BLAS, median"),
            Figure(SUITE, f"{what}, worst of {len(default)}", 1e3 * max(default), 1e3 * max(one),
                   f"single-threaded BLAS, worst of {len(one)}")]


def tails(args: argparse.Namespace) -> list[Figure]:
    f, sample = _mlp()
    rng = np.random.default_rng(1)
    jobs = [sample(rng) for _ in range(args.jobs)]
    uncoded, gcc, rep = gencc.Replication(K, K), gencc.GCC(K, TAIL_N), gencc.Replication(K, TAIL_N)
    model = gencc.Bimodal(p=0.05, factor=10.0, base=args.base_ms / 1e3)
    p99 = {}
    with LocalExecutor() as ex:
        for X in jobs[:5]:
            gencc.run(f, X, gcc, ex, wait_for=TAIL_WAIT)
        for label, code, wf in (("uncoded", uncoded, None), ("GCC", gcc, TAIL_WAIT), ("replication", rep, None)):
            lat = [gencc.run(f, X, code, ex, wait_for=wf, latency=model, seed=np.random.default_rng([7, j])).latency
                   for j, X in enumerate(jobs)]
            p99[label] = 1e3 * float(np.percentile(lat, 99))
    figs = []
    for label in ("GCC", "replication"):
        what = f"N={TAIL_N}, first {TAIL_WAIT}" if label == "GCC" else f"N={TAIL_N}, first copy of each input"
        figs.append(Figure(SUITE, f"p99 per job, bimodal latency (5% x10, base {args.base_ms:g} ms), {label} "
                                  f"({what})", p99[label], p99["uncoded"], f"uncoded on K={K} workers"))
    return figs


def one_cpu(args: argparse.Namespace) -> list[Figure]:
    """Per-job latency on the default executor with every thread of the job on one CPU (the main thread's
    affinity, inherited by the executor's threads) vs free to run on any, rounds alternated: the job's Python
    work is the same, so the gap is what moving the GIL (and the job's objects) between CPUs costs."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        print("(one-CPU figures skipped: needs os.sched_setaffinity and two CPUs)", flush=True)
        return []
    f, sample = _job_f(args)
    rng = np.random.default_rng(3)
    jobs = [sample(rng) for _ in range(args.jobs)]
    schemes = _job_schemes()
    cpus = os.sched_getaffinity(0)
    lat, flat = defaultdict(list), defaultdict(list)
    try:
        for r in range(2 * ROUNDS):
            where = "all threads on one CPU" if r % 2 == 0 else "threads on any CPU"
            os.sched_setaffinity(0, {min(cpus)} if r % 2 == 0 else cpus)
            with LocalExecutor(blas_threads=1) as ex:
                for _, code, wf in schemes:
                    for j in range(WARM_JOBS if r < 2 else 3):
                        gencc.run(f, jobs[j % len(jobs)], code, ex, wait_for=wf)
                for X in jobs[r // 2::ROUNDS]:
                    for sname, code, wf in schemes:
                        t = time.perf_counter()
                        gencc.run(f, X, code, ex, wait_for=wf)
                        lat[sname, where].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    f(X)
                    flat[where].append(time.perf_counter() - t)
    finally:
        os.sched_setaffinity(0, cpus)
    figs = []
    for sname, _, _ in schemes:
        one, anyc = median(lat[sname, "all threads on one CPU"]), median(lat[sname, "threads on any CPU"])
        what = f"per-job latency, {sname} ({args.f}, K={K}), default executor, BLAS 1 thread"
        figs.append(Figure(SUITE, f"{what}, all threads on one CPU", 1e3 * one,
                           1e3 * median(flat["all threads on one CPU"]), "f(X) called directly, same CPU"))
        figs.append(Figure(SUITE, f"{what}, threads on any CPU", 1e3 * anyc, 1e3 * one,
                           "the same job with all threads on one CPU"))
    return figs


STREAM_JOBS = 150  # jobs per timed stretch of the stream figures
STREAM_IN_FLIGHT = (1, 2, 4)


def _stream_times(f, jobs: list[np.ndarray]) -> dict:
    """Seconds per job, each a median over ROUNDS alternated stretches over `jobs`: "run" (gencc.run one after
    another), "f" (f on each job's coded inputs) and each max_in_flight of gencc.stream (default executor)."""
    code = gencc.GCC(K, N)
    coded = [code.encode(X[gencc.order_inputs(X)]) for X in jobs]
    variants = {"run": lambda: [gencc.run(f, X, code, ex, wait_for=WAIT_FOR) for X in jobs],
                "f": lambda: [f(Z) for Z in coded]}
    for m in STREAM_IN_FLIGHT:
        variants[m] = lambda m=m: list(gencc.stream(f, jobs, code, ex, max_in_flight=m, wait_for=WAIT_FOR))
    per = defaultdict(list)
    with LocalExecutor() as ex:
        for X in jobs * 3:  # threads started, every straggler pattern's decoder built
            gencc.run(f, X, code, ex, wait_for=WAIT_FOR)
        for _ in range(ROUNDS):
            for name, go in variants.items():
                t = time.perf_counter()
                go()
                per[name].append((time.perf_counter() - t) / len(jobs))
    return {name: median(v) for name, v in per.items()}


def streams(args: argparse.Namespace) -> list[Figure]:
    """Time per job of `gencc.stream` at several jobs in flight vs the same jobs through `gencc.run` one after
    another, on the default executor, for the MLP (a cheap f that holds the GIL) and the digits CNN (torch:
    releases it); for the CNN also vs f on each job's N coded inputs, one call per job."""
    figs = []
    for fname, got in (("mlp", _mlp()), ("digits-cnn", _cnn())):
        if got is None:
            continue
        f, sample = got
        rng = np.random.default_rng(6)
        per = _stream_times(f, [sample(rng) for _ in range(STREAM_JOBS)])
        name = f"time per job, gencc.stream, {fname}, GCC, N={N}, first {WAIT_FOR}, default executor"
        for m in STREAM_IN_FLIGHT:
            figs.append(Figure(SUITE, f"{name}, max_in_flight={m}", 1e3 * per[m], 1e3 * per["run"],
                               "gencc.run, one job after another"))
        if fname == "digits-cnn":
            m = STREAM_IN_FLIGHT[-1]
            figs.append(Figure(SUITE, f"{name}, max_in_flight={m}, vs f", 1e3 * per[m], 1e3 * per["f"],
                               f"f on each job's {N} coded inputs, one call per job"))
    return figs


STDLIB_BLOCK = 25  # jobs per block of the side-by-side stdlib figures (blocks of each kind alternate)
STDLIB_ROUNDS = 80  # the host's wake-up latency drifts over seconds: a longer run is a steadier median


def _identity_like(batched: bool):
    """f = X * 2, per input (X one input) or batched (X a stack of inputs)."""
    def double(X: np.ndarray) -> np.ndarray:
        return np.asarray(X) * 2.0

    double.batched = batched  # type: ignore[attr-defined]
    return double


def vs_stdlib(args: argparse.Namespace) -> list[Figure]:
    """gencc.run on the default executor vs `HandRolledJob` (a ThreadPoolExecutor job), GCC K = 8, N = 12, first
    10, an identity-like f: STDLIB_ROUNDS rounds in this one process, each a block of STDLIB_BLOCK jobs of each
    kind, their order rotated from round to round (no kind always runs right after the same other), the cyclic
    garbage collected before each block (so no block pays for what another left) and BLAS at one thread
    throughout (both sides alike: the per-input executor's pool caps it anyway once it starts). Each ms figure
    is the median over rounds of its block's time per job; each ratio figure is the median over rounds of the
    gencc block's time over the hand-rolled block's in the same round (the load of a shared machine moves
    between rounds far more than within one). `MinimalJob` on the batched f runs in the same rounds: the floor of
    any runtime that hands a job's call of f to one thread (the same ordering, encode and decode around one
    hand-off), so the page shows how much of the batched figure is that floor and how much is gencc's."""
    import gc

    from threadpoolctl import threadpool_limits

    code = gencc.GCC(K, N)
    rng = np.random.default_rng(7)
    jobs = [rng.normal(size=(K, 64)) for _ in range(STDLIB_BLOCK)]
    plain, batched = _identity_like(False), _identity_like(True)
    hand, minimal = HandRolledJob(plain, code), MinimalJob(batched)
    exs = {"per-input f": LocalExecutor(), "batched f": LocalExecutor()}
    go = {"hand": lambda X: hand(X, WAIT_FOR),
          "per-input f": lambda X: gencc.run(plain, X, code, exs["per-input f"], wait_for=WAIT_FOR),
          "batched f": lambda X: gencc.run(batched, X, code, exs["batched f"], wait_for=WAIT_FOR),
          "minimal": lambda X: minimal(X, code, WAIT_FOR)}
    names = list(go)
    per: dict[str, list[float]] = defaultdict(list)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            for g in go.values():  # warm-up: threads started, every pattern's D_F cached
                for j in range(WARM_JOBS):
                    g(jobs[j % len(jobs)])
            for r in range(STDLIB_ROUNDS):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    g = go[name]
                    gc.collect()
                    t = time.perf_counter()
                    for X in jobs:
                        g(X)
                    per[name].append((time.perf_counter() - t) / len(jobs))
    finally:
        hand.close()
        minimal.close()
        for ex in exs.values():
            ex.close()
    what = f"GCC K={K}, N={N}, first {WAIT_FOR}"
    figs = [Figure(SUITE, f"per-job latency, {what}, hand-rolled stdlib job (ThreadPoolExecutor)",
                   1e3 * median(per["hand"]), 1e3 * median(per["hand"]), "itself")]
    for name in ("per-input f", "batched f"):
        figs.append(Figure(SUITE, f"per-job latency, {what}, gencc.run, {name}, default executor",
                           1e3 * median(per[name]), 1e3 * median(per["hand"]),
                           "a hand-rolled stdlib job (HandRolledJob, per-input f)"))
    for name, label in (("per-input f", "gencc.run, per-input f"), ("batched f", "gencc.run, batched f"),
                        ("minimal", "MinimalJob (one hand-off to one thread), batched f")):
        ratios = [a / b for a, b in zip(per[name], per["hand"], strict=True)]
        figs.append(Figure(SUITE, f"per-job latency over the hand-rolled job's in the same round, {what}, {label}, "
                                  f"median of {STDLIB_ROUNDS} rounds (range {min(ratios):.2f}-{max(ratios):.2f})",
                           median(ratios), 1.0, "equal to the hand-rolled job", unit="x"))
    ratios = [a / b for a, b in zip(per["batched f"], per["minimal"], strict=True)]
    figs.append(Figure(SUITE, f"per-job latency over MinimalJob's in the same round, {what}, gencc.run, batched f, "
                              f"median of {STDLIB_ROUNDS} rounds (range {min(ratios):.2f}-{max(ratios):.2f})",
                       median(ratios), 1.0, "equal to MinimalJob", unit="x"))
    return figs


PARTS = {"stdlib": vs_stdlib, "per-job": per_job, "one-cpu": one_cpu, "digits-cnn": cnn_batching, "stream": streams,
         "blas": blas_under_load, "tails": tails}


def run(args: argparse.Namespace) -> list[Figure]:
    return [fig for name, part in PARTS.items() if name in args.runtime_parts for fig in part(args)]
