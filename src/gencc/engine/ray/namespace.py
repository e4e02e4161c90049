"""Keep Ray's traffic on loopback: run a command inside a network namespace that has only `lo`.

Ray binds the machine's network address unless told otherwise; inside a fresh network namespace there is
nothing but the loopback interface, so nothing can leave the machine. The tests, the latency benchmark,
`gencc run`, `gencc serve` and `gencc train` with `--backend ray` re-execute their Ray part this way (a server's
port is bound outside first and handed over, so clients still reach it; the commands' re-run wrapper is
`gencc.cli.isolate`). Root gets the namespace from `unshare -n`; an
ordinary user from `unshare -rn` (a user namespace in which it is root, where the kernel allows user
namespaces: /proc/sys/user/max_user_namespaces > 0).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: environment set explicitly for every Ray run gencc starts
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

#: Ray's settings that keep its noise out of a private Ray's output, set where the environment does not set them
#: (Ray reads the first and last when it is imported, so they are set before a Ray run's process starts).
#: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: Ray takes the node address 127.0.0.1 as it is instead of replacing it by
#: "a remotely reachable IP", which it finds by a UDP connect towards 8.8.8.8:53 (the "Failed to determine local
#: IP via external connectivity" warning inside the namespace); RAY_COLOR_PREFIX=0: no colour codes around the
#: "(raylet)" prefix of the messages Ray prints on the driver; RAY_DEDUP_LOGS=0: no green "[repeated Nx across
#: cluster]" note (a repeated message is printed again instead).
RAY_QUIET_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_COLOR_PREFIX": "0", "RAY_DEDUP_LOGS": "0"}

#: set inside the namespace so a re-executed process knows where it is
NETNS_FLAG = "GENCC_LOOPBACK_NETNS"

#: the unshare flags tried in order: a network namespace (needs root), then user + network namespaces
UNSHARE_FLAGS = ("-n", "-rn")


def interfaces() -> list[str]:
    """Network interfaces of this process's network namespace (from the kernel, not /sys, which may be stale)."""
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def in_loopback_namespace() -> bool:
    """True when the only network interface is the loopback one."""
    return interfaces() == ["lo"]


@functools.cache
def unshare_flags() -> tuple[str | None, str]:
    """The first of UNSHARE_FLAGS that gives a loopback-only namespace here, and a description of the outcome
    (how, or why neither works); (None, why) when none does. Probed once per process."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None, "unshare or ip not installed"
    errors = []
    for flag in UNSHARE_FLAGS:
        try:
            p = subprocess.run(["unshare", flag, "sh", "-c", "ip link set lo up"], capture_output=True, text=True,
                               timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"unshare {flag}: {e}")
            continue
        if p.returncode == 0:
            how = "network namespace, as root" if flag == "-n" else "user + network namespace, as an ordinary user"
            return flag, f"`unshare {flag}` ({how})"
        errors.append(f"unshare {flag}: {p.stderr.strip() or f'exit {p.returncode}'}")
    return None, "; ".join(errors)


def can_unshare() -> tuple[bool, str]:
    """Whether a loopback-only namespace can be made here (`unshare -n` as root, else `unshare -rn`), with the
    way it is made or the reason it cannot."""
    flag, why = unshare_flags()
    return flag is not None, why


def loopback_command(argv: Sequence[str]) -> list[str]:
    """argv wrapped to run in a fresh loopback-only network namespace (lo brought up first)."""
    flag, why = unshare_flags()
    if flag is None:
        raise RuntimeError(f"cannot create a loopback-only network namespace here: {why}")
    return ["unshare", flag, "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def ray_env(base: dict | None = None) -> dict[str, str]:
    """An environment for a Ray run: auth mode and usage stats set explicitly, `RAY_QUIET_ENV` where not set, a
    private TMPDIR (inside the environment's own TMPDIR, if set), the flag."""
    env = dict(os.environ if base is None else base)
    env.update(RAY_ENV)
    for key, value in RAY_QUIET_ENV.items():
        env.setdefault(key, value)
    env["TMPDIR"] = tempfile.mkdtemp(prefix="gencc-ray-", dir=env.get("TMPDIR") or None)
    env[NETNS_FLAG] = "1"
    return env


@contextmanager
def ray_run_env(base: dict | None = None) -> Iterator[dict[str, str]]:
    """`ray_env(base)` for the run inside the block; its private TMPDIR is removed when the block ends."""
    env = ray_env(base)
    try:
        yield env
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)


def run_in_loopback(argv: Sequence[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run argv in a loopback-only namespace with `ray_env()` (its private TMPDIR removed afterwards)."""
    with ray_run_env(kwargs.pop("env", None)) as env:
        return subprocess.run(loopback_command(argv), env=env, timeout=timeout, **kwargs)


#: names the listening socket a re-executed `gencc serve` inherits (bound outside the namespace)
LISTEN_FD = "GENCC_LISTEN_FD"
#: signals a re-executing command passes on to the command inside the namespace
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_forwarding(argv: Sequence[str], *, pass_fds: Sequence[int] = (), env: dict | None = None) -> int:
    """Run argv in a loopback-only namespace with `ray_env(env)`, passing on SIGTERM, SIGINT and SIGHUP (so a
    server inside shuts down gracefully; when called from the main thread), and return its exit status; its
    private TMPDIR is removed after, and so is any process still left in its namespace (`end_namespace`: what a
    command killed outright leaves, e.g. Ray's agents)."""
    old: dict[int, Any] = {}
    with ray_run_env(env) as run_env:
        net = None
        try:
            proc = subprocess.Popen(loopback_command(argv), env=run_env, pass_fds=tuple(pass_fds))
            if threading.current_thread() is threading.main_thread():  # where Python lets handlers be set
                for sig in FORWARDED:
                    old[sig] = signal.signal(sig, lambda s, _frame: proc.send_signal(s))
            net = _namespace_of(proc)
            while True:
                try:
                    return proc.wait()
                except KeyboardInterrupt:  # pragma: no cover - the handler above replaces SIGINT's
                    proc.send_signal(signal.SIGINT)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if net is not None:
                end_namespace(net)


def _net_namespace(pid: int | str) -> str | None:
    """The network namespace of process `pid` ("net:[inode]"), None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _namespace_of(proc: subprocess.Popen, timeout: float = 10.0) -> str | None:
    """The network namespace `proc` moved into (it starts in this one and unshares its own), read while it runs;
    None if it ended first or had not moved within `timeout` seconds."""
    import time

    here, deadline = _net_namespace("self"), time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        net = _net_namespace(proc.pid)
        if net is not None and net != here:
            return net
        time.sleep(0.01)
    return None


def end_namespace(net: str) -> list[int]:
    """Kill (SIGKILL) every process of this user still in the network namespace `net` (one `run_forwarding`
    made, which nothing else uses: its command has ended); the ids of those killed. When a command inside is killed
    outright, Ray's dashboard and runtime-env agents outlive it there."""
    if net == _net_namespace("self"):
        return []  # never this process's own namespace
    killed = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _net_namespace(entry) == net:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except OSError:  # gone meanwhile, or not ours
                pass
    return killed


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port and listening, inheritable: bound here, outside the namespace, it keeps
    accepting connections from this network while the server that inherits it runs inside."""
    family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(addr)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def inherited_socket() -> socket.socket | None:
    """The listening socket named by $GENCC_LISTEN_FD (family detected from the descriptor), else None."""
    fd = os.environ.pop(LISTEN_FD, None)
    if fd is None:
        return None
    sock = socket.socket(fileno=int(fd))
    sock.set_inheritable(False)  # not passed on to Ray's processes
    return sock
