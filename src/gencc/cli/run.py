"""`gencc run`: coded or baseline jobs on the digits CNN, on the local or the Ray backend."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ..codes.schemes import SCHEME_SPECS, scheme_spec, schemes
from ..faults import Bimodal
from .isolate import rerun_isolated
from .options import check_backend, check_ray_address, code_options, integer, not_used, number, refuse, reported
from .options import seed as check_seed

log = logging.getLogger(__name__)

#: the schemes jobs take, from the one scheme table (`gencc.codes.schemes`): the baselines (replication here is the
#: Replicated baseline) and the coded schemes
RUN_SCHEMES = schemes("jobs")
CODED = tuple(name for name in RUN_SCHEMES if SCHEME_SPECS[name].coded)
#: the option of `gencc run` each parameter of a job's stop rule comes from
_STOP_OPTIONS = {"wait_for": "--wait-for", "deadline": "--deadline"}
#: held-out inputs of the digits-cnn workload (scikit-learn's 1,797 digits, 20% held out), the most one job takes;
#: a constant so that --K is checked before the model loads (tests/cli/test_run.py keeps it true)
DIGITS_TEST_INPUTS = 360
#: the most workers `gencc run` starts (one thread or Ray actor each)
MAX_WORKERS = 1024
#: `gencc run`'s injected slowness by default: 5 ms per task, 5% of tasks 10 times slower
SERVICE_MS, SLOW_FRACTION, SLOW_FACTOR = 5.0, 0.05, 10.0


def injected_latency(service_ms: float, slow_fraction: float, slow_factor: float) -> Bimodal | None:
    """The per-task latency of --service-ms, --slow-fraction and --slow-factor: each task takes `service_ms`, a
    `slow_fraction` of them (drawn independently) `slow_factor` times longer; None when nothing is injected."""
    if service_ms == 0:
        return None
    return Bimodal(p=slow_fraction, factor=slow_factor, base=service_ms / 1e3)


def run_command(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option(help="local (threads) or ray (actors on 127.0.0.1 or --address)")] = "local",
    scheme: Annotated[str, typer.Option(help=f"{', '.join(RUN_SCHEMES)} (parm: k=2, the trained parity model)")
                      ] = "gcc",
    K: Annotated[int, typer.Option("--K", help="inputs per job", callback=integer(at_least=1))] = 8,  # noqa: N803
    workers: Annotated[int, typer.Option("--workers", "--N", help="workers N, the same for every scheme (uncoded "
                                                                  "uses K of them, parm its K + ceil(K/2))",
                                         callback=integer(at_least=1))] = 16,
    wait_for: Annotated[int | None, typer.Option(help="coded: stop at the first this many results "
                                                      "(default: halfway from K to N)", callback=integer(at_least=1))
                        ] = None,
    deadline: Annotated[float | None, typer.Option(help="coded: stop this many seconds after dispatch",
                                                   callback=number(above=0))] = None,
    service_ms: Annotated[float, typer.Option(help="injected service time per task, ms (0: none)",
                                              callback=number(at_least=0))] = SERVICE_MS,
    slow_fraction: Annotated[float, typer.Option(help="stragglers: fraction of tasks slow, in [0, 1)",
                                                 callback=number(at_least=0))] = SLOW_FRACTION,
    slow_factor: Annotated[float, typer.Option(help="stragglers: slowdown of a slow task (>= 1)",
                                               callback=number(at_least=1))] = SLOW_FACTOR,
    jobs: Annotated[int, typer.Option(help="jobs to run", callback=integer(at_least=1))] = 100,
    in_flight: Annotated[int, typer.Option(help="jobs in flight at once", callback=integer(at_least=1))] = 1,
    hedge_delay: Annotated[float | None, typer.Option(help="hedged: seconds (default: p95 of the injected "
                                                           "latency)", callback=number(at_least=0))] = None,
    actors: Annotated[int | None, typer.Option(help="ray: actors (default one per worker)",
                                               callback=integer(at_least=1))] = None,
    address: Annotated[str | None, typer.Option(help="ray: an existing cluster's address")] = None,
    isolate: Annotated[bool, typer.Option(help="ray without --address: run inside a loopback-only network "
                                               "namespace (unshare -n, or -rn as an ordinary user)")] = True,
    seed: Annotated[int, typer.Option(help="seeds the inputs and the injected latency", callback=check_seed)] = 0,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    model: Annotated[str | None, typer.Option(help="your model instead of the digits CNN: an import path "
                                                   "package.module:attr or a .pt2 / TorchScript file")] = None,
    input_shape: Annotated[str | None, typer.Option(help="--model: the shape of one input, e.g. 1,8,8 (default: "
                                                         "read from --data)")] = None,
    data: Annotated[Path | None, typer.Option(help="--model: inputs to run (.npy / .npz; default: standard normal "
                                                   "inputs of --input-shape)")] = None,
    parity: Annotated[Path | None, typer.Option(help="--model with --scheme parm: the parity model from "
                                                     "`gencc parity train --K 2`")] = None,
    opt: Annotated[list[str] | None, typer.Option("--opt", help="code option scheme.key=value of the coded "
                                                                "--scheme, repeatable (e.g. gcc.lam_dec=0.01), as "
                                                                "in gencc sweep")] = None,
) -> None:
    """Run jobs of K digits through the CNN (or K inputs through your --model) with a coded scheme or a
    baseline; print latency percentiles and accuracy (agreement with f, accuracy on the labels). With --backend
    ray and no --address, the command re-runs itself inside a loopback-only network namespace and starts a
    private Ray there (127.0.0.1 only)."""
    if model is None:
        for option, value in (("--input-shape", input_shape), ("--data", data), ("--parity", parity)):
            if value is not None:
                raise refuse(option, f"{option} goes with --model (your own model)")
    elif scheme != "parm" and parity is not None:
        raise refuse("--parity", f"--parity applies to --scheme parm, not {scheme}")
    if slow_fraction >= 1:
        raise refuse("--slow-fraction", f"must be a finite number >= 0 and < 1, got {slow_fraction:g}")
    backend = check_backend(backend)
    try:
        scheme_spec(scheme, "jobs")
    except ValueError as e:
        raise reported(e, {}, "--scheme") from None
    lat_model = injected_latency(service_ms, slow_fraction, slow_factor)
    opts = code_options(opt or [], (scheme,), "jobs").get(scheme, {})
    code, wait_for = _checked_options(backend, scheme, K, workers, wait_for, deadline, hedge_delay, actors, address,
                                      own=model is not None, opts=opts)
    user = _user_model(model, input_shape, data, parity, scheme, K, jobs, seed) if model is not None else None
    from rich.console import Console
    from rich.progress import Progress, track

    from ..codes.registry import make_code
    from ..runtime import metrics
    from ..runtime.job import stream
    from ..runtime.local import LocalExecutor
    from ..runtime.ray import RayExecutor
    from ..workloads import load, load_parity

    console = Console()
    if backend == "ray" and address is None and isolate:
        rerun_isolated(ctx, "running")
    log.info("run: %s on %s, K=%d, N=%d, %d jobs", scheme, backend, code.K, code.N, jobs)
    coded = scheme in CODED
    if user is None:
        if scheme == "parm":
            code = make_code(scheme, K, None, parity=load_parity("digits-cnn", 2, progress=progress))
        w: Any = load("digits-cnn", progress=progress)
        rng = np.random.default_rng(seed)
        batches = [w.sample(K, rng) for _ in range(jobs)]
    else:
        w, batches, parity_fn = user
        if scheme == "parm":
            code = make_code(scheme, K, None, parity=parity_fn)
    fn = w.f if user is None else w
    if backend == "ray":
        n = actors or code.N
        console.print(f"starting {n} Ray actors, each building {'the CNN' if user is None else w.name}"
                      + (f" on {address}" if address else ""))
        with Progress(console=console, disable=not progress) as bar:
            task = bar.add_task("Ray actors ready", total=n)
            ex = RayExecutor(factory=w.factory, num_actors=actors, address=address,
                             on_ready=lambda ready, total: bar.update(task, completed=ready))
            ex.start(None, code.N)
        f = None
    else:
        ex, f = LocalExecutor(), fn
    kwargs = {"wait_for": wait_for, "deadline": deadline} if coded else {}
    lat, agr, acc, acc_f = [], [], [], []
    try:
        results = stream(f, (X for X, _ in batches), code, ex, max_in_flight=in_flight, seed=seed,
                         latency=lat_model, **kwargs)
        for (X, y), r in zip(batches, track(results, total=jobs, description=f"{scheme} on {backend}",
                                             disable=not progress, console=console), strict=True):
            Y = fn(X)
            lat.append(r.latency)
            agr.append(metrics.agreement(r.outputs, Y))
            if y is not None:
                acc.append(float(np.mean(np.argmax(r.outputs, axis=1) == y)))
                acc_f.append(float(np.mean(np.argmax(Y, axis=1) == y)))
    finally:
        ex.close()
    a = np.array(lat) * 1e3
    injected = (f"{service_ms:g} ms per task, {slow_fraction:g} of them x{slow_factor:g}" if lat_model else
                "no injected latency")
    used = f"N={code.N}" + (f" of {workers}" if code.N != workers else "")
    label = f" ({', '.join(f'{k}={v}' for k, v in opts.items())})" if opts else ""
    console.print(f"{scheme}{label} on {backend}: K={code.K}, {used}, {jobs} jobs, {injected}"
                  + (f", wait_for={wait_for}, deadline={deadline}" if coded else ""))
    console.print(f"latency ms: p50 {np.percentile(a, 50):.2f}  p90 {np.percentile(a, 90):.2f}  "
                  f"p99 {np.percentile(a, 99):.2f}  p99.9 {np.percentile(a, 99.9):.2f}  max {a.max():.2f}")
    labels = f"   accuracy: {np.mean(acc):.3f} (f itself: {np.mean(acc_f):.3f})" if acc else ""
    console.print(f"agreement with f: {np.mean(agr):.3f}{labels}")


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
                     address: str | None, own: bool = False, opts: dict | None = None) -> tuple[Any, int | None]:
    """Every check of `gencc run`'s options that needs no model: (code, wait_for), else the usage error naming
    the option. Every scheme gets the same N workers; one that cannot use them all says so. The code of
    --scheme parm is built here without its parity model. `opts`: the coded scheme's options (--opt)."""
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
        raise refuse("--hedge-delay", f"--hedge-delay applies to --scheme hedged, not {scheme}")
    if K > N:
        raise refuse("--workers", f"need at least as many workers as inputs: N={N} < K={K}")
    opts = opts or {}
    try:
        if scheme == "parm":
            code = make_code(scheme, K, None)
            if code.N != N:
                not_used("--workers", scheme, f"ParM with K={K} and k=2 runs on its own N={code.N} workers")
        elif coded:
            code = make_code(scheme, K, N, **opts)
        else:
            code = {"replication": lambda: Replicated(K, N), "hedged": lambda: Hedged(K, N, hedge_delay),
                    "uncoded": lambda: Uncoded(K)}[scheme]()
            if scheme == "uncoded" and N > K:
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
