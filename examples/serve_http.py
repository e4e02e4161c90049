"""Serving over HTTP, in process: a coded service for the digits CNN on a free loopback port, queried with httpx.

Run it from anywhere: `python examples/serve_http.py` (needs the torch and serve extras; the CNN trains once
and is cached). It builds the service (GCC over groups of K requests on 12 workers, a tenth of the time slow),
starts the HTTP app on 127.0.0.1 in a thread, sends single and batch predictions, reads /healthz and /metrics,
and stops the server, which answers what is in flight and closes the service.
"""

from __future__ import annotations

import httpx
import numpy as np

from gencc.serving import Service
from gencc.serving.app import create_app, start_in_thread
from gencc.workloads import load


def main() -> None:
    w = load("digits-cnn", progress=False)
    X = w.X_test[:24]
    svc = Service.build("digits-cnn", "gcc", workers=12, K=8, service_ms=5, slow_fraction=0.1, slow_factor=10,
                        seed=0)
    server, thread, port = start_in_thread(create_app(svc))  # the app closes svc when it shuts down
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            answers = [client.post("/predict", json={"input": x.tolist()}) for x in X[:8]]
            assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
            out = np.array([r.json()["output"] for r in answers])
            exact = w.f(X[:8])
            print(f"/predict: 8 answers, {sum(r.json()['degraded'] for r in answers)} decoded, "
                  f"top-1 agreement with f {float((out.argmax(1) == exact.argmax(1)).mean()):.3f}")

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
