"""`gencc run`: coded or baseline jobs on the digits CNN, on the local or the Ray backend."""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from .._cli_options import check_ray_address, number, refuse
from .._cli_options import seed as check_seed
from ..codes.registry import CODES
from ..faults import Bimodal, LatencyModel, Pareto, ShiftedExponential

log = logging.getLogger(__name__)

#: codes from the registry (lcc needs a polynomial f; "replication" here is the Replicated baseline)
CODED = tuple(name for name in CODES if name not in ("lcc", "replication"))
SCHEMES = (*CODED, "replication", "hedged", "uncoded")
#: held-out inputs of the digits-cnn workload (scikit-learn's 1,797 digits, 20% held out), the most one job takes;
#: a constant so that --K is checked before the model loads (tests/runtime/test_commands.py keeps it true)
DIGITS_TEST_INPUTS = 360
#: the most workers `gencc run` starts (one thread or Ray actor each)
MAX_WORKERS = 1024
LATENCIES = {
    "none": (None, {}),
    "bimodal": (Bimodal, {"p": 0.05, "factor": 10.0, "base": 0.005}),
    "shifted-exp": (ShiftedExponential, {"shift": 0.005, "rate": 200.0}),
    "pareto": (Pareto, {"x_m": 0.005, "a": 2.0}),
}


def parse_latency(spec: str) -> LatencyModel | None:
    """'none', 'bimodal', 'shifted-exp' or 'pareto', optionally with parameters: 'bimodal:p=0.1,base=0.01'."""
    name, _, params = spec.partition(":")
    if name not in LATENCIES:
        raise refuse("--latency", f"unknown latency model {name!r}; choose one of {', '.join(LATENCIES)}")
    cls, kw = LATENCIES[name]
    kw = dict(kw)
    for item in filter(None, params.split(",")):
        key, eq, val = item.partition("=")
        if not eq or key not in kw:
            raise refuse("--latency", f"{name} takes {', '.join(kw) or 'no parameters'}; got {item!r}")
        try:
            kw[key] = float(val)
        except ValueError:
            raise refuse("--latency", f"{key} must be a number, got {val!r}") from None
        if not math.isfinite(kw[key]):
            raise refuse("--latency", f"{key} must be a finite number, got {val!r}")
    if cls is None:
        return None
    try:
        return cls(**kw)
    except ValueError as e:
        raise refuse("--latency", str(e)) from None


def run_command(
    backend: Annotated[str, typer.Option(help="local (threads) or ray (actors on 127.0.0.1 or --address)")] = "local",
    scheme: Annotated[str, typer.Option(help=f"{', '.join(SCHEMES)} (parm: k=2, the trained parity model)")] = "gcc",
    K: Annotated[int, typer.Option("--K", min=1, help="inputs per job")] = 8,  # noqa: N803
    N: Annotated[int | None, typer.Option("--N", min=1, help="workers (default 16; uncoded runs K, parm "
                                                             "K + ceil(K/2))")] = None,  # noqa: N803
    wait_for: Annotated[int | None, typer.Option(min=1, help="coded: stop at the first this many results "
                                                             "(default: halfway from K to N)")] = None,
    deadline: Annotated[float | None, typer.Option(help="coded: stop this many seconds after dispatch",
                                                   callback=number(above=0))] = None,
    latency: Annotated[str, typer.Option(help="injected latency: none, bimodal, shifted-exp, pareto "
                                              "(parameters as bimodal:p=0.05,factor=10,base=0.005)")] = "bimodal",
    jobs: Annotated[int, typer.Option(min=1, help="jobs to run")] = 100,
    in_flight: Annotated[int, typer.Option(min=1, help="jobs in flight at once")] = 1,
    hedge_delay: Annotated[float | None, typer.Option(help="hedged: seconds (default: p95 of --latency)",
                                                      callback=number(at_least=0))] = None,
    actors: Annotated[int | None, typer.Option(min=1, help="ray: actors (default one per worker)")] = None,
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
                                                     "`gencc parity train --k 2`")] = None,
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
    lat_model, code, wait_for = _checked_options(backend, scheme, K, N, wait_for, deadline, latency, hedge_delay,
                                                 actors, address, own=model is not None)
    user = _user_model(model, input_shape, data, parity, scheme, K, jobs, seed) if model is not None else None
    from rich.console import Console
    from rich.progress import Progress, track

    from .. import metrics
    from ..codes.registry import make_code
    from ..workloads import load, load_parity
    from .job import stream
    from .local import LocalExecutor
    from .ray import RayExecutor

    console = Console()
    if backend == "ray" and address is None and isolate:
        _rerun_isolated(console, locals())
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
    console.print(f"{scheme} on {backend}: K={code.K}, N={code.N}, {jobs} jobs, latency {latency}"
                  + (f", wait_for={wait_for}, deadline={deadline}" if coded else ""))
    console.print(f"latency ms: p50 {np.percentile(a, 50):.2f}  p90 {np.percentile(a, 90):.2f}  "
                  f"p99 {np.percentile(a, 99):.2f}  p99.9 {np.percentile(a, 99.9):.2f}  max {a.max():.2f}")
    labels = f"   accuracy: {np.mean(acc):.3f} (f itself: {np.mean(acc_f):.3f})" if acc else ""
    console.print(f"agreement with f: {np.mean(agr):.3f}{labels}")


def _user_model(spec: str, input_shape: str | None, data: Path | None, parity: Path | None, scheme: str, K: int,
                jobs: int, seed: int) -> tuple[Any, list, Any]:  # noqa: N803
    """(the model, `jobs` batches of K inputs with no labels, the parity model or None) of --model."""
    from ..workloads.parity_commands import load_cli_model

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
                                     f"{spec} --data FILE --k 2 --out parity.pt`, then pass --parity parity.pt")
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


def _checked_options(backend: str, scheme: str, K: int, N: int | None, wait_for: int | None,  # noqa: N803
                     deadline: float | None, latency: str, hedge_delay: float | None, actors: int | None,
                     address: str | None, own: bool = False) -> tuple[LatencyModel | None, Any, int | None]:
    """Every check of `gencc run`'s options that needs no model: (latency model, code, wait_for), else the
    usage error naming the option. The code of --scheme parm is built here without its parity model."""
    from ..codes.registry import make_code
    from .baselines import Hedged, Replicated, Uncoded

    if backend not in ("local", "ray"):
        raise refuse("--backend", f"backend must be local or ray, got {backend!r}")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise refuse("--backend", "--backend ray needs Ray, which is not installed: pip install 'gencc[ray]'")
    if scheme not in SCHEMES:
        raise refuse("--scheme", f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    for option, value in (("--address", address), ("--actors", actors)):
        if backend == "local" and value is not None:
            raise refuse(option, f"{option} needs --backend ray (the local backend runs its workers in this process)")
    if N is not None and N > MAX_WORKERS:
        raise refuse("--N", f"at most {MAX_WORKERS} workers (threads or Ray actors), got {N}")
    if K > DIGITS_TEST_INPUTS and not own:
        raise refuse("--K", f"a job takes K distinct held-out digits, of which there are {DIGITS_TEST_INPUTS}; "
                            f"got K={K}")
    if address is not None:
        check_ray_address("--address", address)
    coded = scheme in CODED
    if not coded:
        for option, value in (("--wait-for", wait_for), ("--deadline", deadline)):
            if value is not None:
                raise refuse(option, f"{option} applies to the coded schemes ({', '.join(CODED)}); {scheme} "
                                      "has its own stop rule (the first answer per input)")
    if hedge_delay is not None and scheme != "hedged":
        raise refuse("--hedge-delay", f"--hedge-delay applies to --scheme hedged, not {scheme}")
    if N is not None and scheme == "uncoded":
        raise refuse("--N", "--N does not apply to --scheme uncoded (it runs K workers, one per input)")
    model = parse_latency(latency)
    try:
        if scheme == "parm":
            code = make_code(scheme, K, N)
        elif coded:
            code = make_code(scheme, K, 16 if N is None else N)
        else:
            n = 16 if N is None else N
            code = {"replication": lambda: Replicated(K, n), "hedged": lambda: Hedged(K, n, hedge_delay),
                    "uncoded": lambda: Uncoded(K)}[scheme]()
    except ValueError as e:
        raise refuse("--N" if N is not None else "--K", str(e)) from None
    if actors is not None and actors > code.N:
        raise refuse("--actors", f"--actors {actors} exceeds the {code.N} workers of {scheme} (K={K}, N={code.N})")
    if coded:
        lo = max(code.min_results, 1)
        if wait_for is None:
            wait_for = default_wait_for(code.K, code.N, lo)
        elif not lo <= wait_for <= code.N:
            raise refuse("--wait-for", f"must lie in [{lo}, N={code.N}] ({scheme} decodes from at least {lo} "
                                       f"results and runs {code.N} workers), got {wait_for}")
    return model, code, wait_for


def _rerun_isolated(console: Any, params: dict[str, Any]) -> None:
    """Run this same command again inside a loopback-only network namespace, then exit with its status."""
    from ..testing.isolation import can_unshare, in_loopback_namespace, run_in_loopback

    if in_loopback_namespace():
        return
    ok, how = can_unshare()
    if not ok:
        raise typer.BadParameter(f"a local Ray runs inside a loopback-only network namespace, which cannot be made "
                                 f"here ({how}); pass --address of a cluster you run, or --no-isolate to start Ray "
                                 "bound to 127.0.0.1 without the namespace", param_hint="--backend ray")
    argv = ["run", "--no-isolate"]
    for name, val in params.items():
        if name in OPTIONS and val is not None:
            flag = "--" + ("K" if name == "K" else "N" if name == "N" else name.replace("_", "-"))
            argv += [flag, str(val)] if not isinstance(val, bool) else [flag if val else f"--no-{flag[2:]}"]
    console.print(f"running inside a loopback-only network namespace, made with {how}")
    raise typer.Exit(run_in_loopback([sys.executable, "-m", "gencc.cli", *argv]).returncode)


#: the options `_rerun_isolated` passes on
OPTIONS = ("backend", "scheme", "K", "N", "wait_for", "deadline", "latency", "jobs", "in_flight", "hedge_delay",
           "actors", "seed", "progress", "model", "input_shape", "data", "parity")
