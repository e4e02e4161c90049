"""Draw docs/figures/overview.png, the picture of the docs' landing page: one GCC job on a one-dimensional f.

Run from anywhere: `python docs/figures/overview.py` (it writes beside itself). Top: the K inputs x_k at their
points alpha_k and the N coded inputs u_enc(beta_n) the workers get. Bottom: what the workers return, f at the
coded inputs (the stragglers never answer), and the decoder's estimates of f(x_k) beside the true values.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gencc  # noqa: E402

OUT = Path(__file__).resolve().parent / "overview.png"


def f(x: np.ndarray) -> np.ndarray:
    """Any function: no algebraic structure needed."""
    return np.tanh(2 * x) + 0.3 * np.sin(3 * x)


def main() -> None:
    K, N = 5, 14
    X = np.array([[0.8], [-0.4], [0.1], [1.0], [-0.9]])  # K inputs, one number each
    code = gencc.GCC(K=K, N=N)
    coded = code.encode(X)  # N coded inputs: a smooth curve through the inputs, read at beta_n
    stragglers = [2, 8, 11]  # the slowest workers: never waited for
    returned = np.setdiff1d(np.arange(N), stragglers)
    estimates = code.decode(f(coded[returned]), returned)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9.5, 5.2), sharex=True)
    top.plot(code.beta, coded[:, 0], "-", color="tab:blue", alpha=0.4, lw=1)
    top.plot(code.beta, coded[:, 0], "s", color="tab:blue", ms=5,
             label="coded inputs $u_{enc}(\\beta_n)$, one per worker")
    top.plot(code.alpha, X[:, 0], "o", color="black", ms=7, label="inputs $x_k$ at $\\alpha_k$")
    top.set_title(f"encode: K = {K} inputs become N = {N} coded inputs")
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)

    ans = f(coded[:, 0])
    bottom.plot(code.beta[returned], ans[returned], "s", color="tab:blue", ms=5,
                label="workers' answers $f(u_{enc}(\\beta_n))$")
    bottom.plot(code.beta[stragglers], ans[stragglers], "x", color="grey", ms=7, label="stragglers (not waited for)")
    bottom.plot(code.alpha, f(X)[:, 0], "o", color="black", ms=7, label="true $f(x_k)$")
    bottom.plot(code.alpha, estimates[:, 0], "+", color="tab:red", ms=14, mew=2, label="decoded estimates")
    bottom.set_title(f"decode from the {len(returned)} fastest answers")
    bottom.set_xlabel("position on the curve, in [-1, 1]")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
