"""simulate: record layout, worst case, undecodable draws, order restoration, determinism."""

import numpy as np
import pytest

import gencc
from gencc import BACC, GCC, LCC, Bernoulli, FixedCount, Replication, simulate
from gencc.runtime.simulate import summarize

K, N = 6, 14
KEYS = {"scheme", "K", "N", "S", "p", "pattern", "trial", "seed", "n_returned", "decodable", "missing",
        "mse", "rmse", "rel_mse", "encode_time", "decode_time"}
TIMING = ("encode_time", "decode_time")


def f_vec(x):
    return np.array([np.sin(x).sum(), np.cos(x).sum(), (x**2).sum()])


def inputs(seed=0):
    return np.random.default_rng(seed).normal(size=(K, 2, 2))


def strip(records):
    """Records without timing fields, NaN spelled out (NaN != NaN would fail any comparison)."""
    def same(v):
        return "nan" if isinstance(v, float) and np.isnan(v) else v

    return [{k: same(v) for k, v in r.items() if k not in TIMING} for r in records]


def test_record_keys_and_values():
    recs = simulate(f_vec, inputs(), GCC(K, N), FixedCount(3), trials=4, seed=1)
    assert len(recs) == 4
    for i, r in enumerate(recs):
        assert KEYS | {"agreement", "rel_acc"} == set(r)  # 3 outputs: scored as a classifier
        assert r["scheme"] == "gcc" and r["K"] == K and r["N"] == N and r["S"] == 3 and r["p"] is None
        assert r["pattern"] == "random" and r["trial"] == i and r["seed"] == 1
        assert r["n_returned"] == N - 3 and r["decodable"] and r["missing"] == 0
        assert r["rmse"] == pytest.approx(np.sqrt(r["mse"])) and np.isfinite(r["rel_mse"])
        assert np.isnan(r["rel_acc"])  # no labels given
    scalar = simulate(lambda x: float(np.sum(x)), inputs(), BACC(K, N), FixedCount(2), trials=2)
    assert set(scalar[0]) == KEYS


def test_metrics_match_a_direct_computation():
    X = inputs(3)
    code = GCC(K, N, kernel="cubic")
    rec = simulate(f_vec, X, code, FixedCount(4, "block"), trials=1, seed=9, order=False)[0]
    returned = FixedCount(4, "block").draw(N, np.random.default_rng(9))  # the same draw from the same seed
    Yall = np.stack([f_vec(x) for x in code.encode(X)])
    Yhat = code.decode(Yall[returned], returned)
    truth = np.stack([f_vec(x) for x in X])
    assert rec["rel_mse"] == pytest.approx(gencc.metrics.rel_mse(Yhat, truth), rel=1e-12)
    assert rec["mse"] == pytest.approx(gencc.metrics.mse(Yhat, truth), rel=1e-12)


def test_worst_pattern_runs_once_with_exact():
    recs = simulate(f_vec, inputs(), BACC(K, 9), FixedCount(2, "worst"), trials=5)
    assert len(recs) == 1 and recs[0]["exact"] is True and recs[0]["pattern"] == "worst"
    # the recorded loss is the brute-force maximum over all straggler pairs
    code = BACC(K, 9)
    X = inputs()
    perm = gencc.order_inputs(X)
    Yall = np.stack([f_vec(x) for x in code.encode(X[perm])])
    truth = np.stack([f_vec(x) for x in X])
    worst = 0.0
    for a in range(9):
        for b in range(a + 1, 9):
            r = np.setdiff1d(np.arange(9), [a, b])
            est = np.empty((K, 3))
            est[perm] = code.decode(Yall[r], r)
            worst = max(worst, gencc.metrics.rel_mse(est, truth))
    assert recs[0]["rel_mse"] == pytest.approx(worst, rel=1e-10)
    big = simulate(f_vec, inputs(), BACC(K, 40), FixedCount(8, "worst"), trials=3)  # C(40, 8) > 5000
    assert len(big) == 1 and big[0]["exact"] is False


def test_worst_agreement_pattern_is_the_least_agreement_over_every_set():
    """On digits through a classifier the test defines (10 classes): the worst-agreement record's agreement is the
    brute-force minimum over every straggler set, ties going to the larger rel_mse; never above the agreement at
    the set of largest rel_mse. A model that is no classifier gets a clear error."""
    from sklearn.datasets import load_digits

    data = load_digits().data / 16.0
    W = np.random.default_rng(4).normal(size=(64, 10))

    def clf(x):
        return np.tanh(x @ W)

    Kc, Nc, S = 6, 12, 3
    X = data[np.random.default_rng(1).choice(len(data), Kc, replace=False)]
    gaps = []
    for code in (GCC(Kc, Nc), BACC(Kc, Nc)):
        least, most = simulate(clf, X, code, FixedCount(S, "worst-agreement")), simulate(clf, X, code,
                                                                                         FixedCount(S, "worst"))
        assert len(least) == 1 and least[0]["exact"] and least[0]["pattern"] == "worst-agreement"
        perm = gencc.order_inputs(X)
        Yall = np.stack([clf(x) for x in code.encode(X[perm])])
        truth = np.stack([clf(x) for x in X])
        scores = []
        from itertools import combinations
        for st in combinations(range(Nc), S):
            r = np.setdiff1d(np.arange(Nc), st)
            est = np.empty_like(truth)
            est[perm] = code.decode(Yall[r], r)
            scores.append((np.mean(est.argmax(1) == truth.argmax(1)), -gencc.metrics.rel_mse(est, truth)))
        agr, neg_rel = min(scores)
        assert least[0]["agreement"] == agr and least[0]["rel_mse"] == pytest.approx(-neg_rel, rel=1e-10)
        gaps.append(most[0]["agreement"] - least[0]["agreement"])
    assert min(gaps) >= 0 and max(gaps) > 0  # the largest-loss set is not the worst case of agreement
    calls = []

    def scalar(x):  # not a classifier: refused after f ran on the K inputs only, never on the N coded ones
        calls.append(1)
        return float(np.sum(x))

    with pytest.raises(ValueError, match="worst-agreement pattern .* needs a classifier"):
        simulate(scalar, inputs(), GCC(K, N), FixedCount(1, "worst-agreement"))
    assert len(calls) == K
    with pytest.raises(ValueError, match="worst-agreement pattern .* needs a classifier"):  # said: before f runs
        simulate(scalar, inputs(), GCC(K, N), FixedCount(1, "worst-agreement"), classifier=False)
    assert len(calls) == K
    with pytest.raises(ValueError, match="depends on f and the code"):
        FixedCount(1, "worst-agreement").draw(N, np.random.default_rng(0))


def test_bernoulli_high_p_yields_undecodable_records():
    recs = simulate(f_vec, inputs(), GCC(K, N), Bernoulli(0.9), trials=30, seed=0)
    bad = [r for r in recs if not r["decodable"]]
    good = [r for r in recs if r["decodable"]]
    assert bad and good
    for r in bad:
        assert r["n_returned"] < 2 and r["missing"] == K and np.isnan(r["rel_mse"]) and np.isnan(r["mse"])
    assert all(r["n_returned"] >= 2 and np.isfinite(r["rel_mse"]) for r in good)
    assert all(r["p"] == 0.9 and r["pattern"] == "bernoulli" for r in recs)
    rows = summarize(recs)
    assert len(rows) == 1 and rows[0]["trials"] == 30
    assert rows[0]["decodable"] == pytest.approx(len(good) / 30)


def test_replication_counts_missing_and_survives_everyone_straggling():
    recs = simulate(f_vec, inputs(), Replication(K, 12), Bernoulli(0.8), trials=20, seed=2)
    assert all(r["decodable"] for r in recs)
    assert any(r["missing"] > 0 for r in recs)
    assert any(r["n_returned"] == 0 for r in recs) and all(np.isfinite(r["rel_mse"]) for r in recs)


@pytest.mark.parametrize("order", [True, "spectral", "pca"])
def test_order_restores_the_callers_order(order):
    # zero stragglers and alpha inside beta: the estimate is exact, so any misplaced row shows up as error
    X = np.random.default_rng(5).normal(size=(K, 3)) * np.arange(1, K + 1)[:, None]
    recs = simulate(f_vec, X, GCC(K, N), FixedCount(0), trials=1, order=order)
    assert recs[0]["rel_mse"] < 1e-16
    assert not np.array_equal(gencc.order_inputs(X, "chain" if order is True else order), np.arange(K))


def test_determinism_same_seed_same_records():
    for code, model in [(GCC(K, N), FixedCount(4)), (BACC(K, N), Bernoulli(0.3)), (LCC(3, 9, 2), FixedCount(2))]:
        X = inputs(1)[:code.K]
        a = simulate(f_vec, X, code, model, trials=5, seed=11)
        b = simulate(f_vec, X, code, model, trials=5, seed=11)
        assert strip(a) == strip(b)
        c = simulate(f_vec, X, code, model, trials=5, seed=12)
        assert strip(a) != strip(c)


def test_labels_give_rel_acc():
    X = inputs(4)
    labels = np.array([np.argmax(f_vec(x)) for x in X])
    rec = simulate(f_vec, X, GCC(K, N), FixedCount(0), trials=1, labels=labels)[0]
    assert rec["rel_acc"] == pytest.approx(1.0) and rec["agreement"] == 1.0


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="first dimension K=6"):
        simulate(f_vec, np.zeros((K + 1, 2)), GCC(K, N), FixedCount(1))
    with pytest.raises(ValueError, match="need S < N"):
        simulate(f_vec, inputs(), GCC(K, N), FixedCount(N))
    with pytest.raises(ValueError, match="trials"):
        simulate(f_vec, inputs(), GCC(K, N), FixedCount(1), trials=0)
    with pytest.raises(ValueError, match="metric"):
        simulate(f_vec, inputs(), GCC(K, N), FixedCount(1), metric="mae")
    X = inputs()
    X[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        simulate(f_vec, X, GCC(K, N), FixedCount(1))


def test_summarize_confidence_interval_matches_hand_computation():
    recs = simulate(f_vec, inputs(), GCC(K, N), Bernoulli(0.2), trials=25, seed=3)
    vals = np.array([r["rel_mse"] for r in recs if r["decodable"]])
    row = summarize(recs)[0]
    assert row["rel_mse"] == pytest.approx(vals.mean())
    assert row["rel_mse_ci"] == pytest.approx(1.96 * vals.std(ddof=1) / np.sqrt(vals.size))
    single = summarize(recs[:1])[0]
    assert "rel_mse_ci" not in single  # one trial has no Monte-Carlo spread to report
