"""The serving gate (gencc.serving.Gate): decoded answers held back unless likely right, on a model gencc does not
ship (a numpy MLP on flattened sklearn digits, trained here in well under a second), in virtual time."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from gencc import BACC
from gencc.engine import VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import Request, make_dispatcher, simulate_load
from gencc.serving._http.app import _body
from gencc.serving._policy.gate import (
    Gate,
    Memo,
    calibrate_gate,
    jackknife_std,
    margins,
    service_gate,
)
from gencc.serving._policy.gate_threshold import choose_threshold, frontier, wilson_lower
from gencc.serving.config import SCHEME_HELP, SCHEMES, ServiceConfig, Slowdown, default_scheme

W, K = 12, 8


class RandomFeatureNet:
    """A user's model: 16 inputs (shape (4, 4)) -> 64 tanh random features -> 10 logits, batched numpy."""

    batched = True

    def __init__(self, W1, b1, W2):
        self.W1, self.b1, self.W2 = W1, b1, W2

    def features(self, X):
        return np.tanh(np.asarray(X, dtype=float).reshape(len(X), -1) @ self.W1 + self.b1)

    def __call__(self, X):
        return self.features(X) @ self.W2


@pytest.fixture(scope="module")
def model():
    """The net, fitted (ridge regression on one-hot labels: one linear solve) to generated data: 10 classes,
    each a Gaussian blob around its own mean; training and test inputs."""
    rng = np.random.default_rng(0)
    means = rng.normal(0, 1.0, (10, 16))
    y = rng.integers(10, size=1800)
    X = (means[y] + rng.normal(0, 0.6, (1800, 16))).reshape(-1, 4, 4).astype(np.float32)
    net = RandomFeatureNet(rng.normal(0, 0.5, (16, 64)), rng.normal(0, 0.5, 64), np.zeros((64, 10)))
    H = net.features(X[:1400])
    net.W2 = np.linalg.solve(H.T @ H + 1e-2 * np.eye(64), H.T @ np.eye(10)[y[:1400]])
    assert np.mean(np.argmax(net(X[1400:]), axis=1) == y[1400:]) > 0.8  # a real classifier
    return net, X[:1400], X[1400:]


def serve(f, X, gate, scheme="sgcc", duration=10.0, seed=1):
    s, F, Xs = 0.04, 0.1, 10.0
    env = VirtualWorkers(W, ServiceTimes(s), PersistentStragglers(W, F, Xs, 1.0, seed=seed),
                         functions={"f": Memo(f, X)}, seed=seed)
    rate = 0.3 * W / (s * (1 - F + F * Xs))
    return simulate_load(lambda e: make_dispatcher(scheme, e, K=K, gate=gate, seed=seed), env, rate, duration,
                         inputs=X, seed=seed)


def test_margins_and_wilson_against_references():
    Z = np.array([[1.0, 5.0, 2.0], [0.0, 0.0, -1.0], [3.0, -2.0, 2.5]])
    assert margins(Z) == pytest.approx([3.0, 0.0, 0.5])
    assert margins(np.array([[-2.0], [0.5]])) == pytest.approx([2.0, 0.5])
    for right, n in [(9, 10), (95, 100), (0, 5), (20, 20)]:
        z = 1.28  # the lower root of (p - phat)^2 = z^2 p (1 - p) / n
        ph = right / n
        roots = np.roots([1 + z * z / n, -(2 * ph + z * z / n), ph * ph])
        assert wilson_lower(right, n, z) == pytest.approx(min(roots.real), abs=1e-9)
    assert wilson_lower(0, 0) == 0.0


def test_jackknife_std_against_explicit_leave_one_out():
    code = BACC(4, 8)
    rng = np.random.default_rng(2)
    R = [0, 1, 2, 4, 5, 7]
    Y = rng.normal(size=(len(R), 3))
    outs = [code.decoding_matrix([R[j] for j in range(6) if j != i]) @ np.delete(Y, i, axis=0) for i in range(6)]
    A = np.stack(outs)
    want = np.sqrt(5 / 6 * ((A - A.mean(0)) ** 2).sum(0).mean(1))
    assert jackknife_std(code, Y, R) == pytest.approx(want)


def test_choose_threshold_is_the_least_qualifying_grid_point():
    rng = np.random.default_rng(3)
    truth = {i: int(rng.integers(3)) for i in range(400)}
    records = []
    for i in range(400):
        for _ in range(int(rng.integers(1, 3))):
            z = float(rng.exponential(2.0))
            right = rng.random() < 1 - math.exp(-z)  # higher scores are right more often
            records.append((i, z, truth[i] if right else (truth[i] + 1) % 3))
    cal = choose_threshold(records, truth.__getitem__, target=0.9, draws=0)
    by: dict[int, list] = {}
    for i, z, top in records:
        by.setdefault(i, []).append((z, top))
    for t, agree, share in cal.frontier:  # brute force: each request's first decode scoring >= t
        sent = [next(top for z, top in c if z >= t) for i, c in by.items() if any(z >= t for z, _ in c)]
        right = sum(top == truth[i] for top, i in zip(sent, [i for i, c in by.items() if any(z >= t for z, _ in c)],
                                                      strict=True))
        assert share == pytest.approx(len(sent) / len(by))
        if sent:
            assert agree == pytest.approx(right / len(sent))
    good = [t for t, a, s in cal.frontier if s > 0 and wilson_lower(a * s * len(by), s * len(by)) >= 0.9]
    assert cal.threshold == min(good) and cal.candidates == len(by)
    assert frontier(records, truth.__getitem__, [math.inf])[0][2] == 0.0
    # bagged: the lower median (quantile 0.5) of the least qualifying thresholds of bootstrap resamples; one
    # resample rebuilt by hand (each request's records repeated as often as it was drawn, under new ids)
    bag = choose_threshold(records, truth.__getitem__, target=0.9, draws=9, seed=4, quantile=0.5)
    assert len(bag.draws) == 9 and bag.threshold == sorted(bag.draws)[4] and bag.frontier == cal.frontier
    upper = choose_threshold(records, truth.__getitem__, target=0.9, draws=9, seed=4)  # the default: 0.9
    assert upper.draws == bag.draws and upper.threshold == sorted(bag.draws)[7] >= bag.threshold
    lo, hi = bag.spread()
    assert lo <= bag.threshold <= hi
    grid = [t for t, _, _ in cal.frontier]
    ids = list(by)
    first = np.random.default_rng(4).multinomial(len(ids), np.full(len(ids), 1 / len(ids)))
    rep = [(i * 10 + c, z, top) for i, n in zip(ids, first, strict=True) for c in range(n)
           for j, z, top in records if j == i]
    rows = frontier(rep, lambda rid: truth[rid // 10], grid)
    n = len(ids)  # requests in the resample, repeats counted
    want = min((t for t, a, s in rows if s > 0 and wilson_lower(a * s * n, s * n) >= 0.9), default=math.inf)
    assert bag.draws[0] == want
    with pytest.raises(ValueError, match="draws"):
        choose_threshold(records, truth.__getitem__, draws=-1)
    with pytest.raises(ValueError, match="quantile"):
        choose_threshold(records, truth.__getitem__, quantile=1.5)


def test_gate_off_at_zero_and_holds_everything_at_inf(model):
    f, _, X = model
    F = f(X)
    ungated = serve(f, X, None)
    zero = serve(f, X, Gate(0.0))
    inf = serve(f, X, Gate(math.inf))  # every decode would be held: none is made, no coded task spent
    held = serve(f, X, Gate(1e9))  # a threshold no decode's score reaches: decodes made, every one held
    assert all(r.status == 200 for r in ungated + zero + held + inf)
    assert sum(r.degraded for r in zero) > 0
    assert all(r.gate == "passed" and r.uncertainty >= 0 for r in zero if r.degraded)
    assert not any(r.degraded for r in held)  # nothing decoded leaves, every answer is the model's own
    assert sum(r.gate == "held" for r in held) >= sum(r.degraded for r in ungated) // 2
    assert sum(len(r.group.tasks) for r in inf) == 0 and not any(r.degraded for r in inf)
    assert sum(r.gate == "held" for r in inf) > 0  # the decode deadline still holds the late members: copies
    assert sum(len(r.group.tasks) for r in held) > 0  # (a group's coded tasks, counted once per member)
    for r in held + inf:
        assert np.allclose(r.output, F[r.id % len(X)], rtol=1e-5, atol=1e-6)
        if r.gate == "held":
            assert 1 <= sum(t.kind == "copy" for t in r.tasks) <= 2  # its copies, on distinct workers
            assert len({t.worker for t in r.tasks if t.kind == "copy"}) == sum(t.kind == "copy" for t in r.tasks)


def agreement(reqs, f, X):
    top = np.argmax(f(X), axis=1)
    deg = [r for r in reqs if r.degraded]
    if not deg:
        return math.nan, 0
    return np.mean([np.argmax(r.output) == top[r.id % len(X)] for r in deg]), len(deg)


@pytest.mark.slow
def test_calibrated_service_gate_on_a_user_model(model):
    """A service's gate (`service_gate`) holds every decode until its background calibration on *training* inputs
    ends; then it either sends decodes at a threshold that carries to served (test) inputs, or, where no threshold
    qualifies (this model's decodes plateau below the default target's confidence bound), none at all: every
    answer is the model's own. A calibration at a lower target shows the threshold carries to served inputs."""
    f, Xtr, Xte = model
    cfg, slow = ServiceConfig(scheme="sgcc", seed=1), Slowdown(service_ms=40, slow_fraction=0.1)

    def make(g):
        return lambda e: make_dispatcher("sgcc", e, K=K, gate=g, seed=101)

    gate = service_gate(cfg, slow, make, {"f": f}, Xtr, key="user-net")
    assert gate.threshold == math.inf or gate.ready.is_set()  # holds everything until calibrated
    assert gate.ready.wait(120) and gate.calibration.candidates >= 100
    again = service_gate(cfg, slow, make, {"f": f}, Xtr, key="user-net")
    assert again.ready.is_set() and again.threshold == gate.threshold  # kept for the process
    raw, _ = agreement(serve(f, Xte, None, duration=40.0), f, Xte)
    got, n = agreement(serve(f, Xte, Gate(gate.threshold), duration=40.0), f, Xte)
    assert (n == 0) if gate.threshold == math.inf else (got >= 0.95)
    low = calibrate_gate(make, {"f": f}, Xtr, workers=W, service_ms=40, seed=101, target=0.9)
    assert 0 < low.threshold < math.inf
    got, n = agreement(serve(f, Xte, Gate(low.threshold), duration=40.0), f, Xte)
    assert n >= 50 and got >= 0.9 - 0.03 and got > raw + 0.1


def test_service_gate_off_fixed_and_for_baselines(model):
    f, Xtr, _ = model
    slow = Slowdown()
    assert service_gate(ServiceConfig(scheme="uncoded"), slow, None, {"f": f}, Xtr) is None
    assert service_gate(ServiceConfig(gate="off"), slow, None, {"f": f}, Xtr) is None
    g = service_gate(ServiceConfig(gate_threshold=2.5), slow, None, {"f": f}, Xtr)
    assert g.threshold == 2.5 and g.ready.is_set()


def test_request_and_http_body_carry_the_gate():
    r = Request(3, None, 0.0)
    assert r.gate == "" and math.isnan(r.uncertainty)
    r.status, r.output, r.degraded, r.t_done, r.gate, r.uncertainty = 200, np.zeros(2), True, 0.01, "passed", 0.25
    code, body = _body(r, "sgcc")
    assert code == 200 and body["degraded"] is True and body["gate"] == "passed" and body["uncertainty"] == 0.25
    r.uncertainty = math.inf
    assert _body(r, "sgcc")[1]["uncertainty"] is None  # JSON has no inf


def test_config_gate_options_and_scheme_help():
    assert ServiceConfig().gate == "on" and ServiceConfig().scheme == default_scheme(parity=False)
    assert default_scheme(parity=True) == "sgcc-parity"
    with pytest.raises(ValueError, match="gate"):
        ServiceConfig(gate="maybe")
    with pytest.raises(ValueError, match="gate_threshold"):
        ServiceConfig(gate_threshold=-1)
    assert ServiceConfig(gate_threshold=math.inf).gate_threshold == math.inf
    assert SCHEME_HELP.startswith(", ".join(SCHEMES)) and "serving guide" in SCHEME_HELP  # the table: test_serve
    with pytest.raises(ValueError, match="threshold"):
        Gate(-0.5)


def test_serve_cli_refuses_a_bad_gate_and_its_help_points_to_which_schemes_meet_the_serving_targets():
    from typer.testing import CliRunner

    from gencc.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["serve", "--gate", "maybe"])
    assert r.exit_code == 2 and "--gate" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["serve", "--help"], terminal_width=200)
    text = " ".join(re.sub("[\u2500-\u257f]", " ", r.output).split())  # rich's box drawing out
    assert r.exit_code == 0 and "docs/guides/serving.md#schemes" in text and "default: (sgcc," in text
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "serving.md").read_text()
    assert "| `gcc` |" in guide and "its decodes miss the agreement target" in guide
