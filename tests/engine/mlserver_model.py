"""The model an MLServer replica of the tests serves (MLServer imports this file from the model's folder; it runs
in MLServer's own virtual environment, never in gencc's). Its behaviour is set per replica by the environment:
GENCC_TEST_SLEEP_S makes every call that much slower (the replica's own slowness, not gencc's injection), and
GENCC_TEST_GARBAGE=1 makes it answer NaN."""

import asyncio
import os

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


def f(X: np.ndarray) -> np.ndarray:
    """Smooth and not linear, so a decode is close to it but not equal (the same model as the tests' own)."""
    X = np.asarray(X, dtype=np.float64)
    return np.stack([np.tanh(X).sum(axis=1), X[:, 0] * X[:, 1], np.sin(X[:, 2]) - X[:, 3]], axis=1)


class Model(MLModel):
    async def load(self) -> bool:
        self.sleep_s = float(os.environ.get("GENCC_TEST_SLEEP_S", "0"))
        self.garbage = os.environ.get("GENCC_TEST_GARBAGE") == "1"
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        if self.sleep_s:
            await asyncio.sleep(self.sleep_s)
        y = f(x.reshape(len(x), -1))
        if self.garbage:
            y = np.full_like(y, np.nan)
        return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output("y", y)])
