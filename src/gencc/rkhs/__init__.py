"""The RKHS math under every code, pure numpy and scipy: point designs (`points`), kernels (`kernels`),
smoothing splines and kernel smoothers (`smoothing`), the O(n) state-space solver for Matern 3/2
(`matern_ssm`) and leave-one-out smoother formulas (`smoother_loo`)."""

from . import kernels, matern_ssm, points, smoother_loo, smoothing

__all__ = ["kernels", "matern_ssm", "points", "smoother_loo", "smoothing"]
