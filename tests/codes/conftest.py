"""Fixtures of the codes' tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest


def _hammer(work: Callable[[int], None], threads: int = 8) -> list[BaseException]:
    """Run work(t) on `threads` threads started together; the exceptions they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def body(t: int) -> None:
        start.wait()
        try:
            work(t)
        except BaseException as e:  # collected and reported by the test
            errors.append(e)

    ts = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


@pytest.fixture
def hammer() -> Callable[..., list[BaseException]]:
    """`hammer(work, threads=8)`: work(t) on threads started at once (a code shared as `gencc.stream` shares it)."""
    return _hammer
