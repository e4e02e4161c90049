"""The simulator's calibration: tasks record how many workers were busy when they started (real pool and
simulator alike), service times drawn conditional on that count, and measured arrival times replayed."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gencc.engine import Task, ThreadBackend, VirtualWorkers, Workers
from gencc.faults import ServiceTimes
from gencc.serving import Request, make_dispatcher, simulate_load

from .serving_helpers import lin


def brute_bucket(samples, busy, k, m):
    """Samples whose busy count lies within the smallest radius of max(k, 1) holding at least m of them."""
    k = max(k, 1)
    for r in range(0, int(max(busy)) + k + 1):
        sel = [s for s, b in zip(samples, busy, strict=True) if abs(b - k) <= r]
        if len(sel) >= min(m, len(samples)):
            return sorted(sel)
    raise AssertionError("unreachable")


@given(st.lists(st.tuples(st.floats(0, 1), st.integers(1, 12)), min_size=1, max_size=60), st.integers(1, 20))
def test_buckets_match_brute_force(pairs, m):
    samples, busy = [p[0] for p in pairs], [p[1] for p in pairs]
    svc = ServiceTimes(samples=samples, busy=busy, min_bucket=m)
    assert svc.conditional
    for k in range(0, max(busy) + 1):
        want = brute_bucket(samples, busy, k, m)
        assert sorted(svc._buckets[k].tolist()) == want
    assert svc.bucket_means() == pytest.approx([np.mean(brute_bucket(samples, busy, k, m))
                                               for k in range(1, max(busy) + 1)])


def test_draws_follow_the_busy_count():
    rng = np.random.default_rng(0)
    svc = ServiceTimes(samples=[0.01] * 60 + [0.05] * 60, busy=[1] * 60 + [6] * 60, min_bucket=50)
    assert {svc.draw(rng, busy=1) for _ in range(50)} == {0.01}
    assert {svc.draw(rng, busy=6) for _ in range(50)} == {0.05}
    assert {svc.draw(rng, busy=40) for _ in range(50)} == {0.05}  # above the largest measured: the largest
    assert {svc.draw(rng, busy=3) for _ in range(200)} == {0.01}  # nearest count with enough samples
    pooled = ServiceTimes(samples=[0.01] * 60 + [0.05] * 60)
    assert not pooled.conditional and {pooled.draw(rng, busy=1) for _ in range(200)} == {0.01, 0.05}


def test_bad_calibration_is_rejected_with_a_reason():
    with pytest.raises(ValueError, match="one positive integer count per sample"):
        ServiceTimes(samples=[0.01, 0.02], busy=[1])
    with pytest.raises(ValueError, match="one positive integer count per sample"):
        ServiceTimes(samples=[0.01], busy=[0])
    with pytest.raises(ValueError, match="need measured samples"):
        ServiceTimes(0.01, busy=[1])
    with pytest.raises(ValueError, match="bucket_means needs"):
        ServiceTimes(samples=[0.01]).bucket_means()
    with pytest.raises(ValueError, match="ascending"):
        simulate_load(lambda e: make_dispatcher("uncoded", e), VirtualWorkers(2, ServiceTimes(0.01)), 1.0, 1.0,
                      arrivals=np.array([0.5, 0.2]))


def send_all(e, workers, done):
    for w in workers:
        t = Task(fn="f", x=np.ones(3), on_done=done.append, worker=w)
        e.send(w, t)


def test_simulator_counts_busy_workers_and_draws_by_them():
    # 1 busy worker: 10 ms; 2 or more: 100 ms (a shared CPU)
    svc = ServiceTimes(samples=[0.01] * 5 + [0.1] * 5, busy=[1] * 5 + [2] * 5, min_bucket=5)
    e = VirtualWorkers(4, svc)
    done: list[Task] = []
    send_all(e, [0, 1, 2], done)
    e.run()
    assert sorted(t.busy for t in done) == [1, 2, 3]
    assert sorted(round(t.t_end - t.t_start, 9) for t in done) == [0.01, 0.1, 0.1]
    assert e.running == 0
    send_all(e, [3], done)  # alone again: 10 ms
    e.run()
    assert done[-1].busy == 1 and done[-1].t_end - done[-1].t_start == pytest.approx(0.01)


def test_real_pool_counts_busy_workers_into_a_calibration():
    pool = Workers(4, ThreadBackend({"f": lin}, np.float32), ServiceTimes(0.2))
    try:
        done: list[Task] = []
        send_all(pool, [0, 1, 2], done)
        t_end = time.monotonic() + 10
        while len(done) < 3 and time.monotonic() < t_end:
            time.sleep(0.01)
        send_all(pool, [3], done)
        while len(done) < 4 and time.monotonic() < t_end:
            time.sleep(0.01)
        assert sorted(t.busy for t in done[:3]) == [1, 2, 3] and done[3].busy == 1 and pool.running == 0
        assert len(pool.lags["post"]) >= 4 and len(pool.lags["pickup"]) == 4
        assert min(pool.lags["pickup"]) >= 0 and min(pool.lags["post"]) >= 0
        ex = list(pool.executed)
        svc = ServiceTimes(samples=[t.t_end - t.t_start for t in ex], busy=[t.busy for t in ex], min_bucket=1)
        assert svc.bucket_means().shape == (3,) and np.all(svc.bucket_means() >= 0.18)
    finally:
        pool.close()


def test_replayed_arrivals_are_the_given_times():
    times = np.array([0.0, 0.003, 0.004, 0.5, 0.51])
    reqs = simulate_load(lambda e: make_dispatcher("uncoded", e), VirtualWorkers(2, ServiceTimes(samples=[0.01])), 1.0,
                         99.0, arrivals=times)
    assert [r.t_arrival for r in reqs] == times.tolist() and all(r.status == 200 for r in reqs)
    assert isinstance(reqs[0], Request) and reqs[1].latency == pytest.approx(0.01)
    assert reqs[2].latency > 0.01  # both workers busy: it queued


def test_draws_by_start_time_replay_a_stall_where_it_happened():
    rng = np.random.default_rng(1)
    starts = np.arange(0, 10, 0.01)  # one task every 10 ms for 10 s; a 300 ms stall around t = 5 s
    dur = np.where(np.abs(starts - 5.0) < 0.15, 0.3, 0.04)
    svc = ServiceTimes(samples=dur, starts=starts, window_s=0.02)
    assert {svc.draw(rng, t=5.0) for _ in range(50)} == {0.3}
    assert {svc.draw(rng, t=2.0) for _ in range(50)} == {0.04}
    assert svc.draw(rng, t=50.0) == 0.04  # beyond the samples: the nearest one
    far = ServiceTimes(samples=[0.1, 0.2], starts=[0.0, 1.0], window_s=0.01)
    assert far.draw(rng, t=0.4) == 0.1 and far.draw(rng, t=0.6) == 0.2 and far.draw(rng, t=-3) == 0.1
    with pytest.raises(ValueError, match="one finite time per sample"):
        ServiceTimes(samples=[0.1, 0.2], starts=[0.0])


def test_simulator_replays_the_pool_delays():
    # one request at t = 0, 10 ms of service: submit seen at 5 ms (post), started 1 ms later (pickup), its result
    # seen 5 ms after it ends (post): answered at 21 ms; a timer fires 2 ms late
    e = VirtualWorkers(2, ServiceTimes(samples=[0.01]), lags={"post": [0.005], "timer": [0.002], "pickup": [0.001]})
    reqs = simulate_load(lambda env: make_dispatcher("uncoded", env), e, 1.0, 1.0, arrivals=np.array([0.0]))
    assert reqs[0].status == 200 and reqs[0].latency == pytest.approx(0.021)
    e2, fired = VirtualWorkers(1, ServiceTimes(0.01), lags={"timer": [0.002]}), []
    e2.call_later(0.1, lambda: fired.append(e2.now()))
    e2.run()
    assert fired == [pytest.approx(0.102)]
    with pytest.raises(ValueError, match="lags must map"):
        VirtualWorkers(2, ServiceTimes(0.01), lags={"post": [-1.0]})
