"""Straggler-resilient training: coded data-parallel training on the engine (DESIGN section 12).

    from gencc.training import train
    res = train(model, (X, y), scheme="gc", workers=8, stragglers=2, steps=100, batch_size=256, lr=0.1,
                eval_data=(Xv, yv), eval_every=10, track_grad_error=True)
    res.model, res.history

Schemes (`SCHEMES`): sync, ignore, gc (Tandon et al.'s exact gradient code), agc (ErasureHead-style FRC with
early stop), gcc and bacc (coded data placement, aggregated with `Code.decode_sum`). Workloads for the command
line and the benchmark: `gencc.training.workloads`.
"""

from .gradcodes import GC_KINDS, cyclic_matrix, frc_matrix, gc_weights
from .injection import injection, parse_stragglers
from .schemes import PLACEMENTS, SCHEMES, make_plan
from .trainer import BACKENDS, OPTIMIZERS, TrainResult, accuracy, train

__all__ = ["BACKENDS", "GC_KINDS", "OPTIMIZERS", "PLACEMENTS", "SCHEMES", "TrainResult", "accuracy",
           "cyclic_matrix", "frc_matrix", "gc_weights", "injection", "make_plan", "parse_stragglers", "train"]
