"""Per-request isolation and health: a bad input fails only its own request, an exception in a group's life
fails or re-routes exactly that group's members at once (counted, bounded), `Service.health` tells the truth.
On a model gencc does not ship (a linear map defined here)."""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest

from gencc.engine import ThreadBackend, VirtualWorkers, Workers
from gencc.faults import Faults, ServiceTimes
from gencc.serving import Request, Service, make_dispatcher
from gencc.serving.dispatch import MAX_ERROR_KINDS, MAX_ERRORS

from .serving_helpers import lin

IN = (3, 4)
rng = np.random.default_rng(0)
X = rng.normal(size=(64, *IN)).astype(np.float32)


def service(scheme="gcc", W=12, K=8, faults=None, **kw) -> Service:
    pool = Workers(W, ThreadBackend({"f": lin}, dtype=np.float32), ServiceTimes(0.002), faults=faults)
    svc = Service(pool, lambda env: make_dispatcher(scheme, env, K=K, max_wait=0.02, **kw))
    svc.in_shape = IN
    return svc


def sim(W=12, K=8, **kw):
    env = VirtualWorkers(W, ServiceTimes(samples=[0.01]), functions={"f": lin})
    return env, make_dispatcher("gcc", env, K=K, max_wait=0.02, **kw)


def submit_at(env, d, xs, gap=0.001):
    reqs = [Request(i, x, i * gap) for i, x in enumerate(xs)]
    for r in reqs:
        env.call_later(r.t_arrival, lambda r=r: d.submit(r))
    env.run(until=100)
    return reqs


def test_poison_input_gets_422_and_its_group_mates_are_answered_at_once():
    svc = service()
    poison = X[0].astype(np.float64)
    poison[0, 0] = 1e39  # finite in float64, inf in float32 (what the workers see)
    try:
        t0 = time.monotonic()
        futs = []
        for i in range(10):  # two valid requests and one poison per group
            futs += [(i, svc.submit(X[2 * i])), (i, svc.submit(X[2 * i + 1])), (None, svc.submit(poison))]
        out = [(i, f.result(timeout=10)) for i, f in futs]
        assert time.monotonic() - t0 < 5
        bad = [svc.submit(x).result(timeout=1) for x in (X[0][:2], "0.5", [[None] * 4] * 3, np.full(IN, np.nan))]
    finally:
        svc.close()
    for i, r in out:
        if i is None:
            assert r.status == 422 and "float32" in r.error
        else:
            assert r.status == 200 and r.latency < 2.0
    valid = [r for i, r in out if i is not None]
    F = lin(X[:20])
    assert all(np.allclose(r.output, F[j], atol=1e-4) for j, r in enumerate(valid) if not r.degraded)
    assert [r.status for r in bad] == [422] * 4 and "shape" in bad[0].error
    assert svc.invalid == 14 and svc.pending == 0 and svc.pool.errors == [] and svc.dispatcher.errors == {}


def test_an_exception_forming_a_group_reroutes_exactly_its_members_at_once():
    env, d = sim()
    xs = [X[i] for i in range(24)]
    xs[9] = np.full(IN, np.inf, dtype=np.float32)  # past the service's check: order_inputs raises in group 2
    reqs = submit_at(env, d, xs)
    assert d.errors == {"order_inputs: ValueError": 1} and "non-finite" in d.last_errors[0]
    F = lin(np.stack(xs))
    for r in reqs:
        if r.id == 9:  # served alone (what its own task returns: the simulator does not check outputs)
            assert r.status and r.latency < 0.1
        else:
            assert r.status == 200 and r.latency < 0.1 and np.allclose(r.output, F[r.id], atol=1e-4)
    assert all(not r.group.broken for r in reqs[:8] + reqs[16:]) and reqs[8].group.broken


@pytest.mark.parametrize("where", ["encode", "decode"])
def test_an_exception_encoding_or_decoding_reroutes_the_group_to_plain_copies(where):
    env, d = sim(W=12)
    calls = {"n": 0}
    real = getattr(d.code, where)

    def broken(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError(f"{where} broke")
        return real(*a, **k)

    setattr(d.code, where, broken)
    slow = {3, 4}  # these members' own workers straggle: a decode (or a copy) must answer them
    xs = [X[i] for i in range(16)]
    reqs = [Request(i, x, i * 0.001) for i, x in enumerate(xs)]
    orig_send = env.send

    def send(w, task):
        if task.kind == "systematic" and task.owner.id in slow:
            task.delay = 1.0
        orig_send(w, task)

    env.send = send
    for r in reqs:
        env.call_later(r.t_arrival, lambda r=r: d.submit(r))
    env.run(until=100)
    F = lin(np.stack(xs))
    assert [r.status for r in reqs] == [200] * 16
    assert all(r.latency < 0.2 for r in reqs)
    assert d.errors == {f"{'_place' if where == 'encode' else '_try_decode'}: RuntimeError": 1}
    broken_group = reqs[0].group
    assert broken_group.broken and not reqs[8].group.broken
    for r in reqs:  # plain copies of the abandoned group's members are exact
        if r.group is broken_group:
            assert not r.degraded and np.allclose(r.output, F[r.id], atol=1e-4)


def test_an_observer_that_raises_does_not_keep_the_answer_back():
    env, d = sim()

    def observe(r):
        raise KeyError("metrics broke")

    d.on_answer = observe
    got = []
    reqs = [Request(i, X[i], i * 0.001, respond=got.append) for i in range(8)]
    for r in reqs:
        env.call_later(r.t_arrival, lambda r=r: d.submit(r))
    env.run(until=100)
    assert len(got) == 8 and all(r.status == 200 for r in got)
    assert d.errors == {"on_answer: KeyError": 8}


def test_error_records_are_bounded():
    env, d = sim()
    for i in range(3 * MAX_ERROR_KINDS):
        d.record_error(f"place{i}", ValueError(str(i)))
    assert len(d.errors) == MAX_ERROR_KINDS + 1 and d.errors["other"] == 2 * MAX_ERROR_KINDS
    assert len(d.last_errors) == MAX_ERRORS and sum(d.errors.values()) == 3 * MAX_ERROR_KINDS


def test_health_follows_the_live_workers_against_what_the_scheme_needs():
    svc = service("gcc", W=13, K=8)  # N = 12
    try:
        h = svc.health()
        assert (h["status"], h["live"], h["needed"], h["alive"]) == ("ok", 13, 12, 13)
        svc.pool.dead[[1]] = True
        assert svc.health()["status"] == "ok"
        svc.pool.dead[[2]] = True  # 11 live < N = 12
        h = svc.health()
        assert (h["status"], h["live"], h["alive"]) == ("degraded", 11, 11)
        assert svc.submit(X[0]).result(timeout=5).status == 200  # degraded still answers
        svc.pool.dead[:] = True
        assert svc.health()["status"] == "down"
        r = svc.submit(X[0]).result(timeout=5)
        assert r.status == 503 and "no live worker" in r.error
    finally:
        svc.close()
    assert service("uncoded", W=2).health()["needed"] == 1
    assert service("replication", W=3).health()["needed"] == 2


def test_healthz_answers_503_unless_ok():
    pytest.importorskip("httpx")
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    from gencc.serving import create_app

    svc = service("gcc", W=12, K=8)
    svc.workload = SimpleNamespace(in_shape=IN)
    with TestClient(create_app(svc)) as c:
        r = c.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "ok"
        svc.pool.dead[0] = True
        r = c.get("/healthz")
        assert r.status_code == 503 and r.json()["status"] == "degraded" and r.json()["alive"] == 11
        assert c.post("/predict", json={"input": X[1].tolist()}).status_code == 200


def test_crashing_workers_the_service_keeps_answering_and_health_stays_honest():
    svc = service("gcc", W=12, K=8, faults=Faults(crash_p=0.02))
    seen = []
    try:
        for i in range(40):
            rs = [f.result(timeout=10) for f in [svc.submit(X[j % 64]) for j in range(8 * i, 8 * i + 8)]]
            before, h, dead = int(svc.pool.dead.sum()), svc.health(), int(svc.pool.dead.sum())
            if before == dead:  # (a worker may crash, or be replaced, while health is read)
                assert h["alive"] == 12 - dead and h["live"] == 12 - dead
                assert h["status"] == ("ok" if dead == 0 else "degraded" if dead < 12 else "down")
            assert all(r.status in (200, 503) for r in rs)
            seen.append((dead, [r.status for r in rs]))
            if dead == 12:
                break
    finally:
        svc.close()
    assert svc.dispatcher.failures.get("crash", 0) > 0  # workers did crash
    for dead, st in seen:  # answers keep coming while any worker lives
        if dead < 12:
            assert st.count(200) >= 1
    assert svc.pool.errors == [] and svc.dispatcher.errors == {}


@pytest.mark.parametrize("strict", [False, True])
def test_checked_serving_reroutes_unchecked_or_with_strict_fails_the_broken_group(strict):
    env = VirtualWorkers(12, ServiceTimes(samples=[0.01]), functions={"f": lin})
    d = make_dispatcher("gcc", env, K=8, max_wait=0.02, check="strict" if strict else "on",
                        check_data=(lin, rng.normal(size=(200, *IN)).astype(np.float32)))
    real, calls = d.code.encode, []

    def encode(X):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("encode broke")
        return real(X)

    d.code.encode = encode
    reqs = submit_at(env, d, [X[i] for i in range(24)])
    assert d.errors == {"_place: RuntimeError": 1}
    mid = reqs[8:16]  # the second group: the one whose encoding raised
    if strict:
        assert [r.status for r in mid] == [500] * 8 and all("encode broke" in r.error for r in mid)
    else:
        assert [r.status for r in mid] == [200] * 8 and d.unchecked >= 8
        assert all(np.allclose(r.output, lin(r.x[None])[0], atol=1e-4) for r in mid)
    assert all(r.status == 200 and r.latency < 0.2 for r in reqs[:8] + reqs[16:])


def test_an_error_is_placed_in_gencc_by_module_name_whatever_folder_the_callers_code_lives_in(tmp_path):
    """A user's function (or a test) under a folder named `gencc`, as `git clone` names the repository, is not
    gencc's own code: the error's place is still the dispatcher's function that called it."""
    folder = tmp_path / "gencc" / "gencc"
    folder.mkdir(parents=True)
    (folder / "users_code.py").write_text("def broken(*a, **k):\n    raise RuntimeError('encode broke')\n")
    spec = importlib.util.spec_from_file_location("users_code", folder / "users_code.py")
    users_code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(users_code)
    assert "gencc" in users_code.broken.__code__.co_filename
    env, d = sim(W=12)
    d.code.encode = users_code.broken
    reqs = submit_at(env, d, [X[i] for i in range(8)])
    assert d.errors == {"_place: RuntimeError": 1}
    assert [r.status for r in reqs] == [200] * 8
