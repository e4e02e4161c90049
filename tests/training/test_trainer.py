"""gencc.training.train on the engine's threads: every scheme, gc's exactness, faults as stragglers, gcc's
gradient error against N, determinism, validation."""

import copy

import numpy as np
import pytest
import torch

from gencc.errors import ConfigError
from gencc.faults import Bimodal, Faults, PersistentStragglers
from gencc.training import TRAINING_SCHEMES, train


def fitted_slope(x, y) -> float:
    """The least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


FIELDS = {"step", "wall_s", "step_s", "train_loss", "returned", "stragglers", "compute_per_worker", "updated"}


@pytest.mark.parametrize("kind", ["cyclic", "frc"])
def test_gc_is_exact_at_every_step_with_up_to_s_stragglers(problem, tiny, kind):
    X, y, _, _ = problem
    N, s = 6, 2
    res = train(tiny, (X, y), scheme="gc", workers=N, stragglers=[s, Faults(raise_p=0.1)], tolerate=s, steps=8,
                batch_size=120, lr=0.2, seed=1, track_grad_error=True, gc_kind=kind, delay_s=0.3)
    assert res.compute_per_worker == (s + 1) * 20  # s + 1 partitions of 120 / 6 rows each
    for h in res.history:
        assert len(h["returned"]) >= N - s or len(h["stragglers"]) > s
        if len(h["returned"]) >= N - s:
            assert h["grad_rel_err"] <= 1e-10, h
    assert sum(len(h["returned"]) == N - s for h in res.history) >= 4


@pytest.mark.parametrize("scheme", TRAINING_SCHEMES)
def test_each_scheme_trains_a_model_gencc_does_not_ship(problem, tiny, scheme):
    X, y, Xv, yv = problem
    before = copy.deepcopy(tiny.state_dict())
    res = train(tiny, (X, y), scheme=scheme, workers=6, stragglers=1, steps=30, batch_size=240, lr=0.5, seed=0,
                eval_data=(Xv, yv), eval_every=10, track_grad_error=True, delay_s=0.05)
    assert all(torch.equal(before[k], v) for k, v in tiny.state_dict().items())  # the input model is untouched
    assert res.model is not tiny and isinstance(res.model, type(tiny))
    assert [h["step"] for h in res.history] == list(range(1, 31))
    for h in res.history:
        assert FIELDS <= set(h) and {"grad_rel_err", "loss_full"} <= set(h)
        assert np.isfinite(h["train_loss"]) and h["updated"]
        assert len(h["returned"]) >= (6 if scheme == "sync" else 5)
    evals = [h for h in res.history if "eval_acc" in h]
    assert [h["step"] for h in evals] == [10, 20, 30]
    assert res.history[-1]["loss_full"] < 0.8 * res.history[0]["loss_full"]  # it learns
    assert res.final_accuracy() > 0.5
    walls = [h["wall_s"] for h in res.history]
    assert walls == sorted(walls)


def test_compute_per_worker_follows_the_scheme(problem, linear):
    X, y, _, _ = problem
    got = {s: train(linear, (X, y), scheme=s, workers=8, stragglers=1, steps=1, batch_size=160).compute_per_worker
           for s in TRAINING_SCHEMES}
    assert got["sync"] == got["ignore"] == 20  # 160 / 8 rows per shard
    assert got["gc"] == 40 and got["agc"] == 40  # s + 1 = 2 shards; pairs
    assert got["gcc"] == got["bacc"] == 40  # K = ceil(8 / 2) = 4 partitions, 160 / 4 coded rows


def test_faults_are_stragglers_never_a_crash(problem, linear):
    X, y, _, _ = problem
    res = train(linear, (X, y), scheme="ignore", workers=6, stragglers=Faults(raise_p=0.15, nan_p=0.15), steps=20,
                lr=0.5, track_grad_error=True)
    reasons = " ".join(r for h in res.history for r in h["stragglers"].values())
    assert "raise" in reasons and "nan" in reasons
    assert all(h["updated"] for h in res.history)
    crash = train(linear, (X, y), scheme="sync", workers=4, stragglers=Faults(crash_p=0.2), steps=12, lr=0.5,
                  seed=2)
    lost = [w for h in crash.history for w, r in h["stragglers"].items() if r.startswith("crash")]
    assert lost  # crashed workers: stragglers from then on, the master goes on
    assert len(crash.history) == 12 and len(crash.history[-1]["returned"]) < 4


def test_persistent_and_transient_stragglers_from_gencc_faults(problem, linear):
    X, y, _, _ = problem
    slow = PersistentStragglers(6, fraction=0.3, factor=50.0, mean_slow_s=100.0, seed=0)
    res = train(linear, (X, y), scheme="ignore", workers=6, stragglers=slow, steps=6, sample_s=2e-4, lr=0.5)
    assert res.tolerate == 2
    slow_now = {w for w in range(6) if slow.slow(w, 0.5)}
    assert slow_now  # the seed gives slow workers; they are the ones left out, step after step
    for h in res.history[1:]:
        assert not (slow_now & set(h["returned"])) or len(slow_now) > 2
    res = train(linear, (X, y), scheme="gcc", workers=6, stragglers=Bimodal(0.2, 20.0, 0.002), steps=4, lr=0.5)
    assert res.tolerate == 2 and all(len(h["returned"]) == 4 for h in res.history)


def test_gcc_gradient_error_falls_with_n_at_fixed_k_and_s(problem, linear):
    X, y, _, _ = problem
    Ns = [6, 8, 12, 16, 24]

    def err(scheme, N, **kw):
        r = train(linear, (X, y), scheme=scheme, workers=N, stragglers=1, steps=4, lr=0.1, track_grad_error=True,
                  delay_s=0.5, **kw)
        return np.mean([h["grad_rel_err"] for h in r.history])

    gcc = [err("gcc", N, partitions=4) for N in Ns]
    ignore = [err("ignore", N) for N in Ns]
    assert fitted_slope(Ns, gcc) < -2.0
    assert fitted_slope(Ns, gcc) < fitted_slope(Ns, ignore) < 0  # ignore's error falls too, but slower
    assert gcc[-1] < ignore[-1]


def test_a_seed_makes_a_run_repeatable(problem, tiny):
    X, y, Xv, yv = problem
    runs = [train(copy.deepcopy(tiny), (X, y), scheme=s, workers=6, stragglers=2, steps=6, batch_size=120,
                  lr=0.3, seed=5, eval_data=(Xv, yv), eval_every=3, delay_s=1.0, optimizer="momentum")
            for s in ("gc", "gc", "gcc", "gcc")]
    for a, b in (runs[:2], runs[2:]):
        assert [h["returned"] for h in a.history] == [h["returned"] for h in b.history]
        assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
        assert [h.get("eval_acc") for h in a.history] == [h.get("eval_acc") for h in b.history]
        for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
            assert torch.equal(p, q)
    other = train(copy.deepcopy(tiny), (X, y), scheme="gc", workers=6, stragglers=2, steps=6, batch_size=120,
                  lr=0.3, seed=6, delay_s=1.0, optimizer="momentum")
    assert [h["returned"] for h in other.history] != [h["returned"] for h in runs[0].history]


def test_adam_and_full_batch(problem, linear):
    X, y, Xv, yv = problem
    res = train(linear, (X, y), scheme="agc", workers=4, stragglers=1, steps=15, lr=0.05, optimizer="adam",
                eval_data=(Xv, yv), eval_every=5)
    assert res.compute_per_worker == 2 * (480 // 4) and res.final_accuracy() > 0.6


@pytest.mark.parametrize("kwargs,field,match", [
    ({"scheme": "fastest"}, "scheme", "unknown scheme 'fastest'"),
    ({"optimizer": "lbfgs"}, "optimizer", "unknown optimizer"),
    ({"backend": "mpi"}, "backend", "unknown backend"),
    ({"scheme": "ignore", "partitions": 3}, "partitions", "partitions applies to gcc and bacc only"),
    ({"scheme": "gcc", "partitions": 9}, "partitions", "partitions must be"),
    ({"scheme": "agc", "workers": 5}, "replication", "must divide N = 5"),
    ({"scheme": "gc", "gc_kind": "frc", "workers": 5, "stragglers": 1}, "gc_kind", "s \\+ 1 to divide N"),
    ({"stragglers": 6}, "stragglers", "stragglers as a count"),
    ({"lr": 0.0}, "lr", "lr"),
    ({"steps": 0}, "steps", "steps"),
])
def test_bad_arguments_raise_a_clear_value_error(problem, linear, kwargs, field, match):
    X, y, _, _ = problem
    args = {"workers": 6, "steps": 1, **kwargs}
    with pytest.raises(ConfigError, match=match) as err:
        train(linear, (X, y), **args)
    assert err.value.field == field


def test_bad_data_and_models_raise(problem, linear):
    X, y, _, _ = problem
    with pytest.raises(ValueError, match="integer class labels"):
        train(linear, (X, y.astype(float)), steps=1)
    with pytest.raises(ValueError, match="same positive number of samples"):
        train(linear, (X, y[:-1]), steps=1)
    with pytest.raises(ValueError, match="C >= 12 classes"):
        train(linear, (X, np.where(y == 0, 11, y)), steps=1)
    with pytest.raises(ValueError, match="torch.nn.Module"):
        train(lambda x: x, (X, y), steps=1)


def test_the_top_level_train_is_the_training_package_s(problem, tiny):
    """`gencc.train` (a thin wrapper, so `import gencc` needs no torch) gives what `gencc.training.train` gives."""
    import gencc

    X, y, _, _ = problem
    kw = dict(scheme="gc", workers=6, stragglers=2, steps=3, batch_size=120, lr=0.3, seed=5, delay_s=1.0,
              track_grad_error=True)
    a, b = gencc.train(copy.deepcopy(tiny), (X, y), **kw), train(copy.deepcopy(tiny), (X, y), **kw)
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    assert all(h["grad_rel_err"] <= 1e-10 for h in a.history)
