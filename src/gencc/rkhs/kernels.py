"""Reproducing kernels on Omega = [-1, 1] and the bases of their unpenalised null spaces.

A kernel k defines the penalty ||P u||_H^2 of the penalised least-squares problem in docs/design.md section 3; its
null space (spanned by phi_1..phi_q) is left unpenalised. Sobolev kernels are scaled so that the penalty is
exactly the integral of (u^(m))^2 over [-1, 1] itself, whatever interval the formula is written on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from math import comb, factorial

import numpy as np

from .._util.validate import check_int, check_positive


class Kernel(ABC):
    """A positive semi-definite kernel on [-1, 1] with a polynomial null space of dimension q."""

    name: str = "kernel"
    #: degree of the polynomial null space is q - 1; q = 0 means no null space
    q: int = 0

    @abstractmethod
    def __call__(self, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Gram block k(s_i, t_j), shape (len(s), len(t))."""

    def null_space(self, t: np.ndarray) -> np.ndarray:
        """Null-space basis evaluated at t, shape (len(t), q): Legendre polynomials P_0..P_{q-1}."""
        t = np.asarray(t, dtype=float).ravel()
        out = np.empty((t.size, self.q))
        if self.q:
            out[:, 0] = 1.0
        if self.q > 1:
            out[:, 1] = t
        for k in range(1, self.q - 1):  # Bonnet's recursion (cheaper than legvander on the hot decode path)
            out[:, k + 1] = ((2 * k + 1) * t * out[:, k] - k * out[:, k - 1]) / (k + 1)
        return out

    @property
    def is_cubic_spline(self) -> bool:
        """True when the smoother is the cubic smoothing spline (penalty int u''^2, null space {1, t})."""
        return False

    def __repr__(self) -> str:
        return self.name


def _unit(t: np.ndarray) -> np.ndarray:
    return (np.asarray(t, dtype=float) + 1.0) / 2.0


class CubicSpline(Kernel):
    """The base kernel of LeTCC: W^{2,2} with null space {1, t}; the smoother is the cubic smoothing spline.

    On [0, 1]: k(s, t) = min(s,t)^2 (3 max(s,t) - min(s,t)) / 6 with penalty int_0^1 u''^2. Mapping
    [-1, 1] -> [0, 1] shrinks int u''^2 by 8, so the kernel is scaled by 8 to make the penalty the
    integral over [-1, 1].
    """

    name = "cubic"
    q = 2

    def __call__(self, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        a, b = _unit(s)[:, None], _unit(t)[None, :]
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        return 8.0 * lo**2 * (3.0 * hi - lo) / 6.0

    @property
    def is_cubic_spline(self) -> bool:
        return True


def _scaled_bernoulli(r: int, x: np.ndarray) -> np.ndarray:
    """k_r(x) = B_r(x) / r!, the scaled Bernoulli polynomial."""
    from scipy.special import bernoulli  # here, not at import: scipy.special costs `import gencc` ~0.3 s

    b = bernoulli(r)
    out = np.zeros_like(x, dtype=float)
    for k in range(r + 1):
        out += comb(r, k) * b[k] * x ** (r - k)
    return out / factorial(r)


class Sobolev(Kernel):
    """Sobolev space W^{m,2} with penalty int_{-1}^{1} (u^(m))^2 and null space the polynomials of degree < m.

    The Bernoulli-polynomial kernel of Wahba and Gu on [0, 1],
    R(s, t) = k_m(s) k_m(t) + (-1)^(m-1) k_{2m}(|s - t|), scaled by 2^(2m-1) for the map to [-1, 1].
    Its smoother is the natural spline of degree 2m - 1.
    """

    q: int

    def __init__(self, m: int = 2):
        self.m = check_int("Sobolev order m", m, 1, 4)
        self.q = self.m
        self.name = f"sobolev{self.m}"

    def __call__(self, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        a, b = _unit(s)[:, None], _unit(t)[None, :]
        m = self.m
        R = _scaled_bernoulli(m, a) * _scaled_bernoulli(m, b)
        R = R + (-1) ** (m - 1) * _scaled_bernoulli(2 * m, np.abs(a - b))
        return 2.0 ** (2 * m - 1) * R

    @property
    def is_cubic_spline(self) -> bool:
        return self.m == 2


class _Stationary(Kernel):
    """A stationary kernel k(|s - t| / length_scale) with an optional polynomial null space.

    By default the linear trend (null_degree=1) is left unpenalised, so fits extend like splines do.
    """

    def __init__(self, length_scale: float = 0.3, null_degree: int | None = 1):
        self.length_scale = check_positive("length_scale", length_scale)
        null_degree = check_int("null_degree", null_degree, 0, optional=True)
        self.q = 0 if null_degree is None else null_degree + 1

    def __call__(self, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        r = np.subtract.outer(np.asarray(s, float).ravel(), np.asarray(t, float).ravel())
        np.abs(r, out=r)
        r /= self.length_scale
        return self._profile(r)

    @abstractmethod
    def _profile(self, r: np.ndarray) -> np.ndarray:
        """k as a function of the scaled distances r (an array of its own: profiles work in place)."""

    def __repr__(self) -> str:
        return f"{self.name}(length_scale={self.length_scale}, q={self.q})"


class Matern32(_Stationary):
    """Matern kernel with smoothness 3/2: (1 + sqrt3 r) exp(-sqrt3 r)."""

    name = "matern32"

    def _profile(self, r: np.ndarray) -> np.ndarray:
        a = r
        a *= np.sqrt(3.0)
        e = np.negative(a)
        np.exp(e, out=e)
        a += 1.0
        a *= e  # (1 + a) exp(-a), in place
        return a


class Matern52(_Stationary):
    """Matern kernel with smoothness 5/2: (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r)."""

    name = "matern52"

    def _profile(self, r: np.ndarray) -> np.ndarray:
        a = r
        a *= np.sqrt(5.0)
        e = np.negative(a)
        np.exp(e, out=e)
        sq = np.square(a)
        sq /= 3.0
        a += 1.0
        a += sq
        a *= e  # (1 + a + a^2 / 3) exp(-a), in place
        return a


class Gaussian(_Stationary):
    """Gaussian (squared-exponential) kernel exp(-r^2 / 2)."""

    name = "gaussian"

    def _profile(self, r: np.ndarray) -> np.ndarray:
        np.square(r, out=r)
        r *= -0.5
        return np.exp(r, out=r)


KERNELS = ("cubic", "sobolev1", "sobolev2", "sobolev3", "sobolev4", "matern32", "matern52", "gaussian")


def get_kernel(kernel: str | Kernel) -> Kernel:
    """A Kernel from a Kernel instance or one of the names in KERNELS."""
    if isinstance(kernel, Kernel):
        return kernel
    if kernel == "cubic":
        return CubicSpline()
    if isinstance(kernel, str) and kernel.startswith("sobolev") and kernel[7:] in ("1", "2", "3", "4"):
        return Sobolev(int(kernel[7:]))
    table = {"matern32": Matern32, "matern52": Matern52, "gaussian": Gaussian}
    if kernel in table:
        return table[kernel]()
    raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)} or pass a gencc.kernels.Kernel")
