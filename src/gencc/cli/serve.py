"""`gencc serve`: the HTTP front door, its options checked before any model loads (`gencc loadtest` lives in
`loadtest_cli`)."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ..errors import ClusterUnreachable, StartStopped
from ..serving.config import BASELINES, CHECKED_SCHEMES, SCHEME_HELP, default_scheme
from ..serving.parity import MAX_PARITY_K
from .isolate import rerun_isolated
from .model import check_model_options, load_cli_inputs, load_served_model
from .options import (
    CODED,
    LIMITS,
    MODEL,
    PLACEMENT_OPTIONS,
    SCHEME,
    WORKERS,
    ServiceMs,
    SlowFactor,
    SlowFraction,
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

if TYPE_CHECKING:
    from ..serving import Limits

log = logging.getLogger(__name__)

#: the most workers `gencc serve` starts (one thread or Ray actor each)
MAX_WORKERS = 1024
#: the option of `gencc serve` each field of `ServiceConfig` and `Slowdown` comes from
CONFIG_OPTIONS = {"scheme": "--scheme", "workers": "--workers", "K": "--K", "parm_k": "--K", "backend": "--backend",
                  "address": "--address", "max_wait_ms": "--max-wait-ms", "max_pending": "--max-pending",
                  "check": "--check-results", "packed_parity": "--packed-parity", "gate": "--gate",
                  "redundancy": "--redundancy", "code_options": "--opt", "service_ms": "--service-ms",
                  "slow_fraction": "--slow-fraction", "slow_factor": "--slow-factor", "upstreams": "--upstream",
                  "start_degraded": "--start-degraded", "deadline_ms": "--deadline-ms", **PLACEMENT_OPTIONS}
#: the most inputs `--max-batch` allows in one batch request, and the largest `--max-body` (bytes)
MAX_BATCH, MAX_BODY = 4096, 2 ** 30


def serve_command(
    ctx: typer.Context,
    workload: Annotated[str | None, typer.Option(metavar="NAME", help="a gencc workload (default digits-cnn), or "
                                                 "--model", rich_help_panel=MODEL)] = None,
    model: Annotated[str | None, typer.Option(metavar="SPEC", help="your model instead of a workload: an import path "
                                              "package.module:attr or a .pt2 / TorchScript file",
                                              rich_help_panel=MODEL)] = None,
    input_shape: Annotated[str | None, typer.Option(metavar="SHAPE", help="--model: the shape of one input, e.g. "
                                                    "1,8,8 (default: from --data or the file)",
                                                    rich_help_panel=MODEL)] = None,
    data: Annotated[Path | None, typer.Option(metavar="FILE", help="--model: training inputs (.npy / .npz), for "
                                              "the gate's calibration and --check-results",
                                              rich_help_panel=MODEL)] = None,
    parity: Annotated[Path | None, typer.Option(metavar="FILE", help="--model with parm / sgcc-parity: the parity "
                                                "model from `gencc parity train`", rich_help_panel=MODEL)] = None,
    scheme: Annotated[str | None, typer.Option(metavar="NAME", help=SCHEME_HELP, show_default=f"{default_scheme(False)}"
                                               f", or {default_scheme(True)} with --parity",
                                               rich_help_panel=SCHEME)] = None,
    workers: Annotated[int | None, typer.Option("--workers", metavar="N", help="model replicas, the same for every "
                                                "scheme (default 12, or one per --upstream)",
                                                show_default=False, callback=integer(at_least=1),
                                                rich_help_panel=WORKERS)] = None,
    K: Annotated[int | None, typer.Option("--K", metavar="K", help="requests per coding group (default 8, or "  # noqa: N803
                                          "workers - 1 if fewer); parm: per parity query (2 to 4, default 2)",
                                          callback=integer(at_least=1), rich_help_panel=SCHEME)] = None,
    backend: Annotated[str, typer.Option(metavar="local|ray", help="local (threads) or ray (one actor per worker)",
                                         rich_help_panel=WORKERS)] = "local",
    address: Annotated[str | None, typer.Option(metavar="ADDRESS", help="ray: an existing cluster's address",
                                                rich_help_panel=WORKERS)] = None,
    worker_placement: WorkerPlacement = None,
    worker_cpus: WorkerCpus = None,
    worker_resource: WorkerResource = None,
    service_ms: ServiceMs = 0.0,
    slow_fraction: SlowFraction = 0.0,
    slow_factor: SlowFactor = None,
    max_wait_ms: Annotated[float | None, typer.Option(metavar="MS", help="coded: flush a group after this many ms "
                                                      "(default 50)", callback=number(above=0),
                                                      rich_help_panel=CODED)] = None,
    check_results: Annotated[str, typer.Option(
        metavar="MODE", rich_help_panel=CODED,
        help="gcc, bacc, sgcc, sgcc-parity: off, on (outvote and quarantine wrong workers) or strict (check "
             "every answer)")] = "off",
    packed_parity: Annotated[bool, typer.Option(
        "--packed-parity", rich_help_panel=CODED,
        help="parm, sgcc-parity: a parity model that takes a group's inputs stacked, not summed (trained on first "
             "use)")] = False,
    gate: Annotated[str, typer.Option(
        metavar="on|off", rich_help_panel=CODED,
        help="coded: send a decoded answer only when its calibrated uncertainty says it is likely right")] = "on",
    redundancy: Annotated[str, typer.Option(
        metavar="MODE", rich_help_panel=CODED,
        help="eager coded: adaptive sends a coded task only to an idle worker (full coding at low load); full "
             "sends every one")] = "adaptive",
    deadline_ms: Annotated[float | None, typer.Option(
        metavar="MS", show_default=False, callback=number(above=0), rich_help_panel=LIMITS,
        help="latency target of requests that carry none: answered by it (exactly, decoded, or 504), earliest "
             "deadline first")] = None,
    max_pending: Annotated[int, typer.Option(metavar="N", help="requests in flight before answering 503",
                                             callback=integer(at_least=1), rich_help_panel=LIMITS)] = 1000,
    host: Annotated[str, typer.Option(metavar="HOST", help="address to bind", rich_help_panel=LIMITS)] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="port to bind",
                                      callback=integer(at_least=1, at_most=65535), rich_help_panel=LIMITS)] = 8000,
    api_key: Annotated[str | None, typer.Option(
        envvar="GENCC_API_KEY", show_default=False, metavar="KEY", rich_help_panel=LIMITS,
        help="key every request must carry (Authorization: Bearer KEY, or X-API-Key: KEY); required with a "
             "non-loopback --host")] = None,
    read_timeout_ms: Annotated[float, typer.Option(metavar="MS", help="ms a request's headers and body may take to "
                                                   "arrive", callback=number(above=0),
                                                   rich_help_panel=LIMITS)] = 10000.0,
    max_batch: Annotated[int, typer.Option(metavar="N", help="most inputs in one POST /predict/batch or /v2 infer",
                                           callback=integer(at_least=1, at_most=MAX_BATCH),
                                           rich_help_panel=LIMITS)] = 64,
    max_body: Annotated[int | None, typer.Option(
        callback=integer(at_least=1024, at_most=MAX_BODY), show_default=False, metavar="BYTES", rich_help_panel=LIMITS,
        help="largest request body, else 413 (default: what --max-batch inputs need, at least 64 KiB)")] = None,
    name: Annotated[str, typer.Option(metavar="NAME", help="the model's name in the Open Inference Protocol's "
                                      "routes (/v2/models/NAME/infer)", rich_help_panel=MODEL)] = "model",
    opt: Annotated[list[str] | None, typer.Option("--opt", help="code option of the coded --scheme's code (gcc, "
                                                  "bacc, sgcc), repeatable, e.g. gcc.lam_dec=0.01",
                                                  rich_help_panel=CODED)] = None,
    isolate: Annotated[bool, typer.Option(help="ray without --address: run in a loopback-only network namespace "
                                          "(port bound outside)", rich_help_panel=WORKERS)] = True,
    upstream: Annotated[list[str] | None, typer.Option(
        "--upstream", metavar="URL", show_default=False, rich_help_panel=WORKERS,
        help="a model replica you run, by its URL http://HOST:PORT/v2/models/NAME (repeatable)")] = None,
    upstreams: Annotated[Path | None, typer.Option(
        "--upstreams", metavar="FILE", show_default=False, rich_help_panel=WORKERS,
        help="a file of --upstream URLs, one a line (# comments)")] = None,
    start_degraded: Annotated[bool, typer.Option(
        "--start-degraded", rich_help_panel=WORKERS,
        help="with --upstream: start even when some replicas do not answer (tried again as requests come)")] = False,
) -> None:
    """Serve POST /predict for a workload with a coded or baseline scheme (FastAPI + uvicorn). With --backend ray
    and no --address, the command re-runs itself inside a loopback-only network namespace (as `gencc run`
    does) and starts a private Ray there; the port is bound here first, so clients reach it as before.

    What each --scheme does, and what was measured of it: the table of schemes in the serving guide
    (docs/guides/serving.md#schemes)."""
    from ..serving import ServiceConfig, Slowdown, check_model_name
    from ..serving.config import scheme as scheme_entry

    urls = upstream_urls(upstream, upstreams, {"--workload": workload, "--model": model, "--input-shape": input_shape,
                                               "--parity": parity}, workers)
    if start_degraded and not urls:
        raise refuse("--start-degraded", "--start-degraded applies with --upstream")
    workers = len(urls) if urls else 12 if workers is None else workers
    scheme = scheme if scheme is not None else default_scheme(parity=parity is not None)
    try:
        scheme_entry(scheme)
    except ValueError as e:
        raise reported(e, {}, "--scheme") from None
    K, parm_k = _group_size(scheme, K, workers)  # noqa: N806
    _check_not_ignored(scheme, max_wait_ms, slow_fraction, slow_factor)
    if not urls:
        check_model_options(workload, model, input_shape, data, parity)
    workload = workload or ("digits-cnn" if model is None and not urls else None)
    backend = check_backend(backend)
    _check_serve_options(workload, workers, address)
    where = placement_options(backend, worker_placement, worker_cpus, worker_resource)
    opts = code_options(opt or [], (scheme,), "serving").get(scheme, {})
    try:
        config = ServiceConfig(scheme=scheme, workers=workers, K=K, backend=backend, address=address,
                               max_wait_ms=50.0 if max_wait_ms is None else max_wait_ms, parm_k=parm_k,
                               max_pending=max_pending, check=check_results, packed_parity=packed_parity, gate=gate,
                               redundancy=redundancy, code_options=opts, upstreams=urls,
                               start_degraded=start_degraded, deadline_ms=deadline_ms,
                               **{k: v for k, v in where.items() if v is not None})
        slowdown = Slowdown(service_ms=service_ms, slow_fraction=slow_fraction,
                            slow_factor=10.0 if slow_factor is None else slow_factor)
    except ValueError as e:
        raise reported(e, CONFIG_OPTIONS, "--scheme") from None
    try:
        check_model_name(name)
    except ValueError as e:
        raise reported(e, {}, "--name") from None
    from ..engine.ray.namespace import inherited_socket

    sock = inherited_socket()  # the port bound outside the namespace, when re-run inside it
    if sock is None:
        _check_bindable(host, port)
    limits = _check_access(host, api_key, read_timeout_ms / 1e3, max_batch, max_body)
    if sock is None and backend == "ray" and address is None and isolate:
        rerun_isolated(ctx, "serving from", host=host, port=port)
    try:
        svc = start_or_stop(lambda: _start(workload, model, input_shape, data, parity, scheme, K, workers, parm_k,
                                           check_results, packed_parity, urls, backend, config, slowdown))
    except StartStopped as e:  # a requested stop, not a failure: exit 0
        typer.echo(f"stopped on {e.name} while starting: nothing was served")
        _end_now()
        return
    _serve(svc, workload, model, urls, host, port, name, sock, limits, workers, K, max_pending)


def _start(workload: str | None, model: str | None, input_shape: Any, data: Any, parity: Any, scheme: str,
           K: int, workers: int, parm_k: int, check_results: str, packed_parity: bool,  # noqa: N803
           urls: Any, backend: str, config: Any, slowdown: Any) -> Any:
    """Load the model, start the workers and calibrate the gate: the `Service`, or an error (a usage error for
    bad input, exit 2). Run by `start_or_stop`, in its own thread."""
    from ..serving import Service

    target, X, parity_model = workload, None, None
    if model is not None:
        target, X, parity_model = load_served_model(model, input_shape, data, parity, scheme, K, workers, parm_k,
                                                     check_results, packed_parity)
    if urls:
        X = None if data is None else load_cli_inputs(data)
        backend = "remote"
    log.info("starting: loading %s for %s on %d %s workers", workload or model or "the upstreams' model", scheme,
             workers, backend)
    try:
        svc = Service.build(target, config=config, slowdown=slowdown, data=X, parity=parity_model)
    except ValueError as e:
        if urls:  # the fleet's check: an unreachable or mismatched replica, inputs the scheme cannot code
            raise reported(e, CONFIG_OPTIONS, "--upstream") from None
        if getattr(e, "field", None) in PLACEMENT_OPTIONS:  # no Ray node offers what each worker asks for
            raise reported(e, CONFIG_OPTIONS, "--worker-resource") from None
        raise  # bad input: the CLI's usage error (exit 2)
    except ClusterUnreachable as e:  # nothing answers at --address (within its connection timeout)
        raise refuse("--address", str(e)) from None
    except Exception:
        log.exception("could not start serving %s with %s", workload or model, scheme)
        raise
    try:
        if svc.gate is not None and not svc.gate.ready.is_set():
            typer.echo("calibrating the gate on the model's training inputs (virtual time)...")
            svc.gate.ready.wait()
    except BaseException:
        svc.close(0)
        raise
    return svc


def _serve(svc: Any, workload: str | None, model: str | None, urls: Any, host: str, port: int, name: str,
           sock: Any, limits: Limits, workers: int, K: int, max_pending: int) -> None:  # noqa: N803
    """Serve `svc` with uvicorn until a stop (see `serve_until_stopped`)."""
    import uvicorn

    from ..serving import create_app, freeze_heap, uvicorn_options

    backend = svc.config.backend if getattr(svc, "config", None) is not None else "local"
    freeze_heap()
    workload = workload if model is None and not urls else svc.model.identity
    url = f"http://{host}:{port}"
    typer.echo(f"serving {workload} with {svc.scheme} on {workers} {backend} workers at {url} (Open Inference "
               f"Protocol: {url}/v2/models/{name})")
    log.info("serving %s at %s: scheme %s, %d %s workers, K=%d, at most %d requests in flight", workload, url,
             svc.scheme, workers, backend, K, max_pending)
    level = logging.getLevelName(logging.getLogger("gencc").getEffectiveLevel()).lower()
    try:
        kw = {"access_log": False, "log_level": level if level in ("debug", "info", "warning", "error") else "warning",
              **uvicorn_options(limits)}
        app = create_app(svc, limits=limits, name=name)
        log.info("door: bodies up to %d bytes, batches up to %d inputs, %g s to send a request",
                 app.state.max_body_bytes, limits.max_batch, limits.read_timeout_s)

        def run() -> None:
            if sock is None:
                uvicorn.run(app, host=host, port=port, **kw)
            else:
                server = uvicorn.Server(uvicorn.Config(app, **kw))
                server.run(sockets=[sock])
                if not server.started:
                    raise SystemExit(3)

        stop = serve_until_stopped(run)
    except SystemExit as e:  # uvicorn exits 1 when it cannot start
        if e.code:
            log.error("uvicorn could not serve at %s (exit status %s)", url, e.code)
        raise
    except Exception:
        log.exception("serving at %s stopped on an error", url)
        raise
    if stop is not None:  # the one line a supervisor sees on a clean stop (exit status 0)
        typer.echo(f"stopped on {stop}: answered the requests in flight, service closed")
    log.info("stopped serving at %s", url)


def _end_now() -> None:
    """End the process at once with status 0, its output flushed: the start it abandoned may still be running in
    its thread (loading a model, inside Ray), which neither a return nor Ray's exit hooks would end cleanly.
    Where Ray was started, the processes this one started (a private Ray's) are killed and its private temp
    folders removed; a joined cluster ends this driver's actors when the driver is gone."""
    import os
    import sys

    if "ray" in sys.modules:
        try:
            import psutil  # a dependency of Ray's

            for child in psutil.Process().children(recursive=True):
                child.kill()
        except Exception as e:  # noqa: BLE001 - ending anyway
            log.debug("ending the processes of a stopped start: %s", e)
        from ..engine.ray.start import remove_own_temp_dirs

        remove_own_temp_dirs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _NotMainThread(logging.Filter):
    """Drops Ray's warning that it sets no SIGTERM handler outside the main thread (`start_or_stop` starts Ray
    in another thread on purpose)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


T = TypeVar("T")


def start_or_stop(start: Callable[[], T], poll_s: float = 0.02) -> T:
    """`start()` run in another thread while this one waits for it or for SIGTERM / SIGINT, which raise
    `StartStopped` here at once (the start is left running: see `_end_now`). Its result, or its exception.

    The start runs outside the main thread so that nothing it calls takes the signals over: Ray's driver sets a
    Python handler for SIGTERM only from the main thread (one that exits with status 15, which a supervisor
    reads as a crash), and its C++ core installs a handler that prints a stack; this thread puts its own handler
    back every `poll_s` seconds. In another thread than the main one (where Python lets no handler be set) it
    just calls `start()`."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return start()
    out: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            out["value"] = start()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            out["error"] = e
        finally:
            done.set()

    def stop(sig: int, _frame: Any) -> None:
        raise StartStopped(signal.Signals(sig).name)

    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {sig: signal.signal(sig, stop) for sig in sigs}
    quiet, ray_log = _NotMainThread(), logging.getLogger("ray._private.worker")
    ray_log.addFilter(quiet)
    try:
        threading.Thread(target=run, name="gencc-serve-start", daemon=True).start()
        while not done.wait(poll_s):
            for sig in sigs:  # over any handler installed meanwhile at the C level (Ray's core)
                signal.signal(sig, stop)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        ray_log.removeFilter(quiet)
    if "error" in out:
        raise out["error"]
    return out["value"]


def serve_until_stopped(run: Callable[[], None]) -> str | None:
    """Call `run` (uvicorn serving until SIGTERM or SIGINT: it stops taking connections, answers the requests in
    flight and closes the service, the app's lifespan) and return the name of the signal that stopped it (None: it
    stopped otherwise). A SystemExit from `run` (uvicorn could not start) goes up as it is.

    uvicorn raises the signal it caught again once it has shut down, for the handler that was there before: the
    default one ends the process by that signal (exit 143 on SIGTERM), and Ray's driver handler raises
    SystemExit(15), which a supervisor reads as a crash. Here the handler there before is one that only notes the
    signal, so a stop returns and the command exits 0 (where Python lets handlers be set: the main thread)."""
    import signal
    import threading

    seen: list[int] = []
    old = {}
    if threading.current_thread() is threading.main_thread():
        old = {sig: signal.signal(sig, lambda sig, _frame: seen.append(sig)) for sig in (signal.SIGINT,
                                                                                           signal.SIGTERM)}
    try:
        run()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return signal.Signals(seen[0]).name if seen else None


def _group_size(scheme: str, K: int | None, workers: int = 12) -> tuple[int, int]:  # noqa: N803
    """(K of the coded groups, ParM's inputs per parity query) from --K: parm takes 2 to 4 (default 2), the
    group-coding schemes any K (default 8, or workers - 1 on fewer than 9 workers: a fleet of 3 replicas codes
    groups of 2); a scheme that codes no groups says it does not use --K."""
    base = scheme.removesuffix("-hedge")
    if base == "parm":
        if K is not None and not 2 <= K <= MAX_PARITY_K:
            not_used("--K", scheme, f"ParM's parity models take 2 to {MAX_PARITY_K} inputs per query, not {K}; it "
                                    "sends 2")
            return 8, 2
        return 8, 2 if K is None else K
    if K is not None and base not in CHECKED_SCHEMES:
        not_used("--K", scheme, "it codes no groups; every request goes to its own worker(s)")
        return 8, 2
    return max(1, min(8, workers - 1)) if K is None else K, 2


def _check_not_ignored(scheme: str, max_wait_ms: float | None, slow_fraction: float,
                       slow_factor: float | None) -> None:
    """Refuse an option of one scheme given for a scheme that would ignore it."""
    if max_wait_ms is not None and scheme in BASELINES:
        raise refuse("--max-wait-ms", f"--max-wait-ms applies to the coded schemes (a group waits to fill), not "
                                      f"{scheme}")
    if slow_factor is not None and slow_fraction == 0:
        raise refuse("--slow-factor", "--slow-factor applies with --slow-fraction > 0 (without it no worker is "
                                      "ever slow)")


def _check_serve_options(workload: str | None, workers: int, address: str | None) -> None:
    """The checks of `gencc serve`'s options that are the command's own (the library checks the configuration,
    `ServiceConfig`): a known workload before any loads, at most MAX_WORKERS workers, a Ray address."""
    from ..workloads import workload_spec

    if workload is not None:
        try:
            workload_spec(workload)
        except ValueError as e:
            raise refuse("--workload", str(e)) from None
    if address is not None:
        check_ray_address("--address", address)
    if workers > MAX_WORKERS:
        raise refuse("--workers", f"must be an integer <= {MAX_WORKERS} (one thread or Ray actor each), got "
                                  f"{workers}")


def _check_bindable(host: str, port: int) -> None:
    """Refuse, before the model loads, an address this machine cannot listen on (busy port, foreign host)."""
    import errno
    import socket

    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise refuse("--host", f"--host {host!r} does not resolve ({e.strerror})") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            option = "--port" if e.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
            raise refuse(option, f"cannot listen on {host}:{port} ({e.strerror}); pick a free --port or an "
                                 "address of this machine for --host") from None


def is_loopback(host: str) -> bool:
    """Whether `host` names only loopback addresses (127.0.0.0/8, ::1; a name: every address it resolves to)."""
    import socket

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except socket.gaierror:
        return False
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def _check_access(host: str, api_key: str | None, read_timeout: float, max_batch: int = 64,
                  max_body: int | None = None) -> Limits:
    """The door's limits for `gencc serve`: a --host other than loopback needs an API key (and is warned about);
    loopback without a key stays open."""
    from ..serving import Limits

    if api_key is not None and len(api_key) < 8:
        raise refuse("--api-key", "an API key must have at least 8 characters")
    if not is_loopback(host):
        if not api_key:
            raise refuse("--api-key", f"--host {host} is reachable from other machines: give --api-key KEY (or set "
                                      "GENCC_API_KEY) so that every request must carry it")
        log.warning("serving on %s, not loopback: every request must carry the API key (plain HTTP: the key "
                    "and data travel unencrypted; put TLS in front on untrusted networks)", host)
    return Limits(api_key=api_key or None, read_timeout_s=read_timeout, max_batch=max_batch, max_body_bytes=max_body)
