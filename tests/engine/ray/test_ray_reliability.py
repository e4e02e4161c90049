"""What an operator trusts first, on Ray actors, inside the loopback-only network namespace (the launcher in
test_ray_namespace.py re-executes this module there): health that counts killed actors as they die and come
back, a clean stop on SIGTERM with a private Ray or a joined cluster, and no credential file left readable by
others."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gencc.engine.ray.namespace import in_loopback_namespace

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")


@pytest.fixture(autouse=True)
def _inside_the_namespace():
    if not in_loopback_namespace():
        pytest.skip("Ray runs only inside the loopback-only namespace (see the launcher test)")


def _poll(fn, until, timeout: float, step: float = 0.02):
    """fn() every `step` s until until(value) holds: (value, seconds taken); fails after `timeout` s."""
    t0 = time.monotonic()
    while True:
        value = fn()
        if until(value):
            return value, time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, value
        time.sleep(step)


def test_health_sees_killed_actors_within_2_s_and_counts_their_re_creation() -> None:
    """Two of six actors killed by PID: within 2 s /healthz says 4 alive and 2 being replaced, not ready (a GCC
    group needs all 6), /metrics agrees; once the replacements have built their models, 6 alive and ready again,
    restarts 2 (the re-created actors), no lost task (none was out)."""
    from gencc.serving import Service, create_app, start_in_thread

    if ray.is_initialized():
        ray.shutdown()
    svc = Service.build("digits-mlp", "gcc", workers=6, K=4, backend="ray")
    server, th, port = start_in_thread(create_app(svc))
    url = f"http://127.0.0.1:{port}"
    try:
        h0 = httpx.get(url + "/healthz").json()
        assert (h0["status"], h0["alive"], h0["needed"], h0["restarts"], h0["backend"]) == ("ok", 6, 6, 0, "ray")
        pids = svc.pool.backend.actor_pids
        for w in (1, 4):
            os.kill(pids[w], signal.SIGKILL)
        h, took = _poll(lambda: httpx.get(url + "/healthz").json(), lambda h: h["alive"] == 4, 2.0)
        assert took <= 2.0 and (h["status"], h["replacing"] + h["dead"], h["live"]) == ("degraded", 2, 4), h
        assert httpx.get(url + "/healthz").status_code == 503
        assert httpx.get(url + "/v2/health/ready").status_code == 503
        metrics = httpx.get(url + "/metrics").text
        assert 'gencc_workers{state="alive"} 4.0' in metrics and "gencc_ready 0.0" in metrics, metrics
        assert svc.pool.worker_states()[1] != "alive" and svc.pool.worker_states()[4] != "alive"
        h, _ = _poll(lambda: httpx.get(url + "/healthz").json(), lambda h: h["alive"] == 6, 120, 0.2)
        assert (h["status"], h["restarts"], h["lost_tasks"], h["replacing"], h["dead"]) == ("ok", 2, 0, 0, 0), h
        assert httpx.get(url + "/v2/health/ready").status_code == 200
        metrics = httpx.get(url + "/metrics").text
        assert "gencc_worker_restarts_total 2.0" in metrics and "gencc_ready 1.0" in metrics, metrics
        assert svc.pool.backend.actor_pids != [] and sum(svc.pool.backend.restarts) == 2
    finally:
        server.should_exit = True
        th.join(60)


@pytest.mark.parametrize("where", ["private", "joined"])
def test_sigterm_on_ray_answers_what_is_in_flight_and_exits_0(where: str, tmp_path: Path, wait_healthy) -> None:
    from gencc.engine.ray import LocalCluster
    from gencc.workloads import load
    from tests.cli.test_serve_stop import stop_while_busy

    argv = ["--workload", "digits-mlp", "--scheme", "replication", "--workers", "2", "--service-ms", "1500",
            "--backend", "ray"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    x = load("digits-mlp", progress=False).X_test[0].tolist()
    if ray.is_initialized():
        ray.shutdown()
    if where == "joined":
        with LocalCluster(0, head_cpus=2) as cluster:
            rc, out, statuses = stop_while_busy([*argv, "--address", cluster.address], signal.SIGTERM, env,
                                                wait_healthy, x, 180)
    else:
        rc, out, statuses = stop_while_busy(argv, signal.SIGTERM, env, wait_healthy, x, 180)
    assert rc == 0, out[-3000:]
    assert statuses == [200, 200, 200], (statuses, out[-3000:])
    assert out.count("stopped on SIGTERM: answered the requests in flight") == 1, out[-3000:]
    assert " ERROR " not in out and "could not serve" not in out and "Traceback" not in out, out[-3000:]


JOB = """
import sys
import numpy as np, gencc
from gencc.engine.ray import start
from gencc.runtime import RayExecutor

if sys.argv[1] == "outside":  # as outside the namespace: Ray keeps token authentication on
    start.in_loopback_namespace = lambda: False

def f(X):
    return np.tanh(X)

with RayExecutor(num_actors=2) as ex:
    res = gencc.run(f, np.ones((2, 3)), gencc.GCC(K=2, N=3), ex, wait_for=3)
import os
print("mode", os.environ.get("RAY_AUTH_MODE"), "returned", len(res.returned))
"""


@pytest.mark.parametrize("where", ["namespace", "outside"])
def test_a_private_ray_through_the_python_api_leaves_no_credential_file(where: str, tmp_path: Path) -> None:
    """Ray (2.5x+) writes the token it generates to ~/.ray/auth_token, readable by everyone; gencc's private Ray
    turns authentication off where nothing else can reach it (the namespace) and otherwise keeps its token in the
    environment: no file under the home folder is readable by others afterwards."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", JOB, where], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"mode {'disabled' if where == 'namespace' else 'token'} returned 3" in p.stdout, p.stdout + p.stderr
    readable = [str(f) for f in home.rglob("*") if f.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH)
                and not f.is_dir()]
    assert readable == [] and not (home / ".ray" / "auth_token").exists(), readable


class Factory:
    """Builds f = tanh, unless the file `marker` exists: then the actor's process dies while it builds ("exit":
    as on a node being removed) or the factory raises ("raise": a factory that fails)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self):
        import numpy as np

        if os.path.exists(self.marker):
            with open(self.marker) as fh:
                how = fh.read()
            if how == "exit":
                os._exit(1)
            raise RuntimeError("injected: the factory fails")
        return np.tanh


def test_replacements_that_die_before_ready_back_off_and_a_failing_factory_ends_dead(tmp_path: Path) -> None:
    """Slot 0's replacements die while they build (os._exit): each next one comes after a longer wait (0.5 s,
    then 1 s, ...), the slot says "replacing" all along, and once building works again it is alive. Slot 1's
    replacements' factory raises: after three the slot is dead, and its worker says so; the pool then treats that
    worker as dead (no task goes to it: one sent fails at once as lost)."""
    import numpy as np

    from gencc.engine import Task, make_backend, make_pool
    from gencc.engine.ray.backend import BACKOFF_S

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not importable on the actors
    if ray.is_initialized():
        ray.shutdown()
    marker = tmp_path / "marker"
    be = make_backend("ray", 2, factories={"f": Factory(str(marker))})
    pool = make_pool(2, be, mark_dead=False)
    try:
        marker.write_text("exit")
        os.kill(be.actor_pids[0], signal.SIGKILL)
        waited: dict[int, float] = {}  # replacement k -> when its wait began (the one before it died unready)
        made: dict[int, float] = {}  # replacement k -> when it was created
        t0 = time.monotonic()
        while len(made) < 4:  # slot 0's first four replacements: the last three each after a backoff
            now, k = time.monotonic(), be.restarts[0]
            made.setdefault(k, now)
            if 0 in be._due:
                waited.setdefault(k + 1, now)
            assert pool.worker_states()[0] == "replacing" or k == 0, (be.states, be.restarts)
            assert now - t0 < 90, (be.states, be.restarts)
            time.sleep(0.005)
        for k, backoff in ((2, BACKOFF_S), (3, 2 * BACKOFF_S)):
            assert made[k] - waited[k] >= backoff - 0.05, (k, made, waited)
        marker.unlink()
        _poll(lambda: pool.worker_states(), lambda s: s[0] == "alive", 90, 0.05)
        assert pool.restarts[0] == be.restarts[0] >= 3

        marker.write_text("raise")
        os.kill(be.actor_pids[1], signal.SIGKILL)
        states, _ = _poll(lambda: pool.worker_states(), lambda s: s[1] == "dead", 120, 0.05)
        assert states == ["alive", "dead"] and be.restarts[1] == 3, (states, be.restarts)
        # the pool treats it as dead: no dispatcher picks it (load inf), and a task sent to it fails at once as
        # lost without a call to an actor, while worker 0 answers
        _poll(lambda: list(pool.loads()), lambda loads: loads[1] == float("inf") and loads[0] == 0, 5, 0.02)
        done: dict[int, Task] = {}
        for w in (0, 1):
            pool.post(lambda w=w: pool.send(w, Task(w, np.ones(3), on_done=lambda t: done.setdefault(t.worker, t))))
        _poll(lambda: len(done), lambda n: n == 2, 30, 0.02)
        assert done[0].ok and np.allclose(done[0].output, np.tanh(np.ones(3))), done[0]
        assert (done[1].ok, done[1].reason, done[1].error) == (False, "crash", "worker lost"), done[1]
        assert not be.nodes._out.get(be.actors[1]), be.nodes._out  # no call went to slot 1's actor
    finally:
        pool.close()


def lin(x):
    """The chaos test's model (its own, linear: a decode of it is nearly exact)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    return np.stack([x.sum(axis=1), 2 * x[:, 0] - x[:, -1]], axis=1)


lin.batched = True


def test_chaos_a_node_lost_and_an_actor_killed_under_load_every_request_answered_right() -> None:
    """A short chaos run: a service on six actors spread over two worker nodes of a local cluster, under steady
    open-loop load; one node is removed with its actors, then an actor of the other node is killed by PID. Every
    request is answered once and right (replication: every answer is the model's own, so each is checked
    exactly); health reports the losses and is ok again once the replacements (all on the node left) are up."""
    import numpy as np

    from gencc.engine import make_backend, make_pool
    from gencc.engine.ray import NODE_RESOURCE, LocalCluster
    from gencc.faults import ServiceTimes
    from gencc.serving import Service, make_dispatcher

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not importable on the actors
    if ray.is_initialized():
        ray.shutdown()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3, 4)).astype(np.float32)
    with LocalCluster(2) as cluster:
        be = make_backend("ray", 6, {"f": lin}, dtype=np.float32, address=cluster.address,
                          actor_options={"scheduling_strategy": "SPREAD", "resources": {NODE_RESOURCE: 1}})
        pool = make_pool(6, be, ServiceTimes(0.005), mark_dead=False)
        svc = Service(pool, lambda env: make_dispatcher("replication", env, request_timeout=30))
        svc.in_shape = (3, 4)
        try:
            ids, placed = cluster.node_ids(), be.placement()
            victim = max(range(2), key=lambda i: placed.count(ids[i]))
            on_victim = placed.count(ids[victim])
            assert on_victim >= 3 and "" not in placed, placed
            futures, t0 = [], time.monotonic()
            for i, x in enumerate(X):  # 40 requests a second for 10 s
                if i == 100:
                    cluster.remove(victim)
                if i == 240:
                    alive = [s for s, st in enumerate(be.states) if st == "alive"]
                    os.kill(ray.get(be.actors[alive[0]].ready.remote(), timeout=30), signal.SIGKILL)
                futures.append(svc.submit(x))
                time.sleep(max(0.0, t0 + (i + 1) / 40 - time.monotonic()))
            reqs = [f.result(timeout=90) for f in futures]
            h, _ = _poll(svc.health, lambda h: h["alive"] == 6, 150, 0.2)
            assert h["restarts"] >= on_victim + 1 and h["status"] == "ok", h
            assert set(be.placement()) == {ids[1 - victim]}  # every replacement on the node left
        finally:
            svc.close()
    statuses = [r.status for r in reqs]
    assert statuses == [200] * len(X), {s: statuses.count(s) for s in set(statuses)}
    np.testing.assert_allclose(np.array([r.output for r in reqs]), lin(X), rtol=1e-5, atol=1e-5)
