"""A command run in a loopback-only namespace (`run_forwarding`, as `gencc serve --backend ray` runs its server)
that is killed outright leaves nothing running in its namespace: Ray's agents outlived a killed server there."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gencc.engine.ray.namespace import can_unshare, end_namespace, in_loopback_namespace, run_forwarding


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_what_a_killed_command_leaves_in_its_namespace_is_ended(tmp_path: Path) -> None:
    ok, why = can_unshare()
    if not ok or in_loopback_namespace():
        pytest.skip(f"needs a loopback-only namespace made from outside one ({why})")
    marker = tmp_path / "pid"
    rc = run_forwarding(["sh", "-c", f'sleep 300 & echo $! > "{marker}"; sleep 0.5; kill -9 $$'])
    assert rc == -9  # killed outright: no chance to stop what it started
    pid = int(marker.read_text())
    deadline = time.monotonic() + 5
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not running(pid)


def test_this_process_namespace_is_never_ended() -> None:
    assert end_namespace(os.readlink("/proc/self/ns/net")) == []
