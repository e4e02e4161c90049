"""The errors a job raises when it cannot decode."""

from __future__ import annotations


class JobFailed(RuntimeError):
    """Every task has finished or failed and the valid results are too few to decode."""

    def __init__(self, message: str, stragglers: dict[int, str] | None = None):
        super().__init__(message)
        self.stragglers = dict(stragglers or {})


class JobTimeout(JobFailed, TimeoutError):
    """The hard timeout passed before enough valid results arrived to decode."""
