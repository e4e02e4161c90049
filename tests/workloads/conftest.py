"""One fresh cache root for the session's workload tests, and `get(name)`: each model trains once there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gencc.workloads import Workload, load


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh cache root for the whole session: each model trains once."""
    return tmp_path_factory.mktemp("gencc-cache")


@pytest.fixture(scope="session")
def first_load(cache: Path) -> dict[str, tuple[Workload, float]]:
    return {}


@pytest.fixture
def get(cache: Path, first_load: dict[str, tuple[Workload, float]]):
    def _get(name: str) -> Workload:
        if name not in first_load:
            t0 = time.perf_counter()
            w = load(name, progress=False, cache_dir=cache)
            first_load[name] = (w, time.perf_counter() - t0)
        return first_load[name][0]

    return _get
