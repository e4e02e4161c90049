"""Parity recipes per workload (issue 10): digits' recipe and hashes unchanged, mnist1d's override, the mean-scaled
wrapper, the wider 1-D CNN, chain-ordered training groups, and a short fit. Nothing here trains a real model."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from gencc.codes.ordering import order_inputs  # noqa: E402
from gencc.workloads import _parity as P  # noqa: E402
from gencc.workloads._torch import RECIPES, build_module, full_recipe, training_threads  # noqa: E402

# digits' parity training settings as they were when its cached models and the README's figures were made
DIGITS_SETTINGS = {"epochs": 40, "per_epoch": 8192, "batch": 64, "lr": 3e-3, "weight_decay": 0.0, "seed": 0,
                   "init": "base"}
DIGITS_HASHES = {2: "0bfe8d4312", 3: "c345c22094", 4: "320a59d0d6"}  # torch 2.13.0+cpu


@pytest.mark.parametrize("k", [2, 3, 4])
def test_digits_parity_recipe_and_hash_unchanged(k: int) -> None:
    recipe = {"parity": DIGITS_SETTINGS, "k": k, "base": full_recipe("digits-cnn"), "format": 1, "threads": 1}
    blob = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha256(blob.encode()).hexdigest()[:10]
    assert P.parity_recipe("digits-cnn", k) == recipe
    _, _, h = P.parity_paths("digits-cnn", k, Path("models"))
    assert h == expected
    if torch.__version__ == "2.13.0+cpu":  # the version the cached digits parity models were trained with
        assert h == DIGITS_HASHES[k]


def test_mnist1d_override_is_in_its_recipe_only() -> None:
    over = P.PARITY_OVERRIDES["mnist1d-cnn"]
    assert set(over) - set(P.PARITY_TRAIN) <= {"arch", "scale", "chain_set"}  # the documented extra keys
    hp = P.parity_recipe("mnist1d-cnn", 4)["parity"]
    assert hp == {**DIGITS_SETTINGS, **over}
    h4 = P.parity_paths("mnist1d-cnn", 4, Path("m"))[2]
    assert h4 != P.parity_paths("mnist1d-cnn", 2, Path("m"))[2]
    assert "digits-cnn" not in P.PARITY_OVERRIDES


def test_wide_cnn1d_maps_shapes_and_keeps_the_plain_one() -> None:
    arch = {**RECIPES["mnist1d-cnn"]["arch"]}
    plain = build_module(arch)
    assert [n for n, _ in plain.named_parameters()][-2:] == ["head.1.weight", "head.1.bias"]  # cached weights' keys
    wide = build_module({**arch, "channels": [128, 128, 128], "hidden": 32})
    x = torch.randn(5, 1, 40)
    assert plain(x).shape == (5, 10) and wide(x).shape == (5, 10)
    # lengths 40 -> 19 (kernel 5, stride 2, padding 1) -> 10 -> 5 (kernel 3)
    assert wide.head[1].in_features == 128 * 5 and wide.head[1].out_features == 32
    assert wide.head[3].in_features == 32 and wide.head[3].out_features == 10


@settings(max_examples=30)
@given(k=st.integers(1, 6), seed=st.integers(0, 50))
def test_mean_parity_is_k_times_inner_on_the_mean(k: int, seed: int) -> None:
    torch.manual_seed(seed)
    inner = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    m = P.MeanParity(inner, k)
    xs = torch.randn(k, 4, 6)
    with torch.no_grad():
        got = m(xs.sum(dim=0))
        want = k * inner(xs.mean(dim=0))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_build_parity_settings_and_bad_ones() -> None:
    m = P.build_parity("mnist1d-cnn", 4, {"scale": "mean"})
    assert isinstance(m, P.MeanParity) and m.k == 4 and m(torch.randn(3, 1, 40)).shape == (3, 10)
    assert not isinstance(P.build_parity("digits-cnn", 2, P.settings("digits-cnn")), P.MeanParity)
    with pytest.raises(ValueError, match="'sum' or 'mean'"):
        P.build_parity("mnist1d-cnn", 4, {"scale": "median"})


def test_load_parity_module_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = P.build_parity("mnist1d-cnn", 4, P.settings("mnist1d-cnn"))
    torch.save(m.state_dict(), tmp_path / "w.pt")
    sha = hashlib.sha256((tmp_path / "w.pt").read_bytes()).hexdigest()
    back = P.load_parity_module("mnist1d-cnn", 4, tmp_path / "w.pt", sha256=sha)
    x = torch.randn(4, 1, 40)
    with torch.no_grad():
        torch.testing.assert_close(back(x), m.eval()(x))


@settings(max_examples=40)
@given(k=st.integers(1, 4), extra=st.integers(0, 5), seed=st.integers(0, 100))
def test_chain_groups_are_consecutive_chain_runs(k: int, extra: int, seed: int) -> None:
    size = k + extra
    X = torch.as_tensor(np.random.default_rng(seed).normal(size=(30, 1, 5)), dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    idx = P.chain_groups(X, k, size, 3, gen)
    g = size // k
    assert idx.shape == (3 * g, k)
    pick = torch.rand((3, len(X)), generator=torch.Generator().manual_seed(seed)).argsort(dim=1)[:, :size]
    for s in range(3):
        rows = pick[s].numpy()
        chain = rows[order_inputs(X[rows].reshape(size, -1).numpy())]  # the reference ordering, directly
        np.testing.assert_array_equal(idx[s * g : (s + 1) * g].numpy().ravel(), chain[: g * k])
        assert len(set(chain.tolist())) == size


def test_chain_groups_bad_size() -> None:
    X = torch.zeros(10, 1, 5)
    with pytest.raises(ValueError, match="chain_set"):
        P.chain_groups(X, 4, 3, 2, torch.Generator())
    with pytest.raises(ValueError, match="chain_set"):
        P.chain_groups(X, 2, 11, 2, torch.Generator())


def _tiny_fit(hp_changes: dict, base: torch.nn.Module, X: torch.Tensor):
    hp = {**P.PARITY_TRAIN, "epochs": 2, "per_epoch": 128, "batch": 32, **hp_changes}
    with training_threads():  # as load_parity trains (one thread: fast on a busy machine)
        return P.fit_parity("mnist1d-cnn", 2, hp, base, X)


def test_fit_parity_short_runs_deterministic_and_bad_init() -> None:
    torch.manual_seed(1)
    base = build_module(RECIPES["mnist1d-cnn"]["arch"]).eval()
    X = torch.randn(40, 1, 40)
    a, seconds = _tiny_fit({"chain_set": 6, "scale": "mean"}, base, X)
    b, _ = _tiny_fit({"chain_set": 6, "scale": "mean"}, base, X)
    assert seconds > 0 and not a.training
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[n], sb[n]) for n in sa)
    # it moved away from the base weights it started from
    assert any(not torch.equal(sa[f"inner.{n}"], v) for n, v in base.state_dict().items())
    figs = P.held_out(a, base, X, 2, chain_set=6)
    assert set(figs) == {"parity_mse", "rel_mse", "agreement"} and np.isfinite(figs["rel_mse"])
    with pytest.raises(ValueError, match="init 'base' needs"):
        _tiny_fit({"arch": {**RECIPES["mnist1d-cnn"]["arch"], "hidden": 8}}, base, X)
    with pytest.raises(ValueError, match="'base' or 'scratch'"):
        _tiny_fit({"init": "random"}, base, X)
    c, _ = _tiny_fit({"init": "scratch", "arch": {**RECIPES["mnist1d-cnn"]["arch"], "hidden": 8}}, base, X)
    assert c(X[:3]).shape == (3, 10)


def test_packed_settings_have_their_own_hash_and_file() -> None:
    assert "pack" not in P.settings("mnist1d-cnn") and P.settings("mnist1d-cnn", True) == {
        **P.settings("mnist1d-cnn"), "pack": True, "init": "scratch"}
    plain, packed = P.parity_paths("mnist1d-cnn", 4, Path("m")), P.parity_paths("mnist1d-cnn", 4, Path("m"), True)
    assert plain[2] != packed[2] and packed[0].name.startswith("mnist1d-cnn-parity-k4-packed-")
    assert P.parity_recipe("digits-cnn", 2)["parity"] == DIGITS_SETTINGS  # the plain recipe never moves


@pytest.mark.parametrize("name, k", [("mnist1d-cnn", 4), ("digits-cnn", 2), ("digits-mlp", 3)])
def test_packed_parity_starts_as_f_on_the_sum(name: str, k: int) -> None:
    """From f's weights a packed model (first layer repeated k times) computes f(sum of members) exactly: the
    plain parity model's start, so training only adds what the stacked members tell."""
    from gencc.workloads._torch import IN_SHAPES

    torch.manual_seed(3)
    base = build_module(RECIPES[name]["arch"]).eval()
    m = P.build_parity(name, k, P.settings(name, True))
    assert isinstance(m, P.PackedParity)
    m.inner.load_state_dict(P._from_base(base.state_dict(), m.inner.state_dict()))
    Z = torch.randn(5, k, *IN_SHAPES[name])
    with torch.no_grad():
        torch.testing.assert_close(m.eval()(Z), base(Z.sum(dim=1)), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="scale must be 'sum'"):
        P.build_parity(name, k, {**P.settings(name, True), "scale": "mean"})


def test_packed_fit_trains_on_stacked_members() -> None:
    """A short packed fit from f's weights: deterministic, and it improves on its start (f on the sum)."""
    torch.manual_seed(2)
    base = build_module(RECIPES["mnist1d-cnn"]["arch"]).eval()
    with torch.no_grad():  # larger weights: ReLUs switch within the data, so f is far from additive
        for w in base.parameters():
            w.mul_(3.0)
    X = torch.randn(200, 1, 40)
    hp = {"epochs": 4, "per_epoch": 1024, "pack": True}
    a, _ = _tiny_fit(hp, base, X)
    b, _ = _tiny_fit(hp, base, X)
    assert isinstance(a, P.PackedParity) and a(X[:6].reshape(3, 2, 1, 40)).shape == (3, 10)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[n], sb[n]) for n in sa)
    start = P.build_parity("mnist1d-cnn", 2, {"pack": True}).eval()
    start.inner.load_state_dict(P._from_base(base.state_dict(), start.inner.state_dict()))
    before, after = P.held_out(start, base, X, 2), P.held_out(a, base, X, 2)
    assert after["rel_mse"] < 0.8 * before["rel_mse"], (before, after)
