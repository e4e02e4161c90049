"""gencc.metrics.leakage_bits: the mutual information between the inputs and what T colluding workers see,
against a Monte Carlo estimate from the codes' own encoders, the Gaussian channel's closed form on a code defined
here, brute force over the colluding sets, and its limits (no masks: unbounded; more mask: less leakage)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from gencc import metrics
from gencc.codes import BACC, GCC, LCC, Capabilities

rng = np.random.default_rng(11)


def monte_carlo_bits(code, S, Sigma, d=200_000):
    """I(x; z_S) in bits per coordinate estimated from d coordinates run through `code.encode` (fresh masks, the
    inputs drawn from N(0, Sigma) across the K inputs): the Gaussian mutual information of the sample covariance."""
    L = np.linalg.cholesky(Sigma)
    X = L @ rng.standard_normal((code.K, d))
    Z = code.encode(X)[list(S)]
    C = np.cov(np.vstack([X, Z]))
    K = code.K
    nats = 0.5 * (np.linalg.slogdet(C[:K, :K])[1] + np.linalg.slogdet(C[K:, K:])[1] - np.linalg.slogdet(C)[1])
    return nats / np.log(2)


@pytest.mark.parametrize("cls,kw", [(GCC, {}), (BACC, {}), (LCC, {"degree": 1})])
@pytest.mark.parametrize("T", [1, 2])
def test_leakage_agrees_with_monte_carlo(cls, kw, T):
    code = cls(6, 12, colluders=T, mask_scale=3.0, seed=T, **kw)
    A = rng.normal(size=(6, 6))
    Sigma = A @ A.T / 6 + 0.5 * np.eye(6)  # correlated inputs
    sets = list(combinations(range(12), T))
    bits = np.array([metrics.leakage_bits(code, cov=Sigma, workers=S) for S in sets])
    for S in [sets[int(np.argmax(bits))], sets[int(np.argsort(bits)[len(bits) // 2])]]:  # the worst and a median set
        # the code scales its masks by the sample's rms; the model by sqrt(mean(diag cov)): equal for large d
        exact = metrics.leakage_bits(code, cov=Sigma, workers=S)
        assert monte_carlo_bits(code, S, Sigma) == pytest.approx(exact, rel=0.10)
    assert metrics.leakage_bits(code, cov=Sigma) == pytest.approx(bits.max())


def test_single_worker_closed_form():
    """One colluder: I = 1/2 log2(1 + |E[n]|^2 / (s^2 |E_mask[n]|^2)) with unit-variance inputs."""
    code = BACC(8, 24, colluders=1, mask_scale=2.5)
    E, B = code.encoding_matrix, code.mask_matrix
    want = 0.5 * np.log2(1 + np.sum(E**2, axis=1) / (2.5**2 * np.sum(B**2, axis=1)))
    got = [metrics.leakage_bits(code, workers=[n]) for n in range(24)]
    assert np.allclose(got, want)
    res = metrics.leakage(code)
    assert res.exact and res.workers == (int(np.argmax(want)),) and res.bits == pytest.approx(want.max())


class Channel:
    """A code defined here: K = 1 input, worker n sees a_n x + b_n m (the additive Gaussian noise channel)."""

    def __init__(self, a, b, mask_scale):
        self.encoding_matrix = np.asarray(a, dtype=float).reshape(-1, 1)
        self.mask_matrix = np.asarray(b, dtype=float).reshape(len(a), -1)
        self.mask_scale = mask_scale
        self.capabilities = Capabilities(colluders=self.mask_matrix.shape[1])


def test_gaussian_channel_capacity_formula():
    # z = x + s m: I = 1/2 log2(1 + P / s^2) with input variance P
    ch = Channel([1.0], [1.0], mask_scale=0.5)
    assert metrics.leakage_bits(ch, cov=4.0) == pytest.approx(0.5 * np.log2(1 + 4.0 / (0.5**2 * 4.0)))
    # two workers sharing one mask: z1 - z2 cancels it, so together they see x exactly
    ch2 = Channel([1.0, 2.0], [1.0, 1.0], mask_scale=1.0)
    assert metrics.leakage_bits(ch2, colluders=2) == np.inf
    # two masks, two workers: whitening by B gives I = 1/2 log2 det(I + B^-1 a a^T B^-T / s^2)
    a, B = np.array([1.0, -0.5]), np.array([[1.0, 0.3], [0.2, 2.0]])
    ch3 = Channel(a, B, mask_scale=1.5)
    g = np.linalg.solve(B, a)
    assert metrics.leakage_bits(ch3, colluders=2) == pytest.approx(0.5 * np.log2(1 + g @ g / 1.5**2))


@pytest.mark.parametrize("cls,kw", [(GCC, {}), (BACC, {}), (LCC, {"degree": 1})])
@pytest.mark.parametrize("T", [1, 2, 4])
def test_leakage_falls_as_the_masks_grow(cls, kw, T):
    code = cls(8, 24, colluders=T, **kw)
    bits = [metrics.leakage_bits(code, mask_scale=s) for s in (0.25, 1.0, 4.0, 16.0, 64.0)]
    assert all(np.isfinite(bits)) and all(b > c for b, c in zip(bits, bits[1:], strict=False))


@pytest.mark.parametrize("cls,kw", [(GCC, {}), (BACC, {}), (LCC, {"degree": 1})])
def test_without_masks_the_view_is_unbounded(cls, kw):
    plain = cls(8, 24, **kw)
    assert metrics.leakage_bits(plain) == np.inf  # the non-private code: invertible view, unbounded
    assert metrics.leakage_bits(cls(8, 24, colluders=2, mask_scale=0.0, **kw)) == np.inf
    assert metrics.leakage_bits(cls(8, 24, colluders=2, **kw), mask_scale=0.0) == np.inf
    assert metrics.leakage_bits(cls(8, 24, colluders=1, **kw), colluders=2) == np.inf  # more colluders than masks


def test_search_finds_the_worst_set_found_by_brute_force():
    code = GCC(8, 24, colluders=3, mask_scale=2.0)
    exact = metrics.leakage(code)
    found = metrics.leakage(code, max_sets=10)
    assert exact.exact and not found.exact
    assert found.bits <= exact.bits * (1 + 1e-9)
    assert found.bits == pytest.approx(exact.bits, rel=1e-6)


def test_bad_arguments_are_refused():
    code = LCC(4, 12, 1, colluders=1)
    with pytest.raises(ValueError, match="cov must be"):
        metrics.leakage_bits(code, cov=np.ones((3, 3)))
    with pytest.raises(ValueError, match="workers must be distinct"):
        metrics.leakage_bits(code, workers=[1, 1])
    with pytest.raises(ValueError, match="colluders"):
        metrics.leakage_bits(code, colluders=13)
