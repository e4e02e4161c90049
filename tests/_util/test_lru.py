"""gencc._util.lru.LRU: the one bounded cache (eviction order, one value per key under a race, a stored None)."""

import threading

import pytest

from gencc._util.lru import LRU


def test_the_least_recently_used_entry_goes_first():
    c = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1  # a is now the most recent
    c.put("c", 3)
    assert "b" not in c and c.get("a") == 1 and c.get("c") == 3 and len(c) == 2
    assert c.get("b", "gone") == "gone" and c.pop("a") == 1 and len(c) == 1


def test_a_stored_none_is_a_hit_not_a_miss():
    c = LRU(2)
    calls = []
    c.put("k", None)
    assert c.get_or_build("k", lambda: calls.append(1) or 5) is None and not calls


def test_racing_builds_keep_the_first_stored_value():
    c = LRU(4)
    started, release = threading.Barrier(2), threading.Event()

    def slow():
        started.wait()
        release.wait(5)
        return "slow"

    out = []
    t = threading.Thread(target=lambda: out.append(c.get_or_build("k", slow)))
    t.start()
    started.wait()
    assert c.get_or_build("k", lambda: "fast") == "fast"
    release.set()
    t.join(5)
    assert out == ["fast"] and c.get("k") == "fast"


def test_maxsize_must_be_positive():
    with pytest.raises(ValueError, match="maxsize >= 1"):
        LRU(0)
