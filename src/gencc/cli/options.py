"""The options the commands share and the checks of their values, run by Typer while it parses the command line
(option callbacks), so a bad value is refused with exit code 2 and one message naming the option before a command
does any work. Every range error has one wording: "must be <what>, got <value>".

    seed: int = typer.Option(0, callback=seed)                  # an integer >= 0
    rate: float = typer.Option(..., callback=number(above=0))   # finite and > 0
    steps: int = typer.Option(100, callback=integer(at_least=1))
    out: Path = typer.Option(..., callback=out_file)            # a file path in an existing folder

The shared vocabulary (docs/guides/cli.md has the table; tests/cli/test_vocabulary.py holds the commands to it):
`--backend local|ray`, `--address`, `--workers` (alias `--N`), `--K`, `--workload`, `--jobs` (a count of jobs),
`--procs` (processes), `--service-ms` / `--slow-fraction` / `--slow-factor` (injected slowness, in ms), `--plot DIR`,
`--progress`; the help panels options are grouped in (MODEL, SCHEME, ... below).
"""

import logging
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer


def refuse(option: str, message: str) -> typer.BadParameter:
    """The usage error for `option` (exit code 2): "Invalid value for '--option': message"."""
    return typer.BadParameter(message, param_hint=f"'{option}'")


def reported(error: ValueError, options: Mapping[str, str], default: str) -> typer.BadParameter:
    """The usage error of a refusal by the library, naming the option of the parameter it is about (the `field` of
    a `gencc.errors.ConfigError`, looked up in `options`), else `default`; the Python parameter names of `options`
    in its message (those with an underscore: never a word of the sentence) read as their options."""
    option, message = options.get(getattr(error, "field", ""), default), str(error)
    for name, opt in options.items():
        if "_" not in name or (name.endswith("_s") and opt.endswith("-ms")):  # a value in seconds stays so named
            continue
        if opt == option:  # the subject of the message is the option the usage error names already
            message = re.sub(rf"^{re.escape(name)}:? ", "", message)
        message = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", opt, message)
    return refuse(option, message)


def _name(param: Any) -> str:
    return (getattr(param, "opts", None) or [f"--{param.name}"])[0]  # the first name given is the canonical one


def number(*, above: float | None = None, at_least: float | None = None, at_most: float | None = None
           ) -> Callable[..., Any]:
    """A callback refusing NaN, infinities and numbers outside the bounds (None passes: an option not given)."""
    words = [w for w in (f"> {above:g}" if above is not None else "", f">= {at_least:g}" if at_least is not None
                         else "", f"<= {at_most:g}" if at_most is not None else "") if w]
    want = "a finite number" + (" " + " and ".join(words) if words else "")

    def check(param: typer.CallbackParam, value: Any) -> Any:
        if value is None:
            return value
        bad = (not math.isfinite(value) or (above is not None and value <= above)
               or (at_least is not None and value < at_least) or (at_most is not None and value > at_most))
        if bad:
            raise refuse(_name(param), f"must be {want}, got {value:g}")
        return value

    return check


def integer(*, at_least: int | None = None, at_most: int | None = None) -> Callable[..., Any]:
    """A callback refusing integers outside the bounds, in the wording of `number` (None passes)."""
    words = [w for w in (f">= {at_least}" if at_least is not None else "", f"<= {at_most}" if at_most is not None
                         else "") if w]
    want = "an integer" + (" " + " and ".join(words) if words else "")

    def check(param: typer.CallbackParam, value: Any) -> Any:
        if value is None:
            return value
        if (at_least is not None and value < at_least) or (at_most is not None and value > at_most):
            raise refuse(_name(param), f"must be {want}, got {value}")
        return value

    return check


def seed(param: typer.CallbackParam, value: int | None) -> int | None:
    """A seed: an integer >= 0 (numpy's generators take no negative seed)."""
    if value is not None and value < 0:
        raise refuse(_name(param), f"must be an integer >= 0 (a seed), got {value}")
    return value


def check_out_file(option: str, path: Path) -> Path:
    """`path` as a file to write: its folder must exist (none is created) and it must not be a folder."""
    if path.is_dir():
        raise refuse(option, f"{path} is a folder; give the path of a file to write")
    parent = path.parent
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist (no folder is created)"
        raise refuse(option, f"the folder {parent} of {path} {what}")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise refuse(option, f"no permission to write {path}")
    return path


def check_out_dir(option: str, path: Path) -> Path:
    """`path` as a folder to write into: a folder, or a new one whose parent folder exists."""
    if path.exists() and not path.is_dir():
        raise refuse(option, f"{path} is a file, not a folder")
    parent = path.parent
    if not path.exists() and not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist (only the last folder is created)"
        raise refuse(option, f"the folder {parent} of {path} {what}")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise refuse(option, f"no permission to write in {path if path.exists() else parent}")
    return path


def out_file(param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Callback form of `check_out_file`."""
    return None if value is None else check_out_file(_name(param), value)


def out_dir(param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Callback form of `check_out_dir`."""
    return None if value is None else check_out_dir(_name(param), value)


def check_ray_address(option: str, address: str) -> str:
    """A Ray cluster's address as the library checks it (`gencc.engine.ray.check_address`: auto, HOST:PORT or
    ray://HOST:PORT); its ValueError becomes the usage error naming `option`."""
    from ..engine.ray import check_address

    try:
        return check_address(address)
    except ValueError as e:
        raise refuse(option, str(e)) from None


log = logging.getLogger("gencc.cli")

def check_backend(value: str) -> str:
    """--backend: the library's backend name for `value` (local or ray; its ValueError becomes the usage error);
    Ray must be installed for ray."""
    import importlib.util

    from ..engine.backends import backend_name

    try:
        value = backend_name(value)
    except ValueError as e:
        raise refuse("--backend", str(e)) from None
    if value == "remote":
        raise refuse("--backend", "the remote backend's workers are model replicas you run: name them with "
                                  "--upstream URL (gencc run, gencc serve)")
    if value == "ray" and importlib.util.find_spec("ray") is None:
        raise refuse("--backend", "--backend ray needs Ray, which is not installed: pip install 'gencc[ray]'")
    return value


def not_used(option: str, scheme: str, why: str) -> None:
    """Say, in one warning line on stderr, that `scheme` does not use `option` (the command runs on)."""
    log.warning("%s is not used by --scheme %s (%s); running without it", option, scheme, why)


#: the help panels options are grouped in (`rich_help_panel=`), one set of names for every command
MODEL, SCHEME, CODED, WORKERS, JOBS, TRAINING = "Model", "Scheme", "Coded schemes", "Workers", "Jobs", "Training"
LIMITS, SLOW, OUTPUT = "Server limits", "Injected slowness (experiments)", "Output"
#: how many times slower a slow worker (a slow task, in gencc run) is when --slow-factor is not given
SLOW_FACTOR = 10.0

#: injected slowness, one meaning, one unit (milliseconds) and one default in every command that takes it:
#: a service time added to each task (0: none)
ServiceMs = Annotated[float, typer.Option(
    "--service-ms", metavar="MS", help="injected service time per task, in ms (0: none)", callback=number(at_least=0),
    rich_help_panel=SLOW)]
#: persistent stragglers (serve, train): each worker is slow a fraction of the time (exponential on/off periods)
SlowFraction = Annotated[float, typer.Option(
    "--slow-fraction", metavar="P", help="persistent stragglers: the fraction of the time each worker is slow, in "
                                         "[0, 1)", callback=number(at_least=0), rich_help_panel=SLOW)]
#: how many times slower a slow worker (or task) is; None: not given (SLOW_FACTOR)
SlowFactor = Annotated[float | None, typer.Option(
    "--slow-factor", metavar="X", help=f"how many times slower a slow worker (run: a slow task) is, >= 1 (default "
                                       f"{SLOW_FACTOR:g})", callback=number(at_least=1), rich_help_panel=SLOW)]
#: a progress bar on stderr while the work runs
ShowProgress = Annotated[bool, typer.Option(help="show a progress bar", rich_help_panel=OUTPUT)]
#: where the Ray backend's actors run (run, serve): a strategy and a resource request per worker
WorkerPlacement = Annotated[str | None, typer.Option(
    "--worker-placement", metavar="MODE", show_default=False, rich_help_panel=WORKERS,
    help="ray: spread the workers over the nodes (rebalanced as nodes join) or pack (default)")]
WorkerCpus = Annotated[float | None, typer.Option(
    "--worker-cpus", metavar="N", show_default=False, rich_help_panel=WORKERS,
    help="ray: CPUs each worker reserves on its node, e.g. 0.5 (default none)", callback=number(at_least=0))]
WorkerResource = Annotated[list[str] | None, typer.Option(
    "--worker-resource", metavar="NAME=N", show_default=False, rich_help_panel=WORKERS,
    help="ray: a custom resource each worker asks of its node, repeatable")]
#: the option of each placement field (`gencc.engine.ray.placement.check_placement`)
PLACEMENT_OPTIONS = {"worker_placement": "--worker-placement", "worker_cpus": "--worker-cpus",
                     "worker_resources": "--worker-resource"}


def placement_options(backend: str, worker_placement: str | None, worker_cpus: float | None,
                      worker_resource: list[str] | None) -> dict[str, Any]:
    """--worker-placement, --worker-cpus and --worker-resource checked (for --backend ray only) as the keyword
    arguments `worker_placement`, `worker_cpus`, `worker_resources` of the Ray backend (none given: {})."""
    given = {"--worker-placement": worker_placement, "--worker-cpus": worker_cpus,
             "--worker-resource": worker_resource or None}
    for option, value in given.items():
        if value is not None and backend != "ray":
            raise refuse(option, f"{option} places the workers' Ray actors: it needs --backend ray")
    if all(v is None for v in given.values()):
        return {}
    from ..engine.ray.placement import check_placement, parse_resource

    resources: dict[str, float] = {}
    for item in worker_resource or []:
        try:
            name, amount = parse_resource(item)
        except ValueError as e:
            raise refuse("--worker-resource", str(e)) from None
        resources[name] = amount
    try:
        checked = check_placement(worker_placement, worker_cpus, resources)
    except ValueError as e:
        raise reported(e, PLACEMENT_OPTIONS, "--worker-placement") from None
    return {"worker_placement": checked.strategy, "worker_cpus": worker_cpus,
            "worker_resources": dict(checked.resources) or None}


def code_options(items: list[str], schemes: Sequence[str], front: str) -> dict[str, dict[str, Any]]:
    """--opt's code options, `scheme.key=value` each, for the chosen `schemes` of `front` (the one check of
    `gencc run`, `serve` and `sweep`): {scheme: {key: value}}, each value typed by its code's declared option
    (`gencc.codes.registry.parse_option`: `gcc.lam_dec=gcv` a string, `gcc.lam_dec=0.01` a number). The name
    before the dot is a chosen scheme or its code (`gcc.lam_dec` for gcc-hedge). Refused with a usage error
    naming --opt: malformed items, options for a scheme that takes none or that is not chosen, unknown options
    and values their type refuses."""
    from ..codes.registry import parse_option
    from ..codes.schemes import check_code_options, option_code, scheme_spec

    texts: dict[str, dict[str, str]] = {}
    for item in items:
        lhs, eq, val = item.partition("=")
        name, dot, key = lhs.partition(".")
        if not (eq and dot and name and key):
            raise refuse("--opt", f"code options look like scheme.key=value, got {item!r}")
        texts.setdefault(name, {})[key] = val
    if not texts:
        return {}
    try:
        if len(schemes) == 1:  # why the one scheme takes no options comes first
            check_code_options(schemes[0], texts, front)
        owners = {s: {s, *([scheme_spec(s).code] if scheme_spec(s).code else [])} for s in schemes}
        stray = sorted(set(texts) - set().union(*owners.values()))
        if stray:
            raise ValueError(_stray_options(stray[0], schemes, front))
        out: dict[str, dict[str, Any]] = {}
        for s in schemes:
            named = [n for n in (scheme_spec(s).code, s) if n in texts]  # the code's options, then the scheme's
            if named:
                check_code_options(s, texts, front)
                out[s] = {key: parse_option(option_code(n), key, text) for n in named for key, text in texts[n].items()}
        return out
    except ValueError as e:
        raise refuse("--opt", str(e)) from None


def given(ctx: typer.Context) -> set[str]:
    """The parameters of `ctx`'s command the user gave (on the command line or in the environment), not left at
    their defaults: a warning or a message speaks only of options the user typed."""
    defaults = ("DEFAULT", "DEFAULT_MAP")  # click's ParameterSource, by name (Typer may carry its own click)
    return {p.name for p in ctx.command.params
            if p.name and getattr(ctx.get_parameter_source(p.name), "name", "DEFAULT") not in defaults}


def _scheme_is_default() -> bool:
    """Whether the running command's --scheme was left out (its default chosen)."""
    from typer._click.globals import get_current_context

    ctx = get_current_context(silent=True)
    param = next((p for p in (ctx.command.params if ctx else ()) if "--scheme" in getattr(p, "opts", ())), None)
    return ctx is not None and param is not None and param.name not in given(ctx)


def _stray_options(name: str, chosen: Sequence[str], front: str) -> str:
    """Why `--opt name.KEY=VALUE` applies to none of the `chosen` schemes, and the fix on the command line:
    "--opt gcc.* sets options of gcc, but --scheme is sgcc (the default); pass --scheme gcc"."""
    from ..codes.registry import CODES
    from ..codes.schemes import SCHEME_SPECS, schemes

    takers = [n for n in schemes(front) if SCHEME_SPECS[n].takes_code_options(front)]
    if len(chosen) > 1:
        fix = f"add {name} to --scheme" if name in takers else f"write one of {', '.join(chosen)}.KEY=VALUE"
        return f"--opt {name}.* sets options of {name}, which is not in --scheme {','.join(chosen)}; {fix}"
    scheme = chosen[0]
    code = SCHEME_SPECS[scheme].code
    default = " (the default)" if _scheme_is_default() else ""
    now = f"--scheme is {scheme}{default}" + (f", whose code is {code}" if code and code != scheme else "")
    if name in takers:
        return f"--opt {name}.* sets options of {name}, but {now}; pass --scheme {name}"
    own = f"{scheme}.KEY=VALUE" + (f" or {code}.KEY=VALUE" if code and code != scheme else "")
    if name in CODES or name in SCHEME_SPECS:
        return f"--opt {name}.* sets options of {name}, which --scheme {scheme}{default} does not run; write {own}"
    return f"--opt {name}.* names no code or scheme; {now}: write {own}"


def upstream_urls(upstream: list[str] | None, upstreams: Path | None, beside: Mapping[str, Any],
                  workers: int | None) -> tuple[str, ...]:
    """The replicas of --upstream URL (repeatable) and --upstreams FILE (one URL a line), each URL parsed by the
    library (`gencc.engine.remote.check_upstreams`); empty without either. `beside` maps the options that do not
    apply over replicas (they name a model gencc runs, or another backend) to their values: one given is refused.
    --workers, when the user gave it (`workers` not None), must be the number of replicas."""
    from ..engine.remote import check_upstreams, read_upstreams

    listed = list(upstream or [])
    if upstreams is not None:
        try:
            listed += read_upstreams(upstreams)
        except ValueError as e:
            raise refuse("--upstreams", str(e)) from None
    if not listed:
        return ()
    option = "--upstream" if upstream else "--upstreams"
    for name, value in beside.items():
        if value is not None:
            raise refuse(name, f"{name} does not apply with {option}: the workers are your replicas, which hold "
                               "the model")
    try:
        urls = tuple(u.url for u in check_upstreams(listed))
    except ValueError as e:
        raise refuse(option, str(e)) from None
    if workers is not None and workers != len(urls):
        raise refuse("--workers", f"the workers are the {len(urls)} upstream replicas: give --workers {len(urls)} or "
                                  f"leave it out, got {workers}")
    return urls
