"""Serving your own model over HTTP, in process: a CNN defined in this file, its parity model, a coded service on a
free loopback port, queried with httpx.

Run it from anywhere: `python examples/serve_http.py` (needs the torch and serve extras). It trains a small CNN
on scikit-learn's 8x8 digits, trains its ParM parity model (`train_parity_model`, what `gencc parity train` runs;
a short budget here), builds the service (sgcc-parity over groups of K requests on 12 workers, a tenth of the
time slow) from the module itself with its training inputs, starts the HTTP app on 127.0.0.1 in a thread, sends
single and batch predictions, reads /healthz and /metrics, and stops the server, which answers what is in
flight and closes the service. Files go to a temporary folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
import numpy as np
import torch
from sklearn.datasets import load_digits

import gencc
from gencc.serving import Service, create_app, start_in_thread
from gencc.workloads.parity_training import train_parity_model


class DigitsCNN(torch.nn.Module):
    """conv-pool-linear on 1x8x8 images, 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.head = torch.nn.Linear(16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).flatten(1))


def train(epochs: int = 15) -> tuple[DigitsCNN, np.ndarray, np.ndarray]:
    """The CNN fitted to 1,500 digits; returns it with the training inputs and the held-out ones."""
    torch.manual_seed(0)
    X = (load_digits().data / 16.0).reshape(-1, 1, 8, 8)
    y = load_digits().target
    model = DigitsCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    Xt, yt = torch.as_tensor(X[:1500], dtype=torch.float32), torch.as_tensor(y[:1500])
    for _ in range(epochs):
        for i in range(0, 1500, 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(Xt[i:i + 64]), yt[i:i + 64]).backward()
            opt.step()
    return model.eval(), X[:1500], X[1500:]


def main() -> None:
    torch.set_num_threads(1)
    model, X_train, X_test = train()
    f = gencc.as_model(model)
    X = X_test[:24]
    with tempfile.TemporaryDirectory() as tmp:
        meta = train_parity_model(model, X_train, k=2, out=Path(tmp) / "parity.pt", epochs=5, progress=False)
        print(f"parity model: held-out top-1 agreement of its reconstructions {meta['held_out']['agreement']:.3f}")
        svc = Service.build(model, "sgcc-parity", workers=12, K=8, data=X_train, parity=Path(tmp) / "parity.pt",
                            service_ms=5, slow_fraction=0.1, slow_factor=10, seed=0)
    server, thread, port = start_in_thread(create_app(svc))  # the app closes svc when it shuts down
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            answers = [client.post("/predict", json={"input": x.tolist()}) for x in X[:8]]
            assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
            out = np.array([r.json()["output"] for r in answers])
            exact = f(X[:8])
            print(f"/predict: 8 answers, {sum(r.json()['degraded'] for r in answers)} decoded, "
                  f"top-1 agreement with the model {float((out.argmax(1) == exact.argmax(1)).mean()):.3f}")

            batch = client.post("/predict/batch", json={"inputs": X[8:].tolist()}).json()["results"]
            assert [r["status"] for r in batch] == [200] * len(X[8:])
            print(f"/predict/batch: {len(batch)} answers")

            bad = client.post("/predict", json={"input": [[1, 2]]})
            print(f"a malformed input: {bad.status_code} {bad.json()['detail']}")
            assert bad.status_code == 422

            print("/healthz:", client.get("/healthz").json())
            metrics = client.get("/metrics").text
            print("/metrics:", next(ln for ln in metrics.splitlines() if ln.startswith("gencc_requests_total")))
    finally:
        server.should_exit = True  # graceful: in-flight requests are answered first
        thread.join(timeout=60)


if __name__ == "__main__":
    main()
