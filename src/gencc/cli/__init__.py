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
from typer.core import TyperCommand, TyperGroup

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


def _untyped_flags(params: list[Any]) -> list[Any]:
    """`params` with no type label on the on/off flags (Typer's rich help writes `<bool>` beside each), and the
    value of the options in METAVARS shown by its form instead of its Python type."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
        elif p.metavar is None and METAVARS.keys() & set(getattr(p, "opts", ())):
            p.metavar = next(METAVARS[o] for o in p.opts if o in METAVARS)
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


class _Command(TyperCommand):
    """A gencc subcommand: its help rewrapped at the terminal's width and its flags shown without a type label."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


class _Group(TyperGroup):
    """A gencc command group: its help rewrapped at the terminal's width and its flags shown without a type
    label."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = unwrapped(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


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

