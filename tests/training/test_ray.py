"""Training on Ray actors (one per worker), inside a loopback-only namespace (test_ray_namespace.py runs it)."""

import os
import sys

import numpy as np
import pytest
import torch
from torch import nn

from gencc.faults import Faults
from gencc.training import train

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ExitOnce below, on the actors


def test_training_on_ray_actors_same_history_and_a_killed_actor_is_a_straggler(problem):
    X, y, Xv, yv = problem
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 12), nn.Tanh(), nn.Linear(12, 10)).double()
    res = train(model, (X, y), scheme="gc", workers=4, stragglers=1, steps=5, batch_size=120, lr=0.3,
                eval_data=(Xv, yv), eval_every=5, track_grad_error=True, backend="ray", delay_s=0.3,
                ray_options={"num_cpus": 2})
    assert all(h["grad_rel_err"] <= 1e-10 and len(h["returned"]) == 3 for h in res.history)
    assert {"step", "wall_s", "train_loss", "returned", "compute_per_worker"} <= set(res.history[0])
    assert "eval_acc" in res.history[-1]
    assert not ray.is_initialized()  # the backend started Ray privately and shut it down
    res = train(model, (X, y), scheme="ignore", workers=4, stragglers=Faults(crash_p=0.15), steps=10, lr=0.3,
                backend="ray", seed=3, ray_options={"num_cpus": 2, "max_restarts": 0})  # replacement: below
    crashed = {w for h in res.history for w, r in h["stragglers"].items() if r.startswith("crash")}
    assert crashed and len(res.history) == 10  # killed actors are stragglers; the master goes on
    assert all(np.isfinite(h["train_loss"]) for h in res.history if h["updated"])


class ExitOnce(nn.Module):
    """A model defined here whose forward ends its process (os._exit, as a crash would) once the marker file
    exists, in the one worker that removes it first; never in the master's process."""

    def __init__(self, marker: str):
        super().__init__()
        self.marker, self.master = marker, os.getpid()
        self.a = nn.Linear(64, 10)

    def forward(self, x):
        if os.getpid() != self.master:
            try:
                os.remove(self.marker)
            except FileNotFoundError:
                pass
            else:
                os._exit(1)
        return self.a(x)


def test_actor_dying_mid_step_is_a_straggler_and_is_replaced(problem, tmp_path):
    X, y, _, _ = problem
    marker = tmp_path / "die"
    torch.manual_seed(0)
    model = ExitOnce(str(marker)).double()

    def after(h):
        if h["step"] == 2:
            marker.touch()  # one worker's actor dies computing step 3

    res = train(model, (X, y), scheme="sync", workers=3, stragglers=0, steps=5, lr=0.3, backend="ray",
                ray_options={"num_cpus": 2}, progress=after)
    h = {r["step"]: r for r in res.history}
    assert not marker.exists()
    assert [h[s]["returned"] for s in (1, 2)] == [[0, 1, 2]] * 2
    (dead, why), = h[3]["stragglers"].items()  # exactly one: the worker whose actor died
    assert why.startswith("crash") and "replaced" in why and dead not in h[3]["returned"]
    assert [h[s]["returned"] for s in (4, 5)] == [[0, 1, 2]] * 2  # its fresh actor answers the later steps
    assert all(h[s]["updated"] for s in (1, 2, 4, 5))
