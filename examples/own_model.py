"""Your own model in a batch job: a small torch network, coded with GCC, simulated and run on local workers.

Run it from anywhere: `python examples/own_model.py` (needs the torch extra). It trains a tiny classifier on
synthetic data and hands the torch module itself to gencc (`gencc.as_model` makes it a batched model: eval
mode, no_grad, numpy in and numpy out, torch in and torch out): it scores GCC against BACC over random
stragglers with `gencc.simulate`, then runs coded jobs on real worker threads with injected latency through
`gencc.run`, with numpy inputs and with a torch tensor.
"""

from __future__ import annotations

import numpy as np
import torch

import gencc
from gencc.runtime import LocalExecutor

K, N, S = 8, 16, 2  # inputs per job, workers, stragglers


class Net(torch.nn.Module):
    """A two-layer classifier of 6-dimensional points into 4 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def train(seed: int = 0, steps: int = 200) -> tuple[Net, np.ndarray, np.ndarray]:
    """Fit Net to a synthetic task (the class is the quadrant of two random projections); returns the model
    and held-out inputs with their labels."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(1200, 6)).astype(np.float32)
    P = rng.normal(size=(6, 2)).astype(np.float32)
    z = X @ P
    y = (z[:, 0] > 0).astype(np.int64) * 2 + (z[:, 1] > 0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    Xt, yt = torch.from_numpy(X[:1000]), torch.from_numpy(y[:1000])
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(Xt), yt)
        loss.backward()
        opt.step()
    return model.eval(), X[1000:], y[1000:]


def main() -> None:
    torch.set_num_threads(1)
    model, X_test, y_test = train()
    f = gencc.as_model(model)  # what gencc.run and gencc.simulate do with the module itself
    X = X_test[:K]
    accuracy = float((f(X_test).argmax(axis=1) == y_test).mean())
    print(f"held-out accuracy of the model {accuracy:.3f}; K={K} inputs, N={N} workers, S={S} stragglers")

    for code in (gencc.GCC(K=K, N=N), gencc.BACC(K=K, N=N)):
        recs = gencc.simulate(model, X, code, gencc.FixedCount(S, "random"), trials=20, labels=y_test[:K])
        s = gencc.summarize(recs)[0]
        print(f"simulate {s['scheme']:>4}: rel_mse {s['rel_mse']:.2e} ± {s['rel_mse_ci']:.1e}, "
              f"agreement {s['agreement']:.3f}")

    code = gencc.GCC(K=K, N=N)
    with LocalExecutor() as ex:
        for seed in range(3):
            res = gencc.run(model, X_test[seed * K:(seed + 1) * K], code, ex, wait_for=N - S,
                            latency=gencc.Bimodal(0.1, 10, 0.005), seed=seed)
            exact = f(X_test[seed * K:(seed + 1) * K])
            print(f"run {seed}: {len(res.returned)} of {N} results used, {len(res.stragglers)} stragglers, "
                  f"rel_mse {gencc.metrics.rel_mse(res.outputs, exact):.2e}, "
                  f"agreement {gencc.metrics.agreement(res.outputs, exact):.3f}, {res.latency * 1e3:.0f} ms")
            assert res.outputs.shape == exact.shape and len(res.returned) >= N - S
        res = gencc.run(model, torch.from_numpy(X), code, ex, wait_for=N - S)  # torch in, torch out
        print(f"run on a tensor: outputs {type(res.outputs).__name__} {res.outputs.dtype}, model {f.identity[:40]}...")
        assert isinstance(res.outputs, torch.Tensor)


if __name__ == "__main__":
    main()
