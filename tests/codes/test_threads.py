"""Codes shared between threads (as `gencc.stream` shares one): the decoder cache under eviction, and the lam
a cross-validated decode chose, returned with its matrix rather than through shared state."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from itertools import combinations

import numpy as np

from gencc import BACC, GCC
from gencc.codes import base


class _SlowLookup(OrderedDict):
    """A decoder cache whose lookups pause, widening the window between a lookup and the caller's next step
    (so a race that the interpreter's thread switching makes rare shows up in every run)."""

    def get(self, key, default=None):
        value = super().get(key, default)
        time.sleep(1e-4)
        return value


def _hammer(work, threads: int = 8) -> list[BaseException]:
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


def test_decoder_cache_survives_eviction_under_threads(monkeypatch):
    monkeypatch.setattr(base, "DECODER_CACHE_SIZE", 2)
    K, N = 3, 7
    code = BACC(K, N)
    code._cache = _SlowLookup()
    patterns = [np.array(c) for c in combinations(range(N), N - 2)][:5]
    want = {tuple(r): code._decoding_matrix(r, None) for r in patterns}
    picks = np.random.default_rng(0).integers(0, len(patterns), size=(8, 150))

    def work(t: int) -> None:
        for i in picks[t]:
            r = patterns[i]
            np.testing.assert_array_equal(code.decoding_matrix(r), want[tuple(r)])

    errors = _hammer(work)
    assert not errors, f"{len(errors)} thread(s) failed, first: {errors[0]!r}"
    assert len(code._cache) <= 2


def test_cross_validated_lam_comes_back_with_its_matrix():
    K, N = 6, 24
    code = GCC(K, N, kernel="cubic", lam_dec="gcv")
    rng = np.random.default_rng(1)
    Yall = np.sin(2 * code.encode(np.linspace(-1, 1, K)[:, None])) + rng.normal(0, 0.05, (N, 1))
    cases = []
    for s in range(6):  # different results give different lams
        r = np.sort(rng.choice(N, size=16, replace=False))
        Y = Yall[r] * (1 + s)
        cases.append((r, Y, *code.decoding_matrix_and_lam(r, Y)))
    assert len({lam for *_, lam in cases}) > 1

    def work(t: int) -> None:
        for j in range(24):
            r, Y, D0, lam0 = cases[(t + j) % len(cases)]
            D, lam = code.decoding_matrix_and_lam(r, Y)
            assert lam == lam0
            np.testing.assert_array_equal(D, D0)

    errors = _hammer(work)
    assert not errors, f"{len(errors)} thread(s) failed, first: {errors[0]!r}"


def test_a_code_pickles_with_its_own_lock():
    import pickle

    code = GCC(4, 9)
    r = np.arange(1, 9)
    D = code.decoding_matrix(r)
    copy = pickle.loads(pickle.dumps(code))
    assert copy._cache_lock is not code._cache_lock and len(copy._cache) == 0
    np.testing.assert_array_equal(copy.decoding_matrix(r), D)
