"""Stopping the processes a test started: as a user would (SIGTERM), killed when that is not enough."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen, grace_s: float = 15.0) -> int | None:
    """SIGTERM `proc` and wait up to `grace_s` for it to exit; then SIGKILL it. Its exit code (None if even the
    kill was not reaped in 5 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                return proc.wait(5)
            except subprocess.TimeoutExpired:
                return None
    return proc.returncode
