"""RayExecutor: run inside a loopback-only namespace (the normal run re-executes these, see conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gencc
from gencc.runtime import Hedged, RayExecutor, Replicated, Uncoded, run, stream

from . import runtime_helpers
from .runtime_helpers import (
    Faulty,
    LinearFactory,
    OffsetParity,
    PackedOffsetParity,
    TinyNet,
    linear,
    reference,
    smooth,
)

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(runtime_helpers)  # tests/ is not importable on the actors
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # UserTorchModel below
INF = np.inf


@pytest.fixture(scope="module")
def ex():
    e = RayExecutor(num_actors=12, num_cpus=2)
    yield e
    e.close()


def test_ray_binds_loopback_only(ex, X):
    run(smooth, X, gencc.GCC(K=6, N=12), ex, order=False)
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}


def test_all_results_equal_the_decode(ex, X):
    code = gencc.GCC(K=6, N=12)
    r = run(smooth, X, code, ex, order=False)
    assert r.returned.tolist() == list(range(12)) and r.stragglers == {}
    np.testing.assert_allclose(r.outputs, reference(code, X, range(12)), atol=1e-12)
    assert len(set(ex.actor_pids)) == 12


def test_master_threads_do_not_grow_with_the_workers(ex, X):
    """One master thread waits on every call out (ray.wait), not one per worker or actor."""
    run(smooth, X, gencc.GCC(K=6, N=12), ex, order=False)
    before = threading.active_count(), len(os.listdir("/proc/self/task"))
    code = gencc.GCC(K=6, N=48)  # 48 workers on the 12 actors: 48 master threads before
    lat = np.zeros(48)
    lat[[5, 30]] = INF  # two calls still out when the job stops: cancelled, not waited on by threads
    r = run(smooth, X, code, ex, wait_for=46, latency=lat, order=False)
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-10)
    assert threading.active_count() == before[0]
    assert len(os.listdir("/proc/self/task")) < before[1] + 8  # Ray's own threads may vary a little
    assert sorted(t.name for t in threading.enumerate() if t.name.startswith("gencc")) == [
        "gencc-ray-worker-control", "gencc-ray-worker-wait"]


def test_wait_for_and_cooperative_cancel(ex, X):
    code = gencc.BACC(K=6, N=12)
    lat = np.zeros(12)
    lat[[2, 9]] = INF  # never delivered: only a cancel ends these tasks on the actors
    r = run(smooth, X, code, ex, wait_for=10, latency=lat, order=False)
    assert r.returned.tolist() == [0, 1, 3, 4, 5, 6, 7, 8, 10, 11]
    assert r.stragglers[2].startswith("late") and r.stragglers[9].startswith("late")
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-12)


def test_faults_are_stragglers(ex, X):
    code = gencc.GCC(K=6, N=12)
    kinds = {1: "raise", 4: "nan", 7: "shape", 10: "hang"}
    f = Faulty([(code.encode(X)[w], k) for w, k in kinds.items()], hang_s=20.0)
    with RayExecutor(factory=lambda: f, num_actors=4) as e:  # 3 workers per actor
        healthy = [w for w in range(12) if w not in kinds]
        lat = np.zeros(12)
        lat[healthy] = 1.0  # the faults answer first, so they are judged (not merely late) before the stop
        r = run(None, X, code, e, wait_for=8, latency=lat, order=False)
    assert r.returned.tolist() == healthy
    assert r.stragglers[1] == "raised: RuntimeError: injected fault"
    assert r.stragglers[4].startswith("non-finite")
    assert r.stragglers[7].startswith("wrong shape")
    assert r.stragglers[10].startswith("late")
    np.testing.assert_allclose(r.outputs, reference(code, X, healthy), atol=1e-12)


def test_actor_crash_mid_job_is_lost_and_job_completes(X):
    code = gencc.GCC(K=6, N=10)
    f = Faulty([(code.encode(X)[3], "crash")])
    with RayExecutor(factory=lambda: f, num_actors=10) as e:
        r = run(None, X, code, e, order=False, timeout=60)  # wait for all: only the loss can end worker 3
        assert r.stragglers == {3: r.stragglers[3]} and r.stragglers[3].startswith("lost")
        np.testing.assert_allclose(r.outputs, reference(code, X, [w for w in range(10) if w != 3]), atol=1e-12)
        # the backend replaced the actor (a fresh one rebuilds f) for later jobs: worker 3's next task waits on it
        assert _wait_until_ready(e.actor_for(3)) != e.actor_pids[3] and e._backend.restarts[3] == 1
        X2 = X + 1.0
        r2 = run(None, X2, code, e, order=False, timeout=60)
        assert r2.stragglers == {}
        np.testing.assert_allclose(r2.outputs, reference(code, X2, range(10)), atol=1e-12)


def _wait_until_ready(actor, timeout: float = 90.0) -> int:
    """The pid of `actor` once it answers (after a restart, which may take a while on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get(actor.ready.remote(), timeout=5)
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("restarts", [0, -1])
def test_actor_killed_mid_job_is_a_straggler_then_replaced(X, restarts):
    code, X = gencc.GCC(K=3, N=4), X[:3]
    lat = np.zeros(4)
    lat[3] = INF  # worker 3 sits on its actor until the actor is killed
    with RayExecutor(num_actors=4, max_restarts=restarts) as e:
        e.start(smooth, 4)
        old_pid = e.actor_pids[3]
        killer = threading.Timer(1.0, lambda: ray.kill(e.actors[3], no_restart=True))  # for good, as Ray sees it
        killer.start()
        r = run(smooth, X, code, e, latency=lat, order=False, timeout=60)
        killer.join()
        assert set(r.stragglers) == {3} and r.stragglers[3].startswith("lost")
        np.testing.assert_allclose(r.outputs, reference(code, X, [0, 1, 2]), atol=1e-12)
        assert e._backend.restarts[3] == (0 if restarts == 0 else 1)
        r2 = run(smooth, X, code, e, order=False, timeout=90)  # wait for all: worker 3 answers only if replaced
        if restarts == 0:  # replacement off: the dead actor stays dead (its task refused, or lost when sent before
            why = r2.stragglers.get(3, "")  # the pool learned the actor is gone: on a loaded machine, either)
            assert set(r2.stragglers) == {3} and ("not replaced" in why or why.startswith("lost")), why
            assert e._backend.restarts[3] == 0
        else:
            assert r2.stragglers == {} and _wait_until_ready(e.actor_for(3)) != old_pid
            np.testing.assert_allclose(r2.outputs, reference(code, X, range(4)), atol=1e-12)


@pytest.mark.parametrize("broken", ["ray.wait raises", "a bug in the waiting thread"])
def test_a_failing_waiting_thread_loses_the_calls_out_instead_of_hanging(X, monkeypatch, broken):
    """Whatever fails in RayWorkers' waiting thread (Ray's own wait, or an unexpected error past it: here a ref
    nobody sent, a KeyError), every call out fails as lost: the job ends with them counted as stragglers instead
    of waiting forever, and the workers serve the next job."""
    code, X = gencc.GCC(K=3, N=4), X[:3]
    with RayExecutor(num_actors=4) as e:
        assert run(smooth, X, code, e, order=False, timeout=60).stragglers == {}
        with monkeypatch.context() as m:
            if broken == "ray.wait raises":
                def wait(*args, **kwargs):
                    raise RuntimeError("injected: ray.wait failed")

                m.setattr(ray, "wait", wait)
            else:
                m.setattr(e._backend, "wait", lambda refs, timeout: [object()])
            t0 = time.monotonic()
            with pytest.raises(gencc.JobFailed) as err:
                run(smooth, X, code, e, order=False, timeout=30)
            assert time.monotonic() - t0 < 20  # ended by the loss, not by the hard timeout
        assert sorted(err.value.stragglers) == [0, 1, 2, 3]
        assert all(why.startswith("lost") for why in err.value.stragglers.values()), err.value.stragglers
        r = run(smooth, X, code, e, order=False, timeout=60)
        assert r.stragglers == {}
        np.testing.assert_allclose(r.outputs, reference(code, X, range(4)), atol=1e-12)


def test_more_logical_workers_than_actors_and_torch_factory():
    Xw = np.random.default_rng(2).normal(size=(5, 6))
    code = gencc.GCC(K=5, N=10)
    with RayExecutor(factory=TinyNet(), num_actors=3) as e:
        lat = np.zeros(10)
        lat[[0, 3, 6]] = INF  # all three sit on actor 0, beside its other workers' tasks
        r = run(None, Xw, code, e, wait_for=7, latency=lat, order=False)
        assert len(e.actors) == 3
    assert r.returned.tolist() == [1, 2, 4, 5, 7, 8, 9]
    np.testing.assert_allclose(r.outputs, reference(code, Xw, r.returned, f=TinyNet()()), atol=1e-10)


def test_stream_and_baselines(ex):
    rng = np.random.default_rng(4)
    batches = [rng.normal(size=(6, 4)) for _ in range(5)]
    code = gencc.GCC(K=6, N=12)
    lat = gencc.ShiftedExponential(shift=0.002, rate=500.0)
    out = list(stream(smooth, batches, code, ex, max_in_flight=3, seed=1, wait_for=9, latency=lat, order=False))
    for Xb, r in zip(batches, out, strict=True):
        assert len(r.returned) == 9
        np.testing.assert_allclose(r.outputs, reference(code, Xb, r.returned), atol=1e-12)
    X = batches[0]
    lat = np.zeros(12)
    lat[[1, 4]] = INF
    for scheme in (Uncoded(6), Replicated(6, 12), Hedged(6, 12, hedge_delay=0.05)):
        d = lat[: scheme.N] if scheme.N == 12 else np.zeros(6)
        r = run(smooth, X, scheme, ex, latency=d)
        np.testing.assert_allclose(r.outputs, smooth(X), atol=1e-12)


def test_parm_parity_model_is_built_on_the_actors(X):
    code = gencc.ParM(6, k=2, parity=OffsetParity(0.5))  # N = 9 workers on 3 actors
    delays = np.zeros(9)
    delays[[1, 4]] = INF  # inputs 1 and 4 come back through the parity workers 6 and 8
    with RayExecutor(factory=LinearFactory(), num_actors=3) as e:
        for _ in range(2):  # the second job finds the parity model already built on the actors
            r = run(None, X, code, e, wait_for=7, latency=delays, order=False)
            expected = linear(X)
            expected[[1, 4]] += 0.5
            np.testing.assert_allclose(r.outputs, expected, atol=1e-12)
            assert r.returned.tolist() == [0, 2, 3, 5, 6, 7, 8] and r.missing.size == 0


def test_packed_parity_workers_get_their_stacked_group_on_the_actors(X):
    code = gencc.ParM(6, k=2, parity=PackedOffsetParity(2, 0.5))  # parity workers receive (2, *in_shape)
    delays = np.zeros(9)
    delays[[1, 4]] = INF
    with RayExecutor(factory=LinearFactory(), num_actors=3) as e:
        r = run(None, X, code, e, wait_for=7, latency=delays, order=False)
    expected = linear(X)
    expected[[1, 4]] += 0.5
    np.testing.assert_allclose(r.outputs, expected, atol=1e-12)


def test_garbage_worker_is_excluded_and_reported_on_ray():
    X = np.cumsum(np.random.default_rng(0).normal(size=(6, 4)), axis=0) / 4  # smooth along the inputs
    code = gencc.GCC(K=6, N=12)
    f = Faulty([(code.encode(X)[5], "garbage")])  # worker 5 sits on an alpha: the decode copies its result
    with RayExecutor(factory=lambda: f, num_actors=4) as e:
        r = run(None, X, code, e, order=False, adversaries=1, timeout=300)
    assert r.stragglers == {5: "inconsistent result: flagged by the robust decode and excluded"}
    assert 5 not in r.returned.tolist()
    np.testing.assert_allclose(r.outputs, reference(code, X, r.returned), atol=1e-10)


class UserTorchModel:
    """A picklable factory of a model gencc never saw: a small torch module defined here, wrapped as a batched
    numpy callable (float32 compute, float64 out), built on each actor."""

    def __call__(self):
        import torch

        torch.manual_seed(5)
        net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).eval()

        def f(X):
            with torch.no_grad():
                return net(torch.as_tensor(np.asarray(X, dtype=np.float32))).double().numpy()

        f.batched = True
        return f


def test_user_torch_model_served_on_ray_answers_like_threads():
    from gencc.engine import Workers, make_backend
    from gencc.serving import Service, make_dispatcher

    factory = UserTorchModel()
    Xs = np.random.default_rng(4).normal(size=(10, 6)).astype(np.float32)
    got = {}
    for name in ("threads", "ray"):
        be = make_backend(name, 4, {"f": factory()}, factories={"f": factory} if name == "ray" else None,
                          dtype=np.float32)  # "threads": the local backend's other name
        svc = Service(Workers(4, be, mark_dead=name == "threads"), lambda env: make_dispatcher("replication", env))
        try:
            got[name] = [f.result(timeout=60) for f in [svc.submit(x) for x in Xs]]
        finally:
            svc.close()
    want = factory()(Xs)
    for a, b, w in zip(got["threads"], got["ray"], want, strict=True):
        assert a.status == b.status == 200 and not a.degraded and not b.degraded
        assert type(a.output) is type(b.output) and np.asarray(a.output).dtype == np.asarray(b.output).dtype
        np.testing.assert_array_equal(np.asarray(b.output), np.asarray(a.output))
        np.testing.assert_allclose(np.asarray(b.output), w, rtol=1e-6, atol=1e-6)


class SlowBuild:
    """Builds `smooth` on an actor after a pause, as a large torch model takes a while to load."""

    def __call__(self):
        time.sleep(6)
        return smooth


def test_actor_start_up_does_not_count_against_a_jobs_timeout(ex, X):
    """The actors start and build f (`RayExecutor.prepare`, bounded by ready_timeout) before the job's clock."""
    code = gencc.GCC(K=6, N=12)
    with RayExecutor(factory=SlowBuild(), num_actors=2) as e:
        t0 = time.monotonic()
        r = run(None, X, code, e, order=False, timeout=4)
        assert time.monotonic() - t0 >= 6
    assert r.stragglers == {}
    np.testing.assert_allclose(r.outputs, reference(code, X, range(12)), atol=1e-12)


def test_start_reports_progress_and_close_removes_own_temp_dir(ex, X):
    ex.close()  # last test of the module: it needs a Ray started by its own executor
    if ray.is_initialized():
        ray.shutdown()
    seen: list[tuple[int, int]] = []
    e = RayExecutor(num_actors=3, num_cpus=2, on_ready=lambda ready, total: seen.append((ready, total)))
    e.start(smooth, 3)
    tmp = e._own_tmp
    assert tmp is not None and os.path.isdir(tmp) and os.path.basename(tmp).startswith("gcr")
    assert os.stat(tmp).st_mode & 0o777 == 0o700  # Ray makes its own folders 0777: they sit inside this one
    assert os.listdir(tmp)  # Ray's session files live there
    code = gencc.GCC(K=6, N=12)  # 12 logical workers on the 3 actors
    r = run(smooth, X, code, e, order=False)
    np.testing.assert_allclose(r.outputs, reference(code, X, range(12)), atol=1e-12)
    e.close()
    assert not os.path.exists(tmp)
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)
    assert [a for a, _ in seen] == sorted(a for a, _ in seen)



QUIET_JOB = """
import os, sys
import ray  # imported before gencc starts Ray, as a user's program may
import numpy as np
import gencc
from gencc.runtime import RayExecutor, run

def f(x):
    if x.ravel()[0] > 0.5:  # some coded inputs: the actor's process dies, and Ray's raylet reports it
        os._exit(1)
    return np.sin(x)

with RayExecutor(num_actors=12, num_cpus=1) as ex:  # more actors than CPUs: Ray's raylet warns of that too
    r = run(f, np.random.default_rng(0).normal(size=(4, 3)), gencc.GCC(K=4, N=12), ex)
    print("node", ray._private.worker._global_node.node_ip_address, "stragglers", len(r.stragglers))
"""


def test_a_private_ray_keeps_its_address_probe_and_colour_codes_out_of_the_output(tmp_path):
    """A job on a private Ray prints nothing of Ray's search for a routable address (its probe of 8.8.8.8, which
    fails inside the namespace) and no colour codes, even when Ray was imported before gencc started it and the
    environment does not set Ray's settings (`init_ray` sets them). RAY_DEDUP_LOGS (read when Ray is imported)
    comes from the namespace's environment, as in every Ray run gencc starts."""
    from gencc.engine.ray.namespace import in_loopback_namespace

    assert in_loopback_namespace()
    script = tmp_path / "job.py"
    script.write_text(QUIET_JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_COLOR_PREFIX")}
    env["RAY_DEDUP_LOGS"] = "0"
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "node 127.0.0.1 stragglers" in p.stdout, out
    assert "8.8.8.8" not in out and "external connectivity" not in out, out
    assert "\x1b" not in out, out
    assert "Started a local Ray instance" not in out, out
