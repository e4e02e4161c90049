"""Keep Ray's traffic on loopback: run a command inside a network namespace that has only `lo`.

Ray binds the machine's network address unless told otherwise; inside `unshare -n` there is nothing but the
loopback interface, so nothing can leave the machine. Tests and benchmarks re-execute their Ray part this way.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence

#: environment set explicitly for every Ray run gencc starts
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

#: set inside the namespace so a re-executed process knows where it is
NETNS_FLAG = "GENCC_LOOPBACK_NETNS"


def interfaces() -> list[str]:
    """Network interfaces of this process's network namespace (from the kernel, not /sys, which may be stale)."""
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def in_loopback_namespace() -> bool:
    """True when the only network interface is the loopback one."""
    return interfaces() == ["lo"]


def can_unshare() -> tuple[bool, str]:
    """Whether `unshare -n` works here (root or user namespaces); with the reason when it does not."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False, "unshare or ip not installed"
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return (p.returncode == 0, p.stderr.strip() or "ok")


def loopback_command(argv: Sequence[str]) -> list[str]:
    """argv wrapped to run in a fresh loopback-only network namespace (lo brought up first)."""
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def ray_env(base: dict | None = None) -> dict[str, str]:
    """An environment for a Ray run: auth mode and usage stats set explicitly, a private TMPDIR, the flag."""
    env = dict(os.environ if base is None else base)
    env.update(RAY_ENV)
    env["TMPDIR"] = tempfile.mkdtemp(prefix="gencc-ray-")
    env[NETNS_FLAG] = "1"
    return env


def run_in_loopback(argv: Sequence[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run argv in a loopback-only namespace with `ray_env()`; returns the completed process."""
    return subprocess.run(loopback_command(argv), env=ray_env(kwargs.pop("env", None)), timeout=timeout, **kwargs)
