"""gencc.model.data: a user's input files (.npy / .npz) and the C,H,W shapes the command line takes."""

from __future__ import annotations

import numpy as np
import pytest

from gencc.model import load_inputs, parse_shape


def test_shapes_are_positive_integers():
    assert parse_shape("1,8,8") == (1, 8, 8) and parse_shape("1x8x8") == (1, 8, 8) and parse_shape(" 30 ") == (30,)
    for bad in ("", "0,3", "a,b", "-1"):
        with pytest.raises(ValueError, match="positive integers"):
            parse_shape(bad)


def test_inputs_from_npy_and_npz_reshaped_to_the_input_shape(tmp_path):
    X = np.arange(24, dtype=np.float32).reshape(3, 8)
    np.save(tmp_path / "x.npy", X)
    got = load_inputs(tmp_path / "x.npy", (2, 4))
    assert got.dtype == np.float64 and got.shape == (3, 2, 4)
    np.testing.assert_array_equal(got.reshape(3, 8), X)
    np.savez(tmp_path / "two.npz", y=np.zeros(3), inputs=X)
    np.testing.assert_array_equal(load_inputs(tmp_path / "two.npz"), X)
    np.savez(tmp_path / "odd.npz", a=X, b=X)
    with pytest.raises(ValueError, match="name the inputs one of"):
        load_inputs(tmp_path / "odd.npz")


def test_bad_inputs_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_inputs(tmp_path / "none.npy")
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match=r"must be \.npy or \.npz"):
        load_inputs(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="do not fit the input shape"):
        load_inputs(np.zeros((4, 5)), (2, 3))
    with pytest.raises(ValueError, match="NaN or inf"):
        load_inputs(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"shape \(n, \*input shape\)"):
        load_inputs(np.zeros(5))
