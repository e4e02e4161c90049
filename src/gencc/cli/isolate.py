"""The one re-run wrapper of the commands that start a private Ray (`gencc run`, `serve`, `train` with
`--backend ray` and no `--address`): run this same command again inside a loopback-only network namespace
(`gencc.engine.ray.namespace`), with `--no-isolate`, and exit with its status; a server's port is bound here
first and handed over, so clients reach it as before."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from ..engine.ray.namespace import LISTEN_FD, can_unshare, in_loopback_namespace, listening_socket, run_forwarding
from .options import refuse


def rerun_isolated(ctx: Any, doing: str, *, host: str | None = None, port: int | None = None) -> None:
    """Re-run the command of the Typer/click context `ctx` inside a loopback-only namespace (signals passed on)
    and exit with its status; nothing to do when already inside one. With `host` and `port` (a server) the port
    is bound here and handed over ($GENCC_LISTEN_FD). `doing` words the note on stderr ("serving", "training").
    Refused (exit 2, naming --backend) where no namespace can be made."""
    if in_loopback_namespace():
        return
    ok, how = can_unshare()
    if not ok:
        raise refuse("--backend", f"a local Ray runs inside a loopback-only network namespace, which cannot be made "
                                  f"here ({how}); pass --address of a cluster you run, or --no-isolate to start Ray "
                                  "bound to 127.0.0.1 without the namespace")
    typer.echo(f"{doing} inside a loopback-only network namespace, made with {how}", err=True)
    argv = [*command_line(ctx), "--no-isolate"]
    if host is None or port is None:
        raise typer.Exit(run_forwarding(argv))
    sock = listening_socket(host, port)
    try:
        status = run_forwarding(argv, pass_fds=[sock.fileno()], env={**os.environ, LISTEN_FD: str(sock.fileno())})
    finally:
        sock.close()
    raise typer.Exit(status)


def command_line(ctx: Any) -> list[str]:
    """`python -m gencc.cli` with the (sub)commands of the Typer/click context `ctx` and the options given on the
    command line to each (`gencc --log-level debug serve --port 9000`: both), not those from defaults or
    environment variables, which the re-executed command gets the same way (a secret read from the environment
    never appears in a process listing)."""
    chain = []
    c = ctx
    while c is not None:
        chain.insert(0, c)
        c = c.parent
    argv = [sys.executable, "-m", "gencc.cli"]
    for i, c in enumerate(chain):
        if i > 0:
            argv.append(c.info_name)
        argv += _typed_options(c)
    return argv


def _typed_options(ctx: Any) -> list[str]:
    """The options of `ctx`'s own command that were given on the command line, as they would be typed."""
    argv: list[str] = []
    for p in ctx.command.params:
        source = ctx.get_parameter_source(p.name)
        if getattr(p, "param_type_name", "") != "option" or getattr(source, "name", "") != "COMMANDLINE":
            continue
        value = ctx.params[p.name]
        if p.is_flag and isinstance(value, bool):
            if value or p.secondary_opts:
                argv.append(p.opts[0] if value else p.secondary_opts[0])
            continue
        for v in value if p.multiple else [value]:
            argv += [p.opts[0], str(getattr(v, "value", v))]
    return argv
