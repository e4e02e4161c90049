"""Fixtures of the engine's tests."""

from __future__ import annotations

import pytest

from .oip_replica import Replica


@pytest.fixture
def replicas():
    """make(n, **kw): n small Open Inference Protocol servers on loopback (`oip_replica.Replica(**kw)`), killed
    after the test."""
    made: list[Replica] = []

    def make(n: int = 2, **kw) -> list[Replica]:
        new = [Replica(**kw) for _ in range(n)]
        made.extend(new)
        return new

    yield make
    for r in made:
        r.kill()
