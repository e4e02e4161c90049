"""The `gencc` command line (Typer): `app` and `main`, the root options, and one module per subcommand in this
package (run, serve, loadtest, train, sweep/plot/reproduce, parity train, demo) registered below; shared options
and their checks are `gencc.cli.options`, the namespace re-run `gencc.cli.isolate`."""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer._click.exceptions import UsageError  # the click Typer ships and raises its usage errors from
from typer.core import TyperCommand, TyperGroup
from typer.core import _main as _typer_main

from .._util.version import __version__

#: what a command raises on bad input (the library's ValueError; OSError: a missing file, an --out that is a
#: file, no permission; ImportError: a missing optional package): Typer's usage box with the message, exit 2
USER_ERRORS = (ValueError, OSError, ImportError)


def usage_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with USER_ERRORS turned into Typer's usage error: one short message and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as err:
            lines = str(err).strip().splitlines() or [type(err).__name__]
            msg = lines[0] if len(lines[0]) <= 400 else lines[0][:400] + " ..."
            raise typer.BadParameter(msg) from None

    return wrapper


#: what --help shows for the value of an option that would otherwise show its Python type (`<list[str]>`)
METAVARS = {"--opt": "CODE.KEY=VALUE"}
#: what --help shows for the value of any other option that names no metavar of its own, by its Python type
TYPE_METAVARS = {"int": "INT", "float": "NUM", "str": "TEXT", "path": "PATH"}


def _untyped_flags(params: list[Any]) -> list[Any]:
    """`params` with no type label on the on/off flags (Typer's rich help writes `<bool>` beside each), the value
    of the options in METAVARS shown by its form, and any other value by a metavar (TYPE_METAVARS), never by its
    Python type (`<int>`)."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
        elif p.metavar is None and METAVARS.keys() & set(getattr(p, "opts", ())):
            p.metavar = next(METAVARS[o] for o in p.opts if o in METAVARS)
        elif p.metavar is None and getattr(p, "param_type_name", "") == "option":
            bare = p.bare_type().lower()
            p.metavar = TYPE_METAVARS.get(bare, bare.upper())
    return params


def unwrapped(help_text: str | None) -> str | None:
    """`help_text` (a command's docstring) with the line breaks inside each paragraph turned into spaces, so that
    --help rewraps every sentence at the terminal's width. Typer's rich help keeps a docstring's single line
    breaks in a command's summary in its group's list of commands and in every paragraph after the first, which
    cut sentences in the middle of a line. Paragraphs stay apart (a blank line); one that starts with click's
    \\b marker keeps its lines; anything after a \\f line (click's end of help) is kept as it is."""
    if not help_text:
        return help_text
    text, cut, rest = inspect.cleandoc(help_text).partition("\f")
    paragraphs = [p if p.lstrip("\n").startswith("\b") else " ".join(line.strip() for line in p.splitlines())
                  for p in text.split("\n\n")]
    return "\n\n".join(paragraphs).rstrip() + (("\n" + cut + rest) if cut else "")


#: the order of the help panels options are grouped in (`gencc.cli.options`: MODEL, SCHEME, ...); Typer's own
#: panel of the options that name none ("Options") comes first
PANELS = ("Model", "Scheme", "Coded schemes", "Workers", "Jobs", "Training", "Server limits",
          "Injected slowness (experiments)", "Output")


def _in_panels(params: list[Any]) -> list[Any]:
    """`params` in the order of their help panels (PANELS; declaration order within a panel), --help last in the
    Output panel when the command groups its options in panels."""
    if not any(getattr(p, "rich_help_panel", None) for p in params):
        return params
    for p in params:
        if p.name == "help":
            p.rich_help_panel = PANELS[-1]
    order = {name: i for i, name in enumerate(PANELS)}
    return sorted(params, key=lambda p: order.get(getattr(p, "rich_help_panel", None) or "", -1))


class _Command(TyperCommand):
    """A gencc subcommand: its help rewrapped at the terminal's width, its flags shown without a type label and
    its options in their help panels, in PANELS' order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)
        self._in_help = False

    def get_params(self, ctx: Any) -> list[Any]:
        params = _untyped_flags(super().get_params(ctx))
        return _in_panels(params) if self._in_help else params

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._in_help = True  # the panels' order only for --help: parsing keeps the declaration order
        try:
            super().format_help(ctx, formatter)
        finally:
            self._in_help = False


def show_short(err: UsageError, file: Any = None) -> None:
    """Show a usage error (exit code 2) in three lines: the usage, the help hint, and the message on one line
    ("Error: Invalid value for '--opt': ..."), unwrapped and without a box, so that it reads the same at any
    terminal width and in a log."""
    lines = []
    ctx = err.ctx
    if ctx is not None:
        lines.append(" ".join(ctx.get_usage().split()))
        if ctx.command.get_help_option(ctx) is not None:
            lines.append(f"Try '{ctx.command_path} --help' for help.")
    lines.append("Error: " + " ".join(err.format_message().split()))
    typer.echo("\n".join(lines), file=file, err=file is None)


def _shown_short(err: UsageError) -> None:
    """Make click show `err` with `show_short` (its `show`, replaced on this one error); click's "no arguments:
    show the help" keeps its own."""
    if type(err).__name__ != "NoArgsIsHelpError":
        err.show = functools.partial(show_short, err)  # type: ignore[method-assign]


class _Group(TyperGroup):
    """A gencc command group: its help rewrapped at the terminal's width, its flags shown without a type label,
    and every usage error (its own options' or a subcommand's) shown in three lines (`show_short`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as err:
            _shown_short(err)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as err:
            _shown_short(err)
            raise

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        # errors shown by their own `show` (show_short's three lines), not in Typer's rich box; --help stays
        # rich (it follows the group's own rich_markup_mode)
        return _typer_main(self, args=args, prog_name=prog_name, complete_var=complete_var,
                           standalone_mode=standalone_mode, windows_expand_args=windows_expand_args,
                           rich_markup_mode=None, **extra)


app = typer.Typer(help="gencc: general coded computing (straggler-resilient computation of any function).",
                  no_args_is_help=True, add_completion=False, cls=_Group)


#: the levels --log-level takes
LOG_LEVELS = ("debug", "info", "warning", "error")


class _StderrHandler(logging.StreamHandler):
    """A handler writing to whatever sys.stderr is when a record is emitted (it may be replaced after set-up)."""

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str) -> None:
    """Send the `gencc` logger's records at `level` and above to stderr (the library never configures logging;
    only the command line does, through this)."""
    logger = logging.getLogger("gencc")
    for h in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level.upper())


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gencc {__version__}")
        raise typer.Exit()


def _log_level(value: str) -> str:
    if value.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value.lower()


@app.callback()
def _root(
    log_level: Annotated[str, typer.Option(help=f"log records of gencc at this level and above to stderr: "
                                                f"{', '.join(LOG_LEVELS)}", callback=_log_level)] = "warning",
    version: Annotated[bool, typer.Option("--version", help="print gencc's version and exit", is_eager=True,
                                          callback=_version)] = False,
) -> None:
    """gencc: general coded computing."""
    configure_logging(log_level)


@app.command(cls=_Command)
@usage_errors
def info() -> None:
    """Print the codes (with their options), kernels, point designs and straggler patterns this install provides."""
    from rich.console import Console
    from rich.markup import escape

    from ..codes.registry import CODES
    from ..faults.stragglers import PATTERNS
    from ..rkhs.kernels import KERNELS
    from ..rkhs.points import DESIGNS, NESTED

    c = Console(soft_wrap=True)
    c.print(f"gencc {__version__}")
    c.print(f"codes: {', '.join(CODES)}")
    for spec in CODES.values():
        c.print(f"  {spec.name}: {escape(spec.summary)}")
        for p in spec.params:
            c.print(f"    {escape(p.describe())}")
    c.print(f"kernels: auto, {', '.join(KERNELS)}")
    c.print(f"point designs: {', '.join(DESIGNS)} (worker points also {', '.join(NESTED)})")
    c.print(f"straggler patterns: {', '.join(PATTERNS)}, bernoulli")


def _add(group: typer.Typer, name: str, command: Callable[..., Any]) -> None:
    group.command(name, cls=_Command)(usage_errors(command))


# The subcommands, one module each in this package.
from .demo import demo_command  # noqa: E402
from .experiments import plot, reproduce, sweep  # noqa: E402
from .loadtest import loadtest_command  # noqa: E402
from .parity import parity_train_command  # noqa: E402
from .run import run_command  # noqa: E402
from .serve import serve_command  # noqa: E402
from .train import train_command  # noqa: E402

for _name, _command in (("demo", demo_command), ("sweep", sweep), ("plot", plot), ("reproduce", reproduce),
                        ("run", run_command), ("serve", serve_command), ("loadtest", loadtest_command),
                        ("train", train_command)):
    _add(app, _name, _command)

parity_app = typer.Typer(
    help="Train a parity model for your own model, so that one parity worker covers any one of k requests that "
         "straggles.\n\n"
         "A parity model F_P is a network trained so that F_P(x_1 + ... + x_k) ~ f(x_1) + ... + f(x_k), where f is "
         "your model and x_1 ... x_k are k requests' inputs. A parity worker runs F_P on the sum of the k inputs; "
         "when one of the k requests straggles, its answer is F_P's output minus the other k - 1 answers. This is "
         "ParM (parity models, SOSP 2019); serve the result with `gencc serve --parity`.",
    no_args_is_help=True, cls=_Group)
_add(parity_app, "train", parity_train_command)
app.add_typer(parity_app, name="parity")


def main() -> None:
    app()

