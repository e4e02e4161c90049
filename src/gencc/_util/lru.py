"""One bounded least-recently-used map, shared by every cache in gencc (decoding matrices, LOO factors, flags)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


class LRU(Generic[K, V]):
    """A thread-safe map holding at most `maxsize` entries; the least recently used one is dropped first.

    `get_or_build(key, build)` returns the cached value or stores `build()`; `build` runs outside the lock, so
    two threads may build the same entry once each (the first stored wins), but no thread waits on another's build.
    """

    def __init__(self, maxsize: int):
        if int(maxsize) < 1:
            raise ValueError(f"an LRU cache needs maxsize >= 1, got {maxsize}")
        self.maxsize = int(maxsize)
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def _touch(self, key: K) -> Any:
        """The value at `key`, marked most recently used, or _MISSING (the caller holds the lock)."""
        value = self._data.get(key, _MISSING)
        if value is not _MISSING:
            self._data.move_to_end(key)
        return value

    def _store(self, key: K, value: V) -> None:
        """Store `value` as the most recently used entry and drop the oldest beyond maxsize (lock held)."""
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            value = self._touch(key)
        return default if value is _MISSING else value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._store(key, value)

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        with self._lock:
            value = self._touch(key)
        if value is not _MISSING:
            return value
        built = build()
        with self._lock:
            value = self._touch(key)  # another thread stored it meanwhile: keep one value
            if value is not _MISSING:
                return value
            self._store(key, built)
            return built

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._data.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)
