"""What a packed parity query costs next to f and the plain (sum) parity query (issue 10).

    python benchmarks/packed_cost.py [--batch 256] [--repeats 30]

Per workload and k: multiply-accumulates per query (counted from every Conv/Linear layer's shapes with forward
hooks), input values a coded worker receives, and the measured time of one batch of queries, f / plain parity /
packed parity interleaved in one run (one thread) so the ratios are side by side on the shared machine; medians.
Uses the cached models (trains any that are absent).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gencc.workloads import load, load_parity


def macs(module: torch.nn.Module, x: torch.Tensor) -> int:
    """Multiply-accumulates of one forward pass of a single query, from the layers' shapes."""
    total = 0

    def hook(m: torch.nn.Module, _inp: tuple, out: torch.Tensor) -> None:
        nonlocal total
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)):
            total += out[0].numel() * (m.in_channels // m.groups) * int(np.prod(m.kernel_size))
        elif isinstance(m, torch.nn.Linear):
            total += m.in_features * m.out_features

    hs = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d,
                                                                                        torch.nn.Linear))]
    with torch.inference_mode():
        module(x[:1])
    for h in hs:
        h.remove()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    if args.batch < 1 or args.repeats < 1:
        ap.error("need --batch >= 1 and --repeats >= 1")
    torch.set_num_threads(1)
    print("| workload, k | MACs per query: f / plain parity / packed | input values per coded worker: plain / packed "
          "| batch time, median ms: f / plain / packed | packed / f |")
    print("|---|---|---|---|---|")
    for name, ks in (("digits-cnn", (2, 4)), ("mnist1d-cnn", (2, 4))):
        w = load(name, progress=False)
        X = torch.as_tensor(w.X_test, dtype=torch.float32)
        for k in ks:
            plain, packed = load_parity(name, k, progress=False), load_parity(name, k, progress=False, packed=True)
            rng = np.random.default_rng(0)
            idx = torch.as_tensor(rng.integers(len(X), size=(args.batch, k)))
            xs, sums, stacks = X[idx[:, 0]], X[idx].sum(dim=1), X[idx]
            runs = {"f": (w.f.module, xs), "plain": (plain.module, sums), "packed": (packed.module, stacks)}
            m = {key: macs(mod, x) for key, (mod, x) in runs.items()}
            times: dict[str, list[float]] = {key: [] for key in runs}
            with torch.inference_mode():
                for _ in range(args.repeats):
                    for key, (mod, x) in runs.items():
                        t0 = time.perf_counter()
                        mod(x)
                        times[key].append(time.perf_counter() - t0)
            med = {key: 1e3 * float(np.median(v)) for key, v in times.items()}
            size = int(np.prod(w.in_shape))
            print(f"| {name}, {k} | {m['f']:,} / {m['plain']:,} / {m['packed']:,} | {size} / {k * size} | "
                  f"{med['f']:.2f} / {med['plain']:.2f} / {med['packed']:.2f} | {med['packed'] / med['f']:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
