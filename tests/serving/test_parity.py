"""Serving with a trained parity model: SGCC's coded slots run it (inputs and outputs scaled by the group size),
its prior is calibrated on training inputs, and the cover rule answers parity recoveries only."""

from __future__ import annotations

import numpy as np
import pytest

import gencc
from gencc.engine import Task, VirtualWorkers
from gencc.faults import PersistentStragglers, ServiceTimes
from gencc.serving import CodedDispatcher, Request, Service, make_dispatcher, simulate_load, worker_functions
from gencc.serving.parity import calibrate_sgcc, coded_workers, parity_k, sgcc_parity_code

from .serving_helpers import lin

SHARP = {"rho": 1e-9, "length_scale": 0.3}  # a near-exact parity model: the recovery is c_a = 2 y - c_b


class PackedRecorder:
    """A perfect packed parity model for `lin` (stacked pairs (B, 2, d) -> lin of each, summed) that records
    its inputs."""

    batched, packed, k = True, True, 2

    def __init__(self):
        self.inputs: list[np.ndarray] = []

    def __call__(self, Z):
        Z = np.asarray(Z, dtype=float)
        self.inputs.append(Z)
        return lin(Z.reshape(-1, *Z.shape[2:])).reshape(len(Z), Z.shape[1], -1).sum(axis=1)


class Recorder:
    """A perfect parity model for the linear `lin` (F_P(x_1 + x_2) = lin(x_1) + lin(x_2)) that records inputs."""

    batched = True

    def __init__(self):
        self.inputs: list[np.ndarray] = []

    def __call__(self, Z):
        self.inputs.append(np.asarray(Z, dtype=float))
        return lin(Z)


def test_worker_functions_route_parity_slots_with_their_group_size():
    code = gencc.SystematicGCC(8, 12, parity=Recorder())
    names, ins, outs = worker_functions(code)
    E = code.encoding_matrix
    for n in range(12):
        coded = np.count_nonzero(E[n]) > 1  # a coded slot averages its group
        assert names[n] == ("parity" if coded else "f")
        assert ins[n] == outs[n] == (np.count_nonzero(E[n]) if coded else 1.0)  # the mean times s is the sum
    assert worker_functions(gencc.SystematicGCC(8, 12)) == (["f"] * 12, [1.0] * 12, [1.0] * 12)
    assert worker_functions(gencc.ParM(4, 2, parity=Recorder())) == (["f"] * 4 + ["parity"] * 2, [1.0] * 6,
                                                                      [1.0] * 6)
    # a packed parity model gets the stacked members as they are, and its sum is read as the mean
    names, ins, outs = worker_functions(gencc.SystematicGCC(8, 12, parity=PackedRecorder()))
    assert ins == [1.0] * 12 and sorted(outs) == [1.0] * 8 + [2.0] * 4
    assert worker_functions(gencc.ParM(4, 2, parity=PackedRecorder()))[1:] == ([1.0] * 6, [1.0] * 6)


@pytest.mark.parametrize(("scheme", "K", "W", "k"), [("sgcc-parity", 8, 12, 2), ("sgcc-parity-hedge", 8, 10, 4),
                                                      ("sgcc-parity", 6, 9, 2), ("parm", 8, 12, 3),
                                                      ("gcc", 8, 12, None), ("sgcc", 8, 12, None)])
def test_parity_k_is_the_largest_coding_group(scheme, K, W, k):
    assert parity_k(scheme, K, W, parm_k=3) == k
    if k and scheme.startswith("sgcc"):
        N = coded_workers(K, W)
        assert k == max(len(g) for g in gencc.SystematicGCC(K, N).groups)


def test_parity_k_refuses_groups_without_a_parity_model():
    with pytest.raises(ValueError, match="groups of 8"):
        parity_k("sgcc-parity", 8, 9)
    with pytest.raises(ValueError, match="more workers"):
        parity_k("sgcc-parity", 8, 8)
    with pytest.raises(ValueError, match="parity model"):
        make_dispatcher("sgcc-parity", VirtualWorkers(12, ServiceTimes(0.01)), K=8)


def run_coded(K: int, N: int, busy: dict[int, int], seed: int = 0, rec: Recorder | PackedRecorder | None = None,
              **coded):
    """SGCC with a perfect parity model on N workers (10 ms tasks), members k on worker k, all K requests at
    time 0; `busy` preloads workers with that many tasks; `coded`: the dispatcher's options (order=False).
    Returns requests, dispatcher, recorder, inputs."""
    rec = Recorder() if rec is None else rec
    e = VirtualWorkers(N, ServiceTimes(samples=[0.01]), functions={"f": lin, "parity": rec})
    d = CodedDispatcher(e, sgcc_parity_code(K, N, rec, SHARP), max_wait=1.0, order=False, **coded)
    for w, n in busy.items():
        for _ in range(n):
            e.send(w, Task(fn="f", on_done=lambda t: None))
    d.least_loaded = lambda exclude=(): min(set(range(N)) - set(exclude))
    X = np.random.default_rng(seed).normal(size=(K, 3)).astype(np.float32)
    reqs = [Request(i, X[i], 0.0) for i in range(K)]
    for r in reqs:
        e.call_later(0.0, lambda r=r: d.submit(r))
    e.run(until=10)
    return reqs, d, rec, X


def group_run(busy: dict[int, int], decode_wait: float = 0.015, cover: bool = True):
    """K = 4, N = 6 (coded tasks on 4 and 5): `run_coded` without the inputs."""
    return run_coded(4, 6, busy, decode_wait=decode_wait, cover=cover)[:3]


def test_coded_slots_get_the_group_sum_and_a_late_member_is_recovered_exactly():
    reqs, d, rec = group_run({0: 3})  # member 0's worker busy 30 ms; coded results back at 10 ms
    X = np.stack([r.x for r in reqs])
    # each parity query is the sum of a coding group (the mean times s = 2), as ParM's parity model expects
    got = np.stack([row for z in rec.inputs for row in z])  # every coded task's input, batched together or not
    want = np.stack([X[g].sum(axis=0) for g in d.code.groups])
    assert len(got) == len(want) and all(np.abs(want - z).max(axis=1).min() < 1e-5 for z in got)
    assert reqs[0].degraded and reqs[0].latency == pytest.approx(0.01)
    assert np.allclose(reqs[0].output, lin(X[:1])[0], atol=1e-4)  # 2 y - c_1, y = F_P(sum) / 2
    assert not any(r.degraded for r in reqs[1:])


def test_packed_coded_slots_get_the_stacked_group_and_a_late_member_is_recovered_exactly():
    rec = PackedRecorder()
    reqs, d, _, X = run_coded(4, 6, {0: 3}, rec=rec, decode_wait=0.015, cover=True)
    got = sorted((row for z in rec.inputs for row in z), key=lambda z: float(z[0, 0]))
    want = sorted((X[g] for g in d.code.groups), key=lambda z: float(z[0, 0]))
    assert len(got) == 2 and all(g.shape == (2, 3) and np.allclose(g, w) for g, w in zip(got, want, strict=True))
    assert reqs[0].degraded and reqs[0].latency == pytest.approx(0.01)
    assert np.allclose(reqs[0].output, lin(X[:1])[0], atol=1e-4)  # 2 (F_P(stack) / 2) - c_1
    assert not any(r.degraded for r in reqs[1:])


def test_cover_copies_a_member_whose_covering_task_is_late_instead_of_guessing():
    # member 0 and both coded tasks late (workers 0, 4, 5 busy): at the 15 ms deadline member 0 gets a plain copy
    # on a free worker, answered exactly at 25 ms
    reqs, d, _ = group_run({0: 3, 4: 10, 5: 10})
    assert d.copies == 1 and not reqs[0].degraded and reqs[0].latency == pytest.approx(0.025)
    assert [t.kind for t in reqs[0].tasks] == ["systematic", "copy"]
    assert np.allclose(reqs[0].output, lin(reqs[0].x[None])[0])
    # without cover: 3 results cannot decode 4 members, so member 0 waits for its own worker
    reqs, d, _ = group_run({0: 3, 4: 10, 5: 10}, cover=False)
    assert not reqs[0].degraded and reqs[0].latency == pytest.approx(0.04) and d.copies == 0


def test_cover_copies_a_member_whose_group_lost_two():
    # members 0 and 1 (one coding group) late: the parity gives only their sum, so each gets a plain copy and
    # is answered exactly at 20 ms instead of by a guess at 10 ms
    reqs, _, _ = group_run({0: 3, 1: 3})
    X = np.stack([r.x for r in reqs])
    for r in reqs[:2]:
        assert not r.degraded and r.latency == pytest.approx(0.02)
        assert [t.kind for t in r.tasks] == ["systematic", "copy"]
        assert np.allclose(r.output, lin(r.x[None])[0])
    reqs, _, _ = group_run({0: 3, 1: 3}, cover=False)
    assert reqs[0].degraded and reqs[0].latency == pytest.approx(0.01)
    assert not np.allclose(reqs[0].output, lin(X[:1])[0], atol=1e-2)


def test_cover_needs_coding_groups():
    with pytest.raises(ValueError, match="coding groups"):
        CodedDispatcher(VirtualWorkers(6, ServiceTimes(0.01)), gencc.GCC(4, 6), cover=True)


class Counted:
    """A batched f that counts its calls."""

    batched = True

    def __init__(self):
        self.calls = 0

    def __call__(self, X):
        self.calls += 1
        X = np.asarray(X, dtype=float)
        return np.tanh(X @ np.arange(10.0).reshape(5, 2) / 10)


def stub_workload():
    """A workload whose test inputs are NaN: calibration must read training inputs only."""
    from gencc.workloads import Workload

    rng = np.random.default_rng(1)
    f = Counted()
    return Workload(name="stub", f=f, factory=Counted, X_train=rng.normal(size=(200, 5)), y_train=None,
                    X_test=np.full((10, 5), np.nan), y_test=None, classifier=False, test_accuracy=None,
                    in_shape=(5,), out_shape=(2,))


def test_calibration_reads_training_inputs_once():
    w = stub_workload()

    def parity(Z):
        return w.f(np.asarray(Z) / 2) * 2  # a parity model that is only approximately additive

    cal = calibrate_sgcc(w, 4, 6, parity, n_sets=30)
    assert set(cal) == {"length_scale", "rho"} and np.isfinite(cal["rho"]) and cal["rho"] > 0
    calls = w.f.calls
    assert calibrate_sgcc(w, 4, 6, parity, n_sets=30) == cal and w.f.calls == calls  # cached
    code = sgcc_parity_code(4, 6, parity, cal)
    assert code.rho == pytest.approx(cal["rho"]) and code.kernel.length_scale == cal["length_scale"]


@pytest.fixture(scope="module")
def digits():
    torch = pytest.importorskip("torch")
    from gencc.workloads import load, load_parity

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one 8x8 input per call: extra threads only contend (9x slower on 2 busy cores)
    yield load("digits-cnn", progress=False), load_parity("digits-cnn", 2, progress=False)
    torch.set_num_threads(threads)


def test_sgcc_parity_answers_agree_with_f_under_persistent_stragglers(digits):
    """W = 12, K = 8, 10% of workers slow x10, 30% load, the real CNN and its trained parity model in the
    simulator, 40 s: decoded answers agree with f's top-1 (this seeded run: 0.956 of 91; 0.80 without the cover
    rule; the README's runs measure the issue's 0.95 target on more answers)."""
    w, par = digits
    W, s = 12, 0.042
    cal = calibrate_sgcc(w, 8, 12, par)
    X = w.X_test[np.random.default_rng(8).integers(len(w.X_test), size=4000)]
    e = VirtualWorkers(W, ServiceTimes(s), PersistentStragglers(W, 0.1, 10.0, 1.0, seed=0),
               functions={"f": w.f, "parity": par})
    reqs = simulate_load(lambda env: make_dispatcher("sgcc-parity", env, K=8, max_wait=0.05, parity=par,
                                                     calibration=cal, request_timeout=120.0),
                         e, 0.3 * W / (s * 1.9), 40.0, inputs=X, drain=60)
    dk = [r for r in reqs if r.status == 200 and r.degraded]
    assert all(r.status == 200 for r in reqs) and len(dk) >= 60
    assert any(t.fn == "parity" for t in e.executed)
    truth = np.argmax(w.f(np.stack([r.x for r in dk])), axis=1)
    assert np.mean(truth == np.argmax(np.stack([r.output for r in dk]), axis=1)) >= 0.93


def test_service_runs_the_parity_model_on_coded_workers(digits):
    w, _ = digits
    # gate off: a gate still calibrating holds every decode, and its groups then send no coded task
    svc = Service.build("digits-cnn", "sgcc-parity", workers=6, K=4, service_ms=2.0, slow_fraction=0.3,
                        slow_factor=10.0, mean_slow_s=0.2, max_wait_ms=5, gate="off")
    parity, seen = svc.pool.backend.functions["parity"], []  # the workers keep no inputs: watch the calls

    def spy(Z):
        seen.extend(np.asarray(Z))
        return parity(Z)

    spy.batched = True
    svc.pool.backend.functions["parity"] = spy
    try:
        X = w.X_test[:60]
        reqs = [svc.submit(x).result(timeout=30) for x in X[:2]]  # warm up (first model calls are slow)
        futs = [svc.submit(x) for x in X]
        reqs = [f.result(timeout=30) for f in futs]
    finally:
        svc.close()
    assert [r.status for r in reqs] == [200] * len(X) and svc.scheme == "sgcc-parity"
    Y = w.f(X)
    exact = [i for i, r in enumerate(reqs) if not r.degraded]
    assert np.allclose(np.stack([reqs[i].output for i in exact]), Y[exact], atol=1e-4)
    par = [t for t in svc.pool.executed if t.fn == "parity"]
    assert par and all(t.kind == "coded" for t in par)
    # a parity task's input is the sum of two served inputs (its coding group, or a member and its pad), not
    # their mean
    sums = (X[:, None] + X[None, :]).reshape(len(X) ** 2, -1)
    assert len(seen) >= len(par)  # a call whose tasks were all cancelled mid-run leaves no record
    for x in seen:
        assert np.min(np.abs(sums - np.asarray(x).reshape(1, -1)).max(axis=1)) < 1e-4


def test_coded_hedge_under_cover_sends_the_late_members_own_group():
    # K = 8, N = 12 (pairs): member 5's nearest coded point is pair (6, 7)'s, which cannot recover it; the coded
    # hedge under cover sends pair (4, 5)'s coded task, and the recovery is exact
    reqs, d, _, X = run_coded(8, 12, {5: 5}, seed=2, mode="hedge", cover=True, initial_delay=0.015)
    own = d.cover[5][0]
    nearest = min(d.coded_slots, key=lambda s: abs(d.code.beta[s] - d.code.alpha[5]))
    assert nearest != own and set(d.code.encoding_matrix[own].nonzero()[0]) == {4, 5}
    assert [t.slot for t in reqs[5].group.tasks] == [own]
    assert reqs[5].degraded and reqs[5].latency == pytest.approx(0.025)  # hedge at 15 ms + one 10 ms task
    assert np.allclose(reqs[5].output, lin(X[5:6])[0], atol=1e-4)


def test_serving_sgcc_with_a_packed_parity_and_checks(digits) -> None:
    """sgcc-parity with the packed model (its real recipe: trained once, cached) in the simulator (W = 12,
    K = 8: pairs), wrong-result checks on: the coded slots get stacked pairs, and degraded answers (parity
    recoveries) agree with f's top-1."""
    from gencc.workloads import load_parity

    w = digits[0]
    F = load_parity("digits-cnn", 2, progress=False, packed=True)
    W, s = 12, 0.042
    cal = calibrate_sgcc(w, 8, 12, F, n_sets=30)
    X = w.X_test[np.random.default_rng(3).integers(len(w.X_test), size=2000)]
    e = VirtualWorkers(W, ServiceTimes(s), PersistentStragglers(W, 0.1, 10.0, 1.0, seed=0),
                       functions={"f": w.f, "parity": F})
    reqs = simulate_load(lambda env: make_dispatcher("sgcc-parity", env, K=8, max_wait=0.05, parity=F,
                                                     calibration=cal, request_timeout=120.0, check="on",
                                                     check_data=(w.f, w.X_train)),
                         e, 0.3 * W / (s * 1.9), 15.0, inputs=X, drain=60)
    assert all(r.status == 200 for r in reqs)
    parity_tasks = [t for t in e.executed if t.fn == "parity"]
    assert parity_tasks and all(np.shape(t.x) == (2, *w.in_shape) for t in parity_tasks[:20])
    dk = [r for r in reqs if r.degraded]
    assert len(dk) >= 10
    truth = np.argmax(w.f(np.stack([r.x for r in dk])), axis=1)
    agree = np.mean(truth == np.argmax(np.stack([r.output for r in dk]), axis=1))
    assert agree >= 0.9, (agree, len(dk))
