"""`gencc run`: coded or baseline jobs on the digits CNN, on the local or the Ray backend, or on model replicas you
run (--upstream)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ..codes.schemes import SCHEME_SPECS, scheme_spec, schemes
from ..faults import Bimodal
from ..workloads import WORKLOADS
from .isolate import rerun_isolated
from .options import (
    CODED as CODED_PANEL,
)
from .options import (
    JOBS,
    MODEL,
    PLACEMENT_OPTIONS,
    SCHEME,
    SLOW,
    SLOW_FACTOR,
    WORKERS,
    ServiceMs,
    ShowProgress,
    SlowFactor,
    WorkerCpus,
    WorkerPlacement,
    WorkerResource,
    check_backend,
    check_ray_address,
    code_options,
    integer,
    not_used,
    number,
    placement_options,
    refuse,
    reported,
    upstream_urls,
)
from .options import given as given_options
from .options import seed as check_seed

log = logging.getLogger(__name__)

#: the schemes jobs take, from the one scheme table (`gencc.codes.schemes`): the baselines (replication here is the
#: Replicated baseline) and the coded schemes
RUN_SCHEMES = schemes("jobs")
CODED = tuple(name for name in RUN_SCHEMES if SCHEME_SPECS[name].coded)
#: the option of `gencc run` each parameter of a job's stop rule comes from
_STOP_OPTIONS = {"wait_for": "--wait-for", "deadline": "--deadline-ms"}
#: held-out inputs of the digits-cnn workload (scikit-learn's 1,797 digits, 20% held out), the most one job takes;
#: a constant so that --K is checked before the model loads (tests/cli/test_run.py keeps it true)
DIGITS_TEST_INPUTS = 360
#: the most workers `gencc run` starts (one thread or Ray actor each)
MAX_WORKERS = 1024


def injected_latency(service_ms: float, slow_fraction: float, slow_factor: float) -> Bimodal | None:
    """The per-task latency of --service-ms, --slow-task-fraction and --slow-factor: each task takes `service_ms`,
    a `slow_fraction` of them (drawn independently) `slow_factor` times longer; None when nothing is injected."""
    if service_ms == 0:
        return None
    return Bimodal(p=slow_fraction, factor=slow_factor, base=service_ms / 1e3)


def run_command(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option(metavar="local|ray", help="local (threads) or ray (actors on 127.0.0.1 or "
                                                                   "--address)", rich_help_panel=WORKERS)] = "local",
    scheme: Annotated[str, typer.Option(metavar="NAME", help=f"{', '.join(RUN_SCHEMES)} (parm: k=2, the trained "
                                                             "parity model)", rich_help_panel=SCHEME)] = "gcc",
    K: Annotated[int, typer.Option("--K", metavar="K", help="inputs per job", callback=integer(at_least=1),  # noqa: N803
                                   rich_help_panel=SCHEME)] = 8,
    workers: Annotated[int, typer.Option("--workers", metavar="N", help="workers N, the same for every scheme "
                                         "(uncoded uses K of them, parm its K + ceil(K/2))",
                                         callback=integer(at_least=1), rich_help_panel=WORKERS)] = 16,
    wait_for: Annotated[int | None, typer.Option(metavar="N", help="coded: stop at the first this many results "
                                                 "(default: halfway from K to N)", callback=integer(at_least=1),
                                                 rich_help_panel=CODED_PANEL)] = None,
    deadline_ms: Annotated[float | None, typer.Option(metavar="MS", help="coded: stop this many ms after dispatch",
                                                      callback=number(above=0), rich_help_panel=CODED_PANEL)] = None,
    service_ms: ServiceMs = 0.0,
    slow_task_fraction: Annotated[float, typer.Option(
        metavar="P", help="stragglers: the fraction of tasks that are slow, each drawn on its own, in [0, 1)",
        callback=number(at_least=0), rich_help_panel=SLOW)] = 0.0,
    slow_factor: SlowFactor = None,
    jobs: Annotated[int, typer.Option(metavar="N", help="jobs to run", callback=integer(at_least=1),
                                      rich_help_panel=JOBS)] = 100,
    in_flight: Annotated[int, typer.Option(metavar="N", help="jobs in flight at once", callback=integer(at_least=1),
                                           rich_help_panel=JOBS)] = 1,
    hedge_delay_ms: Annotated[float | None, typer.Option(metavar="MS", help="hedged: send the second copy after this "
                                                         "many ms (default: p95 of the injected latency)",
                                                         callback=number(at_least=0), rich_help_panel=SCHEME)] = None,
    actors: Annotated[int | None, typer.Option(metavar="N", help="ray: actors (default one per worker)",
                                               callback=integer(at_least=1), rich_help_panel=WORKERS)] = None,
    address: Annotated[str | None, typer.Option(metavar="ADDRESS", help="ray: an existing cluster's address",
                                                rich_help_panel=WORKERS)] = None,
    worker_placement: WorkerPlacement = None,
    worker_cpus: WorkerCpus = None,
    worker_resource: WorkerResource = None,
    isolate: Annotated[bool, typer.Option(help="ray without --address: run in a loopback-only network "
                                          "namespace (unshare -n)",
                                          rich_help_panel=WORKERS)] = True,
    seed: Annotated[int, typer.Option(metavar="INT", help="seeds the inputs and the injected latency",
                                      callback=check_seed, rich_help_panel=JOBS)] = 0,
    progress: ShowProgress = True,
    workload: Annotated[str | None, typer.Option(metavar="NAME", help=f"a gencc workload: {', '.join(WORKLOADS)} "
                                                 "(default digits-cnn), or --model", rich_help_panel=MODEL)] = None,
    model: Annotated[str | None, typer.Option(metavar="SPEC", help="your model instead of a workload: an import "
                                              "path package.module:attr or a .pt2 / TorchScript file",
                                              rich_help_panel=MODEL)] = None,
    upstream: Annotated[list[str] | None, typer.Option(
        "--upstream", metavar="URL", show_default=False, rich_help_panel=MODEL,
        help="a model replica you run, by its URL http://HOST:PORT/v2/models/NAME (repeatable): one worker "
             "each, instead of a workload")] = None,
    upstreams: Annotated[Path | None, typer.Option(
        "--upstreams", metavar="FILE", show_default=False, rich_help_panel=MODEL,
        help="a file of --upstream URLs, one a line (# comments)")] = None,
    input_shape: Annotated[str | None, typer.Option(metavar="SHAPE", help="--model: the shape of one input, e.g. "
                                                    "1,8,8 (default: read from --data)", rich_help_panel=MODEL)] = None,
    data: Annotated[Path | None, typer.Option(metavar="FILE", help="--model or --upstream: inputs to run (.npy / "
                                              ".npz; default: standard normal inputs of --input-shape)",
                                              rich_help_panel=MODEL)
                    ] = None,
    parity: Annotated[Path | None, typer.Option(metavar="FILE", help="--model with --scheme parm: the parity model "
                                                "from `gencc parity train --K 2`", rich_help_panel=MODEL)] = None,
    opt: Annotated[list[str] | None, typer.Option("--opt", help="code option of the coded --scheme, repeatable "
                                                  "(e.g. gcc.lam_dec=0.01), as in gencc sweep",
                                                  rich_help_panel=CODED_PANEL)] = None,
) -> None:
    """Run jobs of K inputs of a workload (default: digits through the CNN) or of your --model with a coded
    scheme or a baseline; print latency percentiles and accuracy (agreement with f, accuracy on the labels). With
    --backend ray and no --address, the command re-runs itself inside a loopback-only network namespace and
    starts a private Ray there (127.0.0.1 only)."""
    given = given_options(ctx)
    deadline = None if deadline_ms is None else deadline_ms / 1e3  # the library takes seconds
    hedge_delay = None if hedge_delay_ms is None else hedge_delay_ms / 1e3
    not_beside = {"--workload": workload, "--model": model, "--input-shape": input_shape, "--parity": parity,
                  "--backend": None if backend == "local" else backend}
    urls = upstream_urls(upstream, upstreams, not_beside, workers if "workers" in given else None)
    if urls:  # model replicas you run: one worker each, holding the model; --data gives the inputs
        _upstream_scheme("--upstream" if upstream else "--upstreams", scheme, hedge_delay is None and service_ms == 0)
        workers = len(urls)
    if model is None and not urls:
        for option, value in (("--input-shape", input_shape), ("--data", data), ("--parity", parity)):
            if value is not None:
                raise refuse(option, f"{option} goes with --model (your own model)")
    elif workload is not None:
        raise refuse("--workload", "give --workload (a gencc workload) or --model (your own model), not both")
    elif scheme != "parm" and parity is not None:
        raise refuse("--parity", f"--parity applies to --scheme parm, not {scheme}")
    workload = workload or ("digits-cnn" if model is None and not urls else None)
    if slow_task_fraction >= 1:
        raise refuse("--slow-task-fraction", f"must be a finite number >= 0 and < 1, got {slow_task_fraction:g}")
    if slow_task_fraction > 0 and service_ms == 0:
        raise refuse("--slow-task-fraction", "a slow task is --slow-factor times slower than --service-ms: give "
                                             "--service-ms MS > 0 with it")
    if slow_factor is not None and slow_task_fraction == 0:
        raise refuse("--slow-factor", "--slow-factor applies with --slow-task-fraction > 0 (without it no task is "
                                      "ever slow)")
    slow_factor = SLOW_FACTOR if slow_factor is None else slow_factor
    backend = check_backend(backend)
    try:
        scheme_spec(scheme, "jobs")
    except ValueError as e:
        raise reported(e, {}, "--scheme") from None
    if workload is not None:
        _check_workload(workload, scheme)
    lat_model = injected_latency(service_ms, slow_task_fraction, slow_factor)
    opts = code_options(opt or [], (scheme,), "jobs").get(scheme, {})
    code, wait_for = _checked_options(backend, scheme, K, workers, wait_for, deadline, hedge_delay, actors, address,
                                      own=workload != "digits-cnn", opts=opts, given=given)
    where = placement_options(backend, worker_placement, worker_cpus, worker_resource)
    if scheme == "hedged" and hedge_delay is None and lat_model is None:
        raise refuse("--hedge-delay-ms", "--scheme hedged sends a second copy after --hedge-delay-ms: give it, or "
                                      "inject latency (--service-ms, --slow-task-fraction) to hedge at its p95")
    user = _user_model(model, input_shape, data, parity, scheme, K, jobs, seed) if model is not None else None
    if urls:  # the fleet checked before any work (exit 2 naming the option)
        fleet, user = _upstream_job(urls, "--upstream" if upstream else "--upstreams", scheme, data, K, jobs, seed)
    from rich.console import Console
    from rich.progress import Progress, track

    from ..codes.registry import make_code
    from ..runtime import metrics
    from ..runtime.job import stream
    from ..runtime.local import LocalExecutor
    from ..runtime.ray import RayExecutor
    from ..runtime.remote import RemoteExecutor
    from ..workloads import load, load_parity

    console = Console()
    if backend == "ray" and address is None and isolate:
        rerun_isolated(ctx, "running")
    log.info("run: %s on %s, K=%d, N=%d, %d jobs", scheme, backend, code.K, code.N, jobs)
    coded = scheme in CODED
    if user is None:
        if scheme == "parm":
            code = make_code(scheme, K, None, parity=load_parity(workload, 2, progress=progress))
        w: Any = load(workload, progress=progress)
        if K > len(w.X_test):
            raise refuse("--K", f"a job takes K distinct held-out inputs of {workload}, of which there are "
                                f"{len(w.X_test)}; got K={K}")
        rng = np.random.default_rng(seed)
        batches = [w.sample(K, rng) for _ in range(jobs)]
    else:
        w, batches, parity_fn = user
        if scheme == "parm":
            code = make_code(scheme, K, None, parity=parity_fn)
    fn = w.f if user is None else w
    if backend == "ray":
        n = actors or code.N
        console.print(f"starting {n} Ray actors, each building {workload if user is None else w.name}"
                      + (f" on {address}" if address else ""))
        with Progress(console=console, disable=not progress) as bar:
            task = bar.add_task("Ray actors ready", total=n)
            ex = RayExecutor(factory=w.factory, num_actors=actors, address=address, **where,
                             on_ready=lambda ready, total: bar.update(task, completed=ready))
            try:
                ex.start(None, code.N)
            except ValueError as e:  # no node offers what --worker-cpus / --worker-resource ask for
                if getattr(e, "field", None) not in PLACEMENT_OPTIONS:
                    raise
                raise reported(e, PLACEMENT_OPTIONS, "--worker-resource") from None
        f = None
    elif urls:
        ex, f = RemoteExecutor(fleet), None
    else:
        ex, f = LocalExecutor(), fn
    kwargs = {"wait_for": wait_for, "deadline": deadline} if coded else {}
    where = f"{len(urls)} upstreams" if urls else backend
    classifier = user is not None or w.classifier
    lat, agr, acc, acc_f = [], [], [], []
    try:
        results = stream(f, (X for X, _ in batches), code, ex, max_in_flight=in_flight, seed=seed,
                         latency=lat_model, **kwargs)
        for (X, y), r in zip(batches, track(results, total=jobs, description=f"{scheme} on {where}",
                                             disable=not progress, console=console), strict=True):
            Y = fn(X)
            lat.append(r.latency)
            agr.append(metrics.agreement(r.outputs, Y) if classifier else metrics.rel_mse(r.outputs, Y))
            if y is not None:
                acc.append(float(np.mean(np.argmax(r.outputs, axis=1) == y)))
                acc_f.append(float(np.mean(np.argmax(Y, axis=1) == y)))
    finally:
        ex.close()
    a = np.array(lat) * 1e3
    injected = (f"{service_ms:g} ms per task, {slow_task_fraction:g} of them x{slow_factor:g}" if lat_model else
                "no injected latency")
    used = f"N={code.N}" + (f" of {workers}" if code.N != workers else "")
    label = f" ({', '.join(f'{k}={v}' for k, v in opts.items())})" if opts else ""
    console.print(f"{workload or w.name}: {scheme}{label} on {where}: K={code.K}, {used}, {jobs} jobs, {injected}"
                  + (f", wait for {wait_for} results" if coded and wait_for is not None else "")
                  + (f", deadline {deadline_ms:g} ms" if coded and deadline_ms is not None else ""))
    console.print(f"latency ms: p50 {np.percentile(a, 50):.2f}  p90 {np.percentile(a, 90):.2f}  "
                  f"p99 {np.percentile(a, 99):.2f}  p99.9 {np.percentile(a, 99.9):.2f}  max {a.max():.2f}")
    labels = f"   accuracy: {np.mean(acc):.3f} (f itself: {np.mean(acc_f):.3f})" if acc else ""
    console.print(f"agreement with f: {np.mean(agr):.3f}{labels}" if classifier else
                  f"rel_mse against f: {np.mean(agr):.3g} (0: exact)")


def _check_workload(workload: str, scheme: str) -> None:
    """--workload: a gencc workload, and a trained one (with a parity model) for --scheme parm; before it loads."""
    from ..workloads import workload_spec

    try:
        spec = workload_spec(workload)
    except ValueError as e:
        raise refuse("--workload", str(e)) from None
    if scheme == "parm" and not spec.trained:
        trained = ", ".join(n for n, s in WORKLOADS.items() if s.trained)
        raise refuse("--scheme", f"--scheme parm runs a trained parity model, which the trained workloads have "
                                 f"({trained}), not {workload}")


def _user_model(spec: str, input_shape: str | None, data: Path | None, parity: Path | None, scheme: str, K: int,
                jobs: int, seed: int) -> tuple[Any, list, Any]:  # noqa: N803
    """(the model, `jobs` batches of K inputs with no labels, the parity model or None) of --model."""
    from .model import load_cli_model

    m, X = load_cli_model(spec, input_shape, data)
    rng = np.random.default_rng(seed)
    if X is None:
        X = rng.standard_normal((max(K, 256), *m.in_shape))
    if K > len(X):
        raise refuse("--K", f"a job takes K distinct inputs of --data, which holds {len(X)}; got K={K}")
    parity_fn = None
    if scheme == "parm":
        if parity is None:
            raise refuse("--parity", f"--scheme parm runs a parity model: train one with `gencc parity train --model "
                                     f"{spec} --data FILE --K 2 --out parity.pt`, then pass --parity parity.pt")
        from ..workloads.parity_training import load_parity_file

        try:
            parity_fn = load_parity_file(parity, m, k=2)
        except ValueError as e:
            raise refuse("--parity", str(e)) from None
    batches = [(X[rng.choice(len(X), size=K, replace=False)], None) for _ in range(jobs)]
    return m, batches, parity_fn


def _upstream_scheme(option: str, scheme: str, no_hedge_delay: bool) -> None:
    """What a job over replicas cannot run, refused before the fleet is contacted: a parity scheme (the replicas
    hold no parity model), and hedged without --hedge-delay-ms (there is no injected latency to take its p95 from)."""
    spec = SCHEME_SPECS.get(scheme)
    if spec is not None and spec.parity:
        raise refuse("--scheme", f"{scheme}'s coded workers run a trained parity model, which the replicas do not "
                                 f"hold; over {option} choose {', '.join(s for s in RUN_SCHEMES if s != scheme)}")
    if scheme == "hedged" and no_hedge_delay:
        raise refuse("--hedge-delay-ms", f"--scheme hedged over {option} needs --hedge-delay-ms: the replicas' latency "
                                      "is their own, there is no injected latency to take its p95 from")


class _Replica:
    """f of a job over upstreams, to compare its outputs with: the first replica that answers, asked directly."""

    def __init__(self, fleet: Any):
        from ..engine.remote import FleetCall

        self.name = fleet.upstreams[0].name
        self.calls = [FleetCall(fleet.urls, fleet.signature, i) for i in range(len(fleet.urls))]

    def __call__(self, X: Any) -> np.ndarray:
        for i, call in enumerate(self.calls):
            try:
                return call(X)
            except Exception:  # noqa: BLE001 - a replica that failed: ask the next one
                if i == len(self.calls) - 1:
                    raise
        raise RuntimeError("no replica")  # unreachable: the fleet has at least one


def _upstream_job(urls: tuple[str, ...], option: str, scheme: str, data: Path | None, K: int, jobs: int,  # noqa: N803
                  seed: int) -> tuple[Any, tuple[Any, list, None]]:
    """(the fleet, (f: a replica's own answer, `jobs` batches of K inputs of --data with no labels, None)) of
    --upstream: every replica's metadata read and compared (`gencc.engine.remote.check_fleet`) and the scheme
    checked against the input datatype before any work, else the usage error naming the option."""
    from ..engine.remote import check_fleet
    from ..model import load_inputs
    from ..serving.upstreams import check_codable

    try:
        fleet = check_fleet(urls)
        check_codable(fleet, scheme)
    except ValueError as e:
        raise reported(e, {"scheme": "--scheme"}, option) from None
    rng = np.random.default_rng(seed)
    if data is not None:
        try:
            X = load_inputs(data, fleet.in_shape)
        except ValueError as e:
            raise refuse("--data", str(e)) from None
    elif fleet.codable:
        X = rng.standard_normal((max(K, 256), *fleet.in_shape))
    else:
        t = fleet.signature.input
        raise refuse("--data", f"the replicas' input {t.name} is {t.datatype}: give its inputs with --data FILE")
    if K > len(X):
        raise refuse("--K", f"a job takes K distinct inputs of --data, which holds {len(X)}; got K={K}")
    return fleet, (_Replica(fleet), [(X[rng.choice(len(X), size=K, replace=False)], None) for _ in range(jobs)], None)


def default_wait_for(K: int, N: int, min_results: int = 1) -> int:  # noqa: N803
    """`gencc run`'s default stop: halfway from K results to all N (12 for K=8, N=16; 6 for K=4, N=8)."""
    return min(N, max(min_results, 1, (K + N + 1) // 2))


def _builds(scheme: str, K: int, N: int) -> bool:  # noqa: N803
    """Whether the code of `scheme` builds for K inputs on N workers with its default options."""
    from ..codes.registry import make_code

    try:
        make_code(scheme, K, N)
    except ValueError:
        return False
    return True


def _checked_options(backend: str, scheme: str, K: int, N: int, wait_for: int | None,  # noqa: N803
                     deadline: float | None, hedge_delay: float | None, actors: int | None,
                     address: str | None, own: bool = False, opts: dict | None = None,
                     given: set[str] | None = None) -> tuple[Any, int | None]:
    """Every check of `gencc run`'s options that needs no model: (code, wait_for), else the usage error naming
    the option. Every scheme gets the same N workers; one that cannot use them all says so. The code of
    --scheme parm is built here without its parity model. `opts`: the coded scheme's options (--opt); `given`:
    the parameters the user gave (a warning about --workers only when it was given; None: any)."""
    from ..codes.registry import make_code
    from ..runtime.baselines import Hedged, Replicated, Uncoded

    for option, value in (("--address", address), ("--actors", actors)):
        if value is not None and backend != "ray":
            raise refuse(option, f"{option} needs --backend ray (the local backend runs its workers in this process)")
    if N > MAX_WORKERS:
        raise refuse("--workers", f"must be an integer <= {MAX_WORKERS} (one thread or Ray actor each), got {N}")
    if K > DIGITS_TEST_INPUTS and not own:
        raise refuse("--K", f"a job takes K distinct held-out digits, of which there are {DIGITS_TEST_INPUTS}; "
                            f"got K={K}")
    if address is not None:
        check_ray_address("--address", address)
    coded = scheme in CODED
    if hedge_delay is not None and scheme != "hedged":
        raise refuse("--hedge-delay-ms", f"--hedge-delay-ms applies to --scheme hedged, not {scheme}")
    if K > N:
        raise refuse("--workers", f"need at least as many workers as inputs: N={N} < K={K}")
    opts = opts or {}
    try:
        if scheme == "parm":
            code = make_code(scheme, K, None)
            if code.N != N and (given is None or "workers" in given):
                not_used("--workers", scheme, f"ParM with K={K} and k=2 runs on its own N={code.N} workers")
        elif coded:
            code = make_code(scheme, K, N, **opts)
        else:
            code = {"replication": lambda: Replicated(K, N), "hedged": lambda: Hedged(K, N, hedge_delay),
                    "uncoded": lambda: Uncoded(K)}[scheme]()
            if scheme == "uncoded" and N > K and (given is None or "workers" in given):
                not_used("--workers", scheme, f"a job sends its K={K} inputs to K of the N={N} workers, one each")
    except ValueError as e:  # with --opt, the option's error when the code builds without them
        raise refuse("--opt" if opts and _builds(scheme, K, N) else "--workers", str(e)) from None
    if actors is not None and actors > code.N:
        raise refuse("--actors", f"--actors {actors} exceeds the {code.N} workers of {scheme} (K={K}, N={code.N})")
    from ..runtime.job import check_stop

    try:
        wait_for = check_stop(code, wait_for, deadline)
    except ValueError as e:
        raise reported(e, _STOP_OPTIONS, "--wait-for") from None
    if coded and wait_for is None:
        wait_for = default_wait_for(code.K, code.N, max(code.min_results, 1))
    return code, wait_for
