"""The coded dispatchers on the front door's event loop (`LoopEnv`), on a model gencc never
saw: every method of the dispatcher runs on the loop's thread once attached (task results, timers, decodes, the
gate, a wrong-result check, close), on the pool's control thread when no loop is attached (the Python API), and
a timer set on one side of an attach fires on the other."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from gencc.engine import ThreadBackend, Workers  # noqa: E402
from gencc.faults import Faults  # noqa: E402
from gencc.serving import Service, create_app  # noqa: E402
from gencc.serving._policy.loop_env import LoopEnv  # noqa: E402

IN = (4, 4)
rng = np.random.default_rng(5)
W1 = rng.normal(size=(16, 10))
X_TRAIN = rng.normal(size=(300, *IN)).astype(np.float32)
X = rng.normal(size=(24, *IN)).astype(np.float32)
SLOW = 123.0  # an input whose first value is exactly this takes 0.15 s (a coded input, a mix, never is)
X[3::6, 0, 0] = SLOW


def net(x):
    """A user's model: 16 inputs -> 10 logits, batched numpy; slow on the marked inputs."""
    A = np.asarray(x, dtype=float).reshape(len(x), -1)
    if np.any(A[:, 0] == SLOW):
        time.sleep(0.15)
    return np.tanh(A @ W1) * 3.0


net.batched = True


def watch(disp, env: LoopEnv) -> list[str]:
    """Wrap every method of `disp` (its class's, bound to it) so that a call off the dispatcher's thread
    (`env.on_thread()`) is recorded: the names of those calls, with the thread's."""
    off: list[str] = []
    for name in dir(type(disp)):
        if name.startswith("__"):
            continue
        raw = inspect.getattr_static(disp, name)
        if not inspect.isfunction(raw):  # properties, staticmethods, data
            continue
        meth = getattr(disp, name)

        def checked(*a, _m=meth, _n=name, **kw):
            if not env.on_thread():
                off.append(f"{_n} on {threading.current_thread().name}")
            return _m(*a, **kw)

        setattr(disp, name, checked)
    return off


def test_the_watch_sees_a_call_off_the_dispatchers_thread():
    svc = Service.build(net, "gcc", workers=6, K=4, data=X_TRAIN, gate="off")
    try:
        off = watch(svc.dispatcher, svc.env)
        svc.dispatcher.workers_needed()  # the test's thread: not the control thread
        assert off == [f"workers_needed on {threading.current_thread().name}"]
    finally:
        svc.close()


SCHEMES = [  # (scheme, Service.build options): eager and lazy coding, the gate, a wrong-result check
    # eager coding in full: behind a gate, load-adaptive redundancy gives late members plain copies, so whether a
    # decode happens would depend on which workers were idle when each group formed
    ("gcc", {"gate_threshold": 0.0, "redundancy": "full"}),
    ("gcc-hedge", {"gate_threshold": 0.0}),
    ("sgcc-hedge", {"gate": "off"}),
    ("gcc", {"check": "on", "gate_threshold": 0.0}),
]


@pytest.mark.parametrize("scheme,opts", SCHEMES, ids=[f"{s}-{'-'.join(o)}" for s, o in SCHEMES])
def test_a_coded_dispatcher_runs_only_on_the_loop_once_attached(scheme, opts):
    # slow inputs and failing tasks: hedges, coded tasks, decodes, copies and retries all happen
    svc = Service.build(net, scheme, workers=6, K=4, data=X_TRAIN, service_ms=2.0, faults=Faults(raise_p=0.15),
                        request_timeout=5.0, **opts)
    off = watch(svc.dispatcher, svc.env)
    with TestClient(create_app(svc)) as c:
        assert svc.env.loop is not None
        outs = [c.post("/predict/batch", json={"inputs": X[i:i + 6].tolist()}).json()["results"]
                for i in range(0, len(X), 6)]
        assert svc.submit(X[0]).result(timeout=10).status == 200  # from another thread: handed to the loop
    res = [r for o in outs for r in o]
    assert [r["status"] for r in res] == [200] * len(X), res
    exact = [i for i, r in enumerate(res) if not r["degraded"]]
    assert exact and np.allclose([res[i]["output"] for i in exact], net(X[exact]), atol=1e-4)
    assert svc.dispatcher.decodes > 0 and svc.pool.counts["raise"] > 0
    assert off == [] and svc.dispatcher.errors == {} and svc.pool.errors == []
    assert svc.env.loop is None and svc.pending == 0


def test_without_a_loop_a_coded_dispatcher_runs_on_the_control_thread():
    svc = Service.build(net, "gcc-hedge", workers=6, K=4, data=X_TRAIN, service_ms=2.0, gate_threshold=0.0)
    off = watch(svc.dispatcher, svc.env)
    try:
        assert svc.env.loop is None
        reqs = [f.result(timeout=10) for f in [svc.submit(x) for x in X[:12]]]
        assert [r.status for r in reqs] == [200] * 12
        exact = [i for i, r in enumerate(reqs) if not r.degraded]
        assert np.allclose([reqs[i].output for i in exact], net(X[exact]), atol=1e-4)
    finally:
        svc.close()
    assert off == [] and svc.dispatcher.errors == {} and svc.dispatcher.decodes > 0


@pytest.fixture
def loop_env():
    """A LoopEnv on one worker, not attached, and an event loop running in its own thread (stopped after)."""
    pool = Workers(1, ThreadBackend({"f": net}))
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    try:
        yield LoopEnv(pool), loop, th
    finally:
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        pool.close()


def test_a_timer_fires_on_the_dispatchers_thread_across_an_attach_and_a_detach(loop_env):
    env, loop, th = loop_env
    fired: dict[str, str] = {}
    done = threading.Event()

    def arm(label: str) -> None:  # on the dispatcher's thread: a timer, then the thread changes under it
        env.call_later(0.1, lambda: (fired.__setitem__(label, threading.current_thread().name), done.set()))

    env.post(lambda: arm("set on the control thread"))
    time.sleep(0.02)
    env.attach(loop, th.ident)  # before the timer is due
    assert done.wait(5)
    done.clear()
    env.post(lambda: arm("set on the loop"))
    time.sleep(0.02)
    loop.call_soon_threadsafe(env.attach, None)
    assert done.wait(5)
    assert fired["set on the control thread"] == th.name
    assert fired["set on the loop"].endswith("-control")


def test_posts_from_any_thread_run_in_order_on_the_loop_or_after_a_detach_on_the_control_thread(loop_env):
    env, loop, th = loop_env
    ran: list[tuple[int, str]] = []
    env.attach(loop, th.ident)
    poster = threading.Thread(target=lambda: [env.post(lambda i=i: ran.append((i, threading.current_thread().name)))
                                              for i in range(500)])
    poster.start()
    poster.join()
    t_end = time.monotonic() + 5
    while len(ran) < 500 and time.monotonic() < t_end:
        time.sleep(0.01)
    assert ran == [(i, th.name) for i in range(500)]
    ran.clear()
    blocked = threading.Event()
    loop.call_soon_threadsafe(lambda: (blocked.set(), time.sleep(0.2)))  # the loop busy: posts queue up
    assert blocked.wait(5)
    for i in range(3):
        env.post(lambda i=i: ran.append((i, threading.current_thread().name)))
    env.attach(None)  # detached before the loop drains them: the control thread runs them
    t_end = time.monotonic() + 5
    while len(ran) < 3 and time.monotonic() < t_end:
        time.sleep(0.01)
    assert [i for i, _ in ran] == [0, 1, 2] and all(n.endswith("-control") for _, n in ran), ran
