"""gencc.serving.service helpers."""

from __future__ import annotations


def test_freeze_heap_collects_garbage_then_freezes_the_live_heap():
    import gc
    import weakref

    from gencc.serving import freeze_heap

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a reference cycle: only the cycle collector frees it
    dead = weakref.ref(a)
    del a, b
    live = [Node() for _ in range(100)]
    try:
        freeze_heap()
        assert dead() is None  # collected before the freeze, not frozen forever
        assert gc.get_freeze_count() >= len(live)
        assert not any(o is live[0] for o in gc.get_objects())  # frozen objects are out of the collector's reach
    finally:
        gc.unfreeze()
