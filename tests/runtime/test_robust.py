"""run / stream with adversaries= on the local backend: a worker returning finite garbage is excluded and named."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.runtime import JobFailed, Uncoded, run, stream
from gencc.runtime.robust import REASON

from .runtime_helpers import Faulty, reference, smooth


@pytest.fixture
def X():
    """Six inputs along a random walk: neighbours similar, so f o u_enc is smooth enough to check results
    against each other (six independent random inputs on 16 workers are not: honest LOO residuals there
    reach 4x the results' spread, and the robust decode rightly cannot tell them from lies)."""
    return np.cumsum(np.random.default_rng(0).normal(size=(6, 4)), axis=0) / 4


def liar_setup(X, code, liars):
    """f that returns garbage on the coded inputs of workers `liars` (order=False, so the encode is fixed)."""
    Xt = code.encode(np.asarray(X))
    return Faulty([(Xt[w], "garbage") for w in liars])


# GCC's liars include systematic workers (beta on an alpha), whose results the decode copies straight out
@pytest.mark.parametrize("make,liars", [(lambda: gencc.GCC(K=6, N=16), [4]), (lambda: gencc.GCC(K=6, N=20), [3, 11]),
                                        (lambda: gencc.BACC(K=6, N=16), [9])])
def test_garbage_worker_is_excluded_and_reported(ex, X, make, liars):
    code = make()
    f = liar_setup(X, code, liars)
    r = run(f, X, code, ex, order=False, adversaries=len(liars))
    assert sorted(w for w, why in r.stragglers.items() if why == REASON) == liars
    assert not set(liars) & set(r.returned.tolist())
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-10)
    # without the bound the garbage goes straight into the outputs
    plain = run(f, X, code, ex, order=False)
    assert plain.stragglers == {} and np.abs(plain.outputs - r.outputs).max() > 1e-2


def test_honest_run_flags_nobody_and_equals_the_plain_decode(ex, X):
    code = gencc.GCC(K=6, N=16)
    r = run(smooth, X, code, ex, order=False, adversaries=2)
    assert r.stragglers == {} and r.returned.tolist() == list(range(16))
    np.testing.assert_allclose(r.outputs, reference(code, X, range(16)), atol=1e-12)


def test_waits_for_enough_results_to_set_A_aside(ex, X):
    code = gencc.GCC(K=6, N=16)
    f = liar_setup(X, code, [4])
    lat = np.where(np.arange(16) >= 11, 2.0, 0.1)  # 11 arrive soon, 5 much later
    lat[4] = 0.0  # the liar answers first
    r = run(f, X, code, ex, order=False, wait_for=3, latency=lat, adversaries=3)
    # GCC needs 2 + 2*3 = 8 results; wait_for=3 alone would stop at 3
    assert r.stragglers.get(4) == REASON
    flagged = [w for w, why in r.stragglers.items() if why == REASON]
    assert r.returned.size + len(flagged) == 8 and max(r.returned.max(), *flagged) < 11
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-10)


def test_stream_passes_the_bound(ex, X):
    code = gencc.GCC(K=6, N=16)
    f = liar_setup(X, code, [7])
    results = list(stream(f, [X, X], code, ex, order=False, adversaries=1))
    assert all(r.stragglers.get(7) == REASON for r in results)


def test_lcc_corrects_exactly_at_run_time(ex):
    X = np.random.default_rng(1).normal(size=(3, 2))
    code = gencc.LCC(K=3, N=9, degree=2)  # threshold 5, 2 adversaries need 9

    def square(Z):
        Z = np.asarray(Z, dtype=float)
        Y = Z**2
        Y[np.isclose(Z[:, 0], code.encode(X)[2, 0])] += 4.0
        return Y

    square.batched = True
    r = run(square, X, code, ex, order=False, adversaries=2)
    assert r.stragglers == {2: REASON}
    np.testing.assert_allclose(r.outputs, X**2, atol=1e-8)


def test_bad_bounds_are_clear_errors(ex, X):
    with pytest.raises(ValueError, match="non-negative integer"):
        run(smooth, X, gencc.GCC(K=6, N=16), ex, adversaries=-1)
    with pytest.raises(ValueError, match="cannot decode with adversaries=8"):
        run(smooth, X, gencc.GCC(K=6, N=16), ex, adversaries=8)
    with pytest.raises(ValueError, match="no robust decode"):
        run(smooth, X, Uncoded(6), ex, adversaries=1)
    code = gencc.LCC(K=3, N=9, degree=1)
    f = Faulty([(w, "garbage") for w in code.encode(X[:3])[[0, 4, 6]]])
    with pytest.raises(JobFailed, match="robust decode failed"):
        run(f, X[:3], code, ex, order=False, adversaries=1)
