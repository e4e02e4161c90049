"""Re-execute the Ray tests inside a loopback-only network namespace, so Ray never binds a routable address."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import typer

HERE = Path(__file__).parent


# examples/ray_job.py (tests/test_examples.py's ray test) runs here too: nothing else re-executes that file
@pytest.mark.slow
@pytest.mark.ray_suite(HERE / "test_ray.py", HERE / "test_ray_cluster.py", HERE.parent / "test_examples.py")
def test_ray_suite_in_loopback_namespace(run_ray_tests_in_namespace):
    run_ray_tests_in_namespace()


def test_command_line_passes_on_only_what_was_typed(monkeypatch):
    from typer.testing import CliRunner

    from gencc.cli.isolate import command_line

    app, seen = typer.Typer(), []

    @app.callback()
    def root(level: str = "info") -> None:
        pass

    @app.command()
    def serve(ctx: typer.Context, port: int = 1, rate: float = 0.5, isolate: bool = True, out: Path | None = None,
              secret: str | None = typer.Option(None, envvar="GENCC_TEST_SECRET")) -> None:
        seen.append(command_line(ctx))

    @app.command()
    def other() -> None:  # two commands: `serve` is a subcommand, as in gencc
        pass

    r = CliRunner().invoke(app, ["--level", "debug", "serve", "--rate", "2.5", "--no-isolate", "--out", "a b.csv"],
                           env={"GENCC_TEST_SECRET": "hunter2"})
    assert r.exit_code == 0, r.output
    assert seen == [[sys.executable, "-m", "gencc.cli", "--level", "debug", "serve", "--rate", "2.5", "--no-isolate",
                     "--out", "a b.csv"]]


def test_a_socket_bound_outside_is_served_from_inside_the_namespace(tmp_path):
    """The mechanism of `gencc serve --backend ray`: the port is bound here, the server inside the loopback-only
    namespace inherits it and answers this network's clients; signals are passed on; its TMPDIR is removed."""
    from gencc.engine.ray.namespace import LISTEN_FD, can_unshare, listening_socket, run_forwarding

    ok, why = can_unshare()
    if not ok:
        pytest.skip(f"no loopback-only namespace here ({why})")
    child = ("import os, signal, time\n"
             "from gencc.engine.ray.namespace import inherited_socket, interfaces\n"
             "s = inherited_socket()\n"
             "c, _ = s.accept()\n"
             "c.sendall((repr(interfaces()) + ' ' + os.environ['TMPDIR']).encode()); c.close()\n"
             "signal.signal(signal.SIGTERM, lambda *a: os._exit(7))\n"
             "time.sleep(60)\n")
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    env = {**os.environ, LISTEN_FD: str(sock.fileno()), "TMPDIR": str(tmp_path)}
    got: list[str] = []

    def client() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.settimeout(30)
            got.extend(c.recv(4096).decode().split(" "))
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)  # to this process: passed on to the child, which exits 7

    t = threading.Thread(target=client)
    t.start()
    try:
        rc = run_forwarding([sys.executable, "-c", child], env=env, pass_fds=[sock.fileno()])
    finally:
        sock.close()
        t.join(30)
    names, tmp = got
    assert names == "['lo']" and Path(tmp).parent == tmp_path
    assert rc == 7 and not Path(tmp).exists()


def test_ray_run_env_removes_its_private_tmpdir(tmp_path):
    """The environment of every Ray run gencc starts: Ray's settings, a private TMPDIR inside the caller's, removed
    when the block ends, by an exception too."""
    from gencc.engine.ray.namespace import NETNS_FLAG, RAY_ENV, ray_run_env

    with pytest.raises(RuntimeError), ray_run_env({"TMPDIR": str(tmp_path), "KEEP": "1"}) as env:
        private = Path(env["TMPDIR"])
        assert private.parent == tmp_path and private.is_dir() and env["KEEP"] == "1" and env[NETNS_FLAG] == "1"
        assert all(env[k] == v for k, v in RAY_ENV.items())
        raise RuntimeError("the run failed")
    assert not private.exists() and tmp_path.is_dir()
