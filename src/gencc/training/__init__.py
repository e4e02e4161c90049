"""Straggler-resilient training: coded data-parallel training on the engine (DESIGN section 12).

    from gencc.training import train
    res = train(model, (X, y), scheme="gc", workers=8, stragglers=2, steps=100, batch_size=256, lr=0.1,
                eval_data=(Xv, yv), eval_every=10, track_grad_error=True)
    res.model, res.history

Schemes (`TRAINING_SCHEMES`): sync, ignore, gc (Tandon et al.'s exact gradient code), agc (ErasureHead-style FRC with
early stop), gcc and bacc (coded data placement, aggregated with `Code.decode_sum`). Workloads for the command
line and the benchmark: `gencc.training.workloads`. torch is imported on first use of `train`, so the command
line and `gencc.training`'s torch-free parts load without it; `TrainOptions` checks `train`'s options without
torch or data (a `gencc.errors.ConfigError` naming the parameter), as `train` itself does.
"""

from typing import TYPE_CHECKING

from .gradcodes import GC_KINDS, cyclic_matrix, frc_matrix, gc_weights
from .injection import injection, parse_stragglers
from .options import OPTIMIZERS, PLACEMENTS, TRAIN_WORKLOADS, TrainOptions
from .schemes import TRAINING_SCHEMES, make_plan

if TYPE_CHECKING:  # for type checkers and the API reference; at run time __getattr__ loads them
    from .trainer import TrainResult, accuracy, train

_TORCH = ("TrainResult", "accuracy", "train")  # from .trainer, which imports torch: loaded on first use


def __getattr__(name: str):
    if name in _TORCH:
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GC_KINDS", "OPTIMIZERS", "PLACEMENTS", "TRAINING_SCHEMES", "TRAIN_WORKLOADS", "TrainOptions", "TrainResult",
           "accuracy", "cyclic_matrix", "frc_matrix", "gc_weights", "injection", "make_plan", "parse_stragglers",
           "train"]
