"""Robust collection: decode with up to A wrong results located and excluded (DESIGN section 9).

The job waits until the code can decode with A results set aside (`gencc.codes.robust.min_results`), then
decodes with `code.robust_decode`; every flagged worker is reported as a straggler with the reason
"inconsistent result", and the outputs are the decode without them: never computed from a flagged result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..codes.base import Code
from ..codes.robust import DEFAULT_THRESHOLD, min_results
from ..errors import JobFailed
from .policy import CodedPolicy

REASON = "inconsistent result: flagged by the robust decode and excluded"


class RobustPolicy(CodedPolicy):
    """CodedPolicy whose decode excludes up to `adversaries` inconsistent results (and says whom)."""

    def __init__(self, code: Code, wait_for: int | None, deadline: float | None, adversaries: int,
                 threshold: Any = DEFAULT_THRESHOLD):
        super().__init__(code, wait_for, deadline)
        self.adversaries, self.threshold = int(adversaries), threshold  # a number or a robust.Calibration
        self.need = min_results(code, self.adversaries)
        self.excluded: dict[int, str] = {}

    def decodable(self, valid: dict[int, np.ndarray]) -> bool:
        return len(valid) >= self.need and super().decodable(valid)

    def assemble(self, valid: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r = np.array(sorted(valid), dtype=np.int64)
        Y = np.stack([valid[int(w)] for w in r]).astype(float, copy=False)
        try:
            out, flagged = self.code.robust_decode(Y, r, adversaries=self.adversaries, threshold=self.threshold)
        except ValueError as err:
            raise JobFailed(f"robust decode failed: {err}", {}) from None
        self.excluded = {int(w): REASON for w in flagged}
        used = np.setdiff1d(r, flagged)
        return np.asarray(out), used, np.asarray(self.code.missing(used), dtype=np.int64)
