"""One fresh cache root for the session's workload tests, and `get(name)`: each model trains once there.

mnist1d-cnn trains for about a minute of one core. When its tests are selected, its training starts in a child
process as the session starts, into the session's cache root, so it runs beside the rest of the session (which
leaves a core idle much of the time) instead of adding its minute to it; `get` waits for that process and then
loads the model it trained, or trains in the test itself if the process failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gencc.workloads import Workload, load

#: the workload trained in the background from the session's start
BACKGROUND = "mnist1d-cnn"
#: seconds `get` waits for the background training before training itself
BACKGROUND_WAIT_S = 900
_background: dict[str, object] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if (config.option.collectonly or hasattr(config, "workerinput")
            or not any(f"[{BACKGROUND}]" in item.nodeid and "tests/workloads/" in item.nodeid
                       for item in session.items)):
        return
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    root = config._tmp_path_factory.mktemp("gencc-cache")
    code = f"from gencc.workloads import load; load({BACKGROUND!r}, progress=False, cache_dir={str(root)!r})"
    log = root / "background-training.log"  # a file, not a pipe: the child never blocks on a full pipe
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=err)
    _background.update(cache=root, proc=proc, log=log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    proc = _background.get("proc")
    if isinstance(proc, subprocess.Popen) and proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh cache root for the whole session: each model trains once."""
    root = _background.get("cache")
    return root if isinstance(root, Path) else tmp_path_factory.mktemp("gencc-cache")


@pytest.fixture(scope="session")
def first_load(cache: Path) -> dict[str, tuple[Workload, float]]:
    return {}


def _wait_for_background(name: str) -> None:
    proc = _background.get("proc")
    if name != BACKGROUND or not isinstance(proc, subprocess.Popen):
        return
    try:
        proc.wait(timeout=BACKGROUND_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.returncode != 0:  # the test trains it itself, and fails there if training is broken
        log = _background["log"]
        err = log.read_text(errors="replace")[-2000:] if isinstance(log, Path) and log.exists() else ""
        print(f"background training of {name} failed (exit {proc.returncode}): {err}")


@pytest.fixture
def get(cache: Path, first_load: dict[str, tuple[Workload, float]]):
    def _get(name: str) -> Workload:
        if name not in first_load:
            _wait_for_background(name)
            t0 = time.perf_counter()
            w = load(name, progress=False, cache_dir=cache)
            first_load[name] = (w, time.perf_counter() - t0)
        return first_load[name][0]

    return _get
