"""The `gencc` command line (Typer). Subcommands live beside what they drive and are registered here."""

from __future__ import annotations

import typer

app = typer.Typer(help="gencc: general coded computing (straggler-resilient computation of any function).",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _root() -> None:
    """gencc: general coded computing."""


@app.command()
def info() -> None:
    """Print the codes (with their options), kernels, point designs and straggler patterns this install provides."""
    from rich.console import Console
    from rich.markup import escape

    from . import __version__
    from .codes.registry import CODES
    from .kernels import KERNELS
    from .points import DESIGNS, NESTED
    from .stragglers import PATTERNS

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


# Subcommands registered from their own modules (each adds one line below).
app.command("demo")(__import__("gencc.demo", fromlist=["demo_command"]).demo_command)
app.command()(__import__("gencc.experiments.commands", fromlist=["sweep"]).sweep)
app.command()(__import__("gencc.experiments.commands", fromlist=["plot"]).plot)
app.command()(__import__("gencc.experiments.commands", fromlist=["reproduce"]).reproduce)
app.command("run")(__import__("gencc.runtime.commands", fromlist=["run_command"]).run_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
