"""Adversary models: who they corrupt and by how much, and simulate's robust records."""

import numpy as np
import pytest

import gencc
from gencc import adversaries as adv


def results(N=30, m=5, seed=0):
    code = gencc.GCC(8, N)
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(8, 4)), axis=0) / 3
    W = rng.normal(size=(4, m))
    return code, np.tanh(code.encode(X) @ W), np.tanh(X @ W)


@pytest.mark.parametrize("name", ["random", "signflip", "noise", "offset", "relative", "bump"])
@pytest.mark.parametrize("A", [0, 1, 3])
def test_models_corrupt_exactly_A_returned_workers(name, A):
    code, Y, _ = results()
    returned = np.array([i for i in range(30) if i not in (2, 9)])
    Yc, bad = adv.get_adversary(name, A).corrupt(Y[returned], returned, np.random.default_rng(1), code)
    changed = returned[np.any(Yc != Y[returned], axis=1)]
    np.testing.assert_array_equal(changed, bad)
    assert bad.size == A and np.all(np.isin(bad, returned))


def test_magnitudes_are_relative_to_the_results_spread():
    code, Y, _ = results()
    r = np.arange(30)
    s = adv.spread(Y)
    Yc, bad = adv.Offset(2, scale=1.5).corrupt(Y, r, np.random.default_rng(0))
    np.testing.assert_allclose(Yc[bad] - Y[bad], 1.5 * s)
    Yc, bad = adv.SignFlip(2).corrupt(Y, r, np.random.default_rng(0))
    np.testing.assert_allclose(Yc[bad], -Y[bad])
    _, bad = adv.SmoothBump(3).corrupt(Y, r, np.random.default_rng(0))
    assert np.all(np.diff(bad) == 1)  # colluding neighbours
    Yc, bad = adv.Honest(3).corrupt(Y, r, np.random.default_rng(0))
    assert bad.size == 0 and np.array_equal(Yc, Y) and adv.Honest(3).bound == 3


def test_stealth_stays_under_the_detector_and_is_the_largest_such():
    code, Y, _ = results(N=40)
    r = np.arange(40)
    model = adv.Stealth(1)
    Yc, bad = model.corrupt(Y, r, np.random.default_rng(0), code)
    assert bad.size == 1
    _, flagged = code.robust_decode(Yc, r, adversaries=1)
    assert flagged.size == 0
    bigger = Yc.copy()
    bigger[bad] += 1.05 * (Yc[bad] - Y[bad])  # a little more and it is caught
    assert code.robust_decode(bigger, r, adversaries=1)[1].tolist() == bad.tolist()
    with pytest.raises(ValueError, match="needs the code"):
        model.corrupt(Y, r, np.random.default_rng(0))


def test_stealth_attacks_a_decoder_that_adapts_to_the_results():
    # GCC's default at N <= 1.5 K picks its decoder from the results: the adversary's weights need them
    code = gencc.GCC(10, 15)
    X = np.random.default_rng(1).standard_normal((10, 3))
    Y = np.sin(code.encode(X))
    with pytest.raises(ValueError):
        code.decoding_matrix(np.arange(15))
    Yc, bad = adv.Stealth(1).corrupt(Y, np.arange(15), np.random.default_rng(0), code)
    assert bad.size == 1 and np.isfinite(Yc).all()
    assert np.array_equal(np.delete(Yc, bad, axis=0), np.delete(Y, bad, axis=0))  # only its own worker lies


def test_bad_models_are_clear_errors():
    with pytest.raises(ValueError, match="non-negative integer"):
        adv.SignFlip(-1)
    with pytest.raises(ValueError, match="scale"):
        adv.Noise(1, scale=float("nan"))
    with pytest.raises(ValueError, match="unknown adversary model"):
        adv.get_adversary("liar", 1)
    with pytest.raises(ValueError, match="only 2 workers returned"):
        adv.SignFlip(3).corrupt(np.ones((2, 2)), np.arange(2), np.random.default_rng(0))


def test_simulate_records_recall_false_alarms_and_the_best_possible():
    code, _, _ = results(N=40)
    rng = np.random.default_rng(0)
    X = np.cumsum(rng.normal(size=(8, 4)), axis=0) / 3
    W = rng.normal(size=(4, 5))

    def f(Z):
        return np.tanh(np.asarray(Z) @ W)

    f.batched = True
    recs = gencc.simulate(f, X, code, gencc.FixedCount(2), trials=5, adversaries=adv.Offset(2, scale=2.0))
    for r in recs:
        assert r["adversary"] == "offset" and r["A"] == 2
        assert r["recall"] == 1.0 and r["false_alarms"] == 0 and r["missed"] == 0
        assert r["flagged"] == r["corrupted"]
        assert r["rel_mse"] == pytest.approx(r["rel_mse_excluded"], rel=1e-9, abs=1e-15)
    honest = gencc.simulate(f, X, code, gencc.FixedCount(2), trials=5, adversaries=adv.Honest(2))
    s = gencc.summarize(honest, keys=("scheme", "adversary"))[0]
    assert s["false_alarm_rate"] == 0.0 and np.isnan(honest[0]["recall"])
    plain = gencc.simulate(f, X, code, gencc.FixedCount(2), trials=5)
    np.testing.assert_allclose([r["rel_mse"] for r in honest], [r["rel_mse"] for r in plain], rtol=1e-9, atol=1e-20)
    with pytest.raises(ValueError, match="worst-case"):
        gencc.simulate(f, X, code, gencc.FixedCount(2, "worst"), adversaries=adv.SignFlip(1))


def test_relative_noise_is_the_fault_injectors_model():
    """out + scale * rms(out) * z, one standard-normal draw of out's shape, rms 1 for an all-zero result."""
    out = np.array([[3.0, -4.0], [0.0, 5.0]])
    got = adv.relative_noise(out, 0.5, np.random.default_rng(7))
    z = np.random.default_rng(7).standard_normal(out.shape)
    rms = np.sqrt(np.mean(out**2))
    np.testing.assert_array_equal(got, out + 0.5 * rms * z)
    np.testing.assert_array_equal(adv.relative_noise(np.zeros(3), 2.0, np.random.default_rng(1)),
                                  2.0 * np.random.default_rng(1).standard_normal(3))
    assert adv.relative_noise([1, 2], 0.0, np.random.default_rng(0)).tolist() == [1.0, 2.0]
    for bad in (-1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match="wrong-result scale"):
            adv.relative_noise(out, bad, np.random.default_rng(0))


def test_relative_noise_model_scales_each_result_by_its_own_rms():
    code, Y, _ = results()
    r = np.arange(30)
    Y = Y * np.linspace(0.1, 10, 30)[:, None]  # results of very different sizes
    Yc, bad = adv.get_adversary("relative", 3, 0.25).corrupt(Y, r, np.random.default_rng(2))
    assert bad.size == 3 and isinstance(adv.MODELS["relative"](1), adv.RelativeNoise)
    rng = np.random.default_rng(2)
    pos = np.sort(rng.choice(30, size=3, replace=False))  # the base class's choice, then one draw per result
    np.testing.assert_array_equal(bad, pos)
    for i in pos:
        np.testing.assert_array_equal(Yc[i], adv.relative_noise(Y[i], 0.25, rng))
    keep = np.setdiff1d(r, bad)
    np.testing.assert_array_equal(Yc[keep], Y[keep])


# ----- plausible wrong results ------------------------------------------------------------------------------
def plausible_setup(N=30, m=6):
    code, Y, _ = results(N=N, m=m)
    rng = np.random.default_rng(3)
    X = np.cumsum(rng.normal(size=(8, 4)), axis=0) / 3
    W = rng.normal(size=(4, m))

    def f(Z):
        return np.tanh(np.asarray(Z, dtype=float) @ W)

    def stale(Z):  # a slightly different model
        return np.tanh(np.asarray(Z, dtype=float) @ (W * 1.02))

    returned = np.array([i for i in range(N) if i not in (2, 9)])
    Xt = code.encode(X)[returned]
    other = f(code.encode(X[::-1]))[returned]
    return code, f(Xt), returned, adv.Context(f=f, inputs=Xt, other=other, stale=stale), f, stale


@pytest.mark.parametrize("name", adv.PLAUSIBLE)
@pytest.mark.parametrize("A", [1, 3])
def test_plausible_models_corrupt_exactly_A_workers_with_finite_results_of_the_right_size(name, A):
    code, Y, returned, ctx, _, _ = plausible_setup()
    Yc, bad = adv.get_adversary(name, A).corrupt(Y, returned, np.random.default_rng(5), code, ctx)
    assert bad.size == A and np.all(np.isin(bad, returned)) and np.isfinite(Yc).all()
    pos = np.isin(returned, bad)
    np.testing.assert_array_equal(Yc[~pos], Y[~pos])  # nobody else touched
    assert np.all(np.abs(Yc[pos]) <= 2 * np.abs(Y).max() + 1e-12)  # plausible: of the results' own magnitude
    assert not np.array_equal(Yc[pos], Y[pos])


def test_plausible_models_do_what_they_say():
    code, Y, r, ctx, f, stale = plausible_setup()
    g = np.random.default_rng
    Yc, bad = adv.Replay(2).corrupt(Y, r, g(0))
    for i in np.flatnonzero(np.isin(r, bad)):  # each a copy of another returned worker's result
        assert any(np.array_equal(Yc[i], Y[j]) for j in range(len(r)) if j != i)
    Yc, bad = adv.NeighbourReplay(3).corrupt(Y, r, g(1))
    for i in np.flatnonzero(np.isin(r, bad)):
        assert any(np.array_equal(Yc[i], Y[j]) for j in (i - 1, i + 1) if 0 <= j < len(r))
    Yc, bad = adv.OtherJob(2).corrupt(Y, r, g(2), context=ctx)
    pos = np.isin(r, bad)
    np.testing.assert_array_equal(Yc[pos], ctx.other[pos])
    Yc, bad = adv.StaleModel(2).corrupt(Y, r, g(3), context=ctx)
    pos = np.isin(r, bad)
    np.testing.assert_allclose(Yc[pos], stale(ctx.inputs[pos]))
    Yc, bad = adv.WrongInput(1, scale=0.0).corrupt(Y, r, g(4), context=ctx)  # no input error: the right result
    np.testing.assert_allclose(Yc, Y)
    Yc, bad = adv.Permute(3).corrupt(Y, r, g(5))
    pos = np.isin(r, bad)
    np.testing.assert_array_equal(np.sort(Yc[pos], axis=1), np.sort(Y[pos], axis=1))
    Yc, bad = adv.SwapTop(3).corrupt(Y, r, g(6))
    pos = np.isin(r, bad)
    assert np.all(np.argmax(Yc[pos], axis=1) != np.argmax(Y[pos], axis=1))
    np.testing.assert_array_equal(np.sort(Yc[pos], axis=1), np.sort(Y[pos], axis=1))
    Yc, bad = adv.Scaled(3, scale=0.1).corrupt(Y, r, g(7))
    pos = np.isin(r, bad)
    c = Yc[pos] / Y[pos]
    np.testing.assert_allclose(c, c[:, :1] * np.ones_like(c))  # one factor per row
    assert np.all((np.abs(np.log(c[:, 0])) >= np.log(1.1) - 1e-12) & (np.abs(np.log(c[:, 0])) <= np.log(2) + 1e-12))
    Yc, bad = adv.Truncated(3, scale=10).corrupt(Y, r, g(8))  # 10 bits: float16's rounding (independent reference)
    pos = np.isin(r, bad)
    np.testing.assert_array_equal(Yc[pos], Y[pos].astype(np.float16).astype(float))
    Yc, bad = adv.ConstantVector(2).corrupt(Y, r, g(9))
    pos = np.isin(r, bad)
    np.testing.assert_allclose(Yc[pos], np.broadcast_to(Y.mean(axis=0), Yc[pos].shape))


def test_context_models_refuse_without_what_they_read():
    code, Y, r, ctx, f, _ = plausible_setup()
    with pytest.raises(ValueError, match="needs context with other"):
        adv.OtherJob(1).corrupt(Y, r, np.random.default_rng(0))
    with pytest.raises(ValueError, match="needs context with stale"):
        adv.StaleModel(1).corrupt(Y, r, np.random.default_rng(0), context=adv.Context(f=f, inputs=ctx.inputs))
    with pytest.raises(ValueError, match="one row per returned result"):
        adv.OtherJob(1).corrupt(Y, r, np.random.default_rng(0), context=adv.Context(other=ctx.other[:3]))


def test_per_result_models_corrupt_one_result_as_fault_injection_does():
    per = sorted(n for n, c in adv.MODELS.items() if c(1).per_result)
    assert per == ["noise", "offset", "permute", "random", "relative", "scaled", "signflip", "swap-top", "truncated"]
    out = np.array([0.3, -1.2, 2.5, 0.7])
    for name in ("noise", "signflip", "scaled"):  # the same draws as corrupting that row among others
        m = adv.get_adversary(name, 1)
        got = m.perturb_one(out, 2.0, np.random.default_rng(4))
        np.testing.assert_array_equal(got, m._perturb(out[None].copy(), 2.0, np.random.default_rng(4))[0])
    assert sorted(adv.Permute(1).perturb_one(out, 1.0, np.random.default_rng(0))) == sorted(out)
    with pytest.raises(ValueError, match="cannot corrupt one result on its own"):
        adv.Replay(1).perturb_one(out, 1.0, np.random.default_rng(0))
