"""Private codes (gencc.codes.private): LCC, BACC and GCC with colluders=T Gaussian masks. Exact decoding of LCC
for polynomial f from any (K+T-1) deg + 1 results, the privacy contract `check_code` holds them to (and a broken
private code it catches), fresh and seedable masks, and the options on every front door."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from gencc.codes import BACC, GCC, LCC, make_code, parse_option
from gencc.codes.private import off_points, private_points
from gencc.rkhs.points import chebyshev2, nested
from gencc.testing import check_code

rng = np.random.default_rng(5)


def poly(W: np.ndarray, deg: int):
    """A polynomial f of degree `deg` defined here: coordinate-wise (x W)^deg plus a linear term."""
    return lambda Z: (Z @ W) ** deg + Z @ W[:, ::-1]


@pytest.mark.parametrize("K,T,deg,N", [(8, 1, 2, 24), (8, 2, 2, 24), (5, 3, 3, 24), (8, 2, 1, 12)])
def test_private_lcc_decodes_polynomials_exactly_from_any_threshold_results(K, T, deg, N):
    code = LCC(K, N, deg, colluders=T, mask_scale=3.0, seed=1)
    assert code.min_results == (K + T - 1) * deg + 1
    f = poly(rng.normal(size=(6, 4)), deg)
    X = rng.normal(size=(K, 6))
    for _ in range(10):
        R = rng.choice(N, code.min_results, replace=False)  # any set, in any order
        Y = f(code.encode(X))[R]
        rel = np.linalg.norm(code.decode(Y, R) - f(X)) / np.linalg.norm(f(X))
        assert rel <= 1e-8
    with pytest.raises(ValueError, match=str(code.min_results)):
        code.decode(Y[:-1], R[:-1])


def test_private_lcc_needs_the_larger_threshold():
    with pytest.raises(ValueError, match=r"\(K\+colluders-1\)\*degree\+1 = 19"):
        LCC(8, 18, 2, colluders=2)


@pytest.mark.parametrize("name,kw", [("gcc", {}), ("bacc", {}), ("lcc", {"degree": 2})])
@pytest.mark.parametrize("T", [1, 2])
def test_private_codes_pass_the_contract(name, kw, T):
    code = make_code(name, 8, 24, colluders=T, seed=0, **kw)
    assert code.capabilities.colluders == T and code.capabilities.private
    assert code.mask_matrix.shape == (24, T)
    check_code(code)


def test_check_code_catches_masks_reused_across_calls():
    class StaleMasks(BACC):
        def encode(self, X):
            self.reseed(7)  # the same masks on every call
            return super().encode(X)

    with pytest.raises(AssertionError, match="fresh masks"):
        check_code(StaleMasks(8, 24, colluders=1))


def test_check_code_catches_a_worker_without_mask():
    class Leaky(GCC):
        @property
        def mask_matrix(self):
            B = np.array(super().mask_matrix)
            B[3] = 0.0
            return B

        def encode(self, X):  # consistent with the matrix it declares: worker 3 gets E X unmasked
            Z = super().encode(X)
            Z[3] = self.encoding_matrix[3] @ X
            return Z

    with pytest.raises(AssertionError, match="weighs the masks"):
        check_code(Leaky(8, 24, colluders=1))


@pytest.mark.parametrize("cls,kw", [(GCC, {}), (BACC, {}), (LCC, {"degree": 1})])
def test_no_worker_sits_on_a_data_or_mask_point_and_masks_are_fresh(cls, kw):
    code = cls(8, 24, colluders=2, seed=3, **kw)
    assert off_points(code.beta, np.concatenate([code.alpha, code.mask_points]))
    X = rng.normal(size=(8, 5))
    Z1, Z2 = code.encode(X), code.encode(X)
    E = code.encoding_matrix
    assert not np.allclose(Z1, Z2)
    for Z in (Z1, Z2):  # the difference from E X is the masks' part, never zero on a worker
        assert np.linalg.norm(Z - E @ X, axis=1).min() > 1e-3
        assert np.linalg.norm(Z[:, None] - X[None], axis=2).min() > 1e-6
    again = cls(8, 24, colluders=2, seed=3, **kw)  # a seed replays the masks
    assert np.array_equal(again.encode(X), Z1) and np.array_equal(again.encode(X), Z2)


def test_mask_scale_is_relative_to_the_inputs_rms():
    code = BACC(8, 24, colluders=1, mask_scale=2.0, seed=0)
    X = 10.0 * rng.normal(size=(8, 20000))
    D = code.encode(X) - code.encoding_matrix @ X
    sd = np.std(D, axis=1) / np.abs(code.mask_matrix[:, 0])
    assert np.allclose(sd, 2.0 * np.sqrt(np.mean(X**2)), rtol=0.03)


def test_points_interleave_masks_among_data():
    pts, data, masks = private_points(8, 2)
    assert pts.size == 10 and data.size == 8 and masks.tolist() == [2, 7]
    assert np.all(np.diff(pts) > 0)


def test_zero_mask_scale_is_not_private():
    code = GCC(8, 24, colluders=1, mask_scale=0.0)
    assert not code.capabilities.private
    X = rng.normal(size=(8, 3))
    assert np.allclose(code.encode(X), code.encoding_matrix @ X)


def test_options_parse_and_build_by_name():
    opts = {k: parse_option("gcc", k, v) for k, v in (("colluders", "2"), ("mask_scale", "4"), ("seed", "none"))}
    assert opts == {"colluders": 2, "mask_scale": 4.0, "seed": None}
    code = make_code("gcc", 8, 24, **opts)
    assert code.colluders == 2 and code.mask_scale == 4.0 and "colluders=2" in repr(code)
    with pytest.raises(ValueError, match="takes an integer >= 0"):
        parse_option("bacc", "colluders", "-1")
    with pytest.raises(ValueError, match="no option 'colluders'"):
        make_code("sgcc", 8, 12, colluders=1)  # systematic by construction: it cannot be private
    with pytest.raises(ValueError, match="places its data and mask points itself"):
        GCC(8, 24, colluders=1, alpha="equispaced")
    pts, data, _ = private_points(8, 1)
    with pytest.raises(ValueError, match="off the data points"):  # nested workers would get inputs raw
        BACC(8, 12, colluders=1, beta=nested(chebyshev2(12), pts[data]))


def test_a_private_code_pickles_and_keeps_drawing_masks():
    code = GCC(8, 24, colluders=1, seed=2)
    copy = pickle.loads(pickle.dumps(code))
    X = rng.normal(size=(8, 4))
    assert np.array_equal(copy.encode(X), code.encode(X))  # the generator travels with its state
    assert not np.allclose(copy.encode(X), copy.encode(X))


def test_torch_inputs_get_masks_in_their_dtype():
    torch = pytest.importorskip("torch")
    code = LCC(4, 12, 1, colluders=2, seed=0)
    X = torch.randn(4, 3, dtype=torch.float32)
    Z = code.encode(X)
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float32
    assert not torch.allclose(Z, torch.tensor(np.array(code.encoding_matrix), dtype=torch.float32) @ X)


def test_robust_decoding_composes_with_privacy_for_lcc():
    code = LCC(4, 16, 1, colluders=2, seed=0)  # threshold 6, one wrong result needs 8
    W = rng.normal(size=(3, 2))
    X = rng.normal(size=(4, 3))
    Y = code.encode(X) @ W
    Y[5] += 10.0
    out, flagged = code.robust_decode(Y, np.arange(16), adversaries=1)
    assert flagged.tolist() == [5]
    assert np.allclose(out, X @ W, atol=1e-8)


@pytest.mark.parametrize("cls", [GCC, BACC])
def test_robust_decoding_runs_on_masked_results(cls):
    """GCC's and BACC's leave-one-out locators on results of f at masked inputs: a sign-flipped worker of a smooth
    (linear) model stands out and is set aside, in most draws (the masks make the curve rougher than without)."""
    Wl = rng.normal(size=(5, 3))
    found = 0
    for t in range(10):
        code = cls(8, 24, colluders=1, seed=t)
        Y = code.encode(rng.normal(size=(8, 5))) @ Wl
        bad = int(rng.integers(24))
        Y[bad] *= -1
        found += code.robust_decode(Y, np.arange(24), adversaries=1)[1].tolist() == [bad]
    assert found >= 8
