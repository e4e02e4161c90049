"""Training on Ray actors (one per worker), inside a loopback-only namespace (test_ray_namespace.py runs it)."""

import numpy as np
import pytest
import torch
from torch import nn

from gencc.faults import Faults
from gencc.training import train

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


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
                backend="ray", seed=3, ray_options={"num_cpus": 2})
    crashed = {w for h in res.history for w, r in h["stragglers"].items() if r.startswith("crash")}
    assert crashed and len(res.history) == 10  # killed actors are stragglers; the master goes on
    assert all(np.isfinite(h["train_loss"]) for h in res.history if h["updated"])
