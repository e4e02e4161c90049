"""BLAS threads under the engine's worker threads (threadpoolctl).

numpy and scipy each bring an OpenBLAS with one thread per core, and every worker thread that calls into it
starts all of them: W worker threads on C cores run W x C BLAS threads, and a matmul that takes 2 ms alone can
take a second under load. `acquire(n)` caps them while a pool of workers runs: OpenBLAS's limit is
process-wide, so the pools share one cap (the smallest asked), applied when the first pool starts and lifted
(the original limits restored) when the last one closes. OpenMP (torch's intra-op threads) is left alone: its
limit is per thread, and capping it in the worker threads only made torch calls in the other threads (the
caller's) several times slower here (libgomp).
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_HELD: list[int] = []  # the limits of the pools running now
_ORIGINAL: Any = None  # threadpoolctl's handle on the limits before the first pool (restored after the last)


def resolve(blas_threads: int | str | None, threads: int) -> int | None:
    """The BLAS threads of a pool of `threads` worker threads: `"auto"` is 1 when several run (else untouched),
    None leaves the libraries as they are, an integer is that many."""
    if blas_threads == "auto":
        return 1 if threads > 1 else None
    if blas_threads is None:
        return None
    if isinstance(blas_threads, bool) or not isinstance(blas_threads, int) or blas_threads < 1:
        raise ValueError(f"blas_threads must be 'auto', None or a positive integer, got {blas_threads!r}")
    return blas_threads


def acquire(n: int | None) -> None:
    """A pool with limit `n` starts (None: no limit asked)."""
    global _ORIGINAL
    if n is None:
        return
    from threadpoolctl import threadpool_limits

    with _LOCK:
        if not _HELD:
            _ORIGINAL = threadpool_limits(limits=n, user_api="blas")
        elif n < min(_HELD):
            threadpool_limits(limits=n, user_api="blas")
        _HELD.append(n)


def release(n: int | None) -> None:
    """A pool with limit `n` closed; the last one restores the original limits."""
    global _ORIGINAL
    if n is None:
        return
    from threadpoolctl import threadpool_limits

    with _LOCK:
        if n in _HELD:
            _HELD.remove(n)
        if not _HELD and _ORIGINAL is not None:
            _ORIGINAL.restore_original_limits()
            _ORIGINAL = None
        elif _HELD:
            threadpool_limits(limits=min(_HELD), user_api="blas")


def current() -> dict[str, int]:
    """The thread counts of the loaded BLAS and OpenMP libraries, by internal name (for benchmarks)."""
    from threadpoolctl import threadpool_info

    return {f"{i['internal_api']}:{i.get('prefix', '')}": int(i["num_threads"]) for i in threadpool_info()}
