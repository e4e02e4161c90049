"""Every exception gencc raises on purpose, under one root: `except gencc.GenccError` catches them all.

Each class keeps the built-in base its callers already catch (a `JobTimeout` is also a `TimeoutError`, a
`BadRequest` and a `ModelError` are also `ValueError`s), so the root adds a handle without taking one away.
This module imports only the standard library: any layer, the math included, may raise these.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "BadRequest", "BodyTooLarge", "CalibrationStopped", "Cancelled", "ClientDisconnected", "ClientError",
    "ClusterUnreachable", "ConfigError", "GenccError", "InjectedFault", "JobFailed", "JobTimeout", "ModelError",
    "ProtocolError", "RemoteError", "StartStopped", "WorkerError",
]


class GenccError(Exception):
    """The root of every exception class gencc defines."""


class JobFailed(GenccError, RuntimeError):
    """Every task has finished or failed and the valid results are too few to decode."""

    def __init__(self, message: str, stragglers: dict[int, str] | None = None):
        super().__init__(message)
        self.stragglers = dict(stragglers or {})


class JobTimeout(JobFailed, TimeoutError):
    """The hard timeout passed before enough valid results arrived to decode."""


class WorkerError(GenccError):
    """f raised on another process (an actor); the message is already `describe_error` of what it raised."""


class ClusterUnreachable(GenccError, ConnectionError):
    """No Ray cluster answers at the address given (nothing listens there within the connection timeout, or Ray
    could not join it); `address` is that address. The command line reports it as a usage error (exit 2)."""

    def __init__(self, message: str, address: str):
        super().__init__(message)
        self.address = address


class RemoteError(GenccError, RuntimeError):
    """A model replica's answer that cannot be used (an error status, a timeout, an answer that is not the Open
    Inference Protocol or not the model's tensor): the task fails as a straggler."""


class InjectedFault(GenccError, RuntimeError):
    """A task failed by injection or returned non-finite values; its message is the reason (one of
    `gencc.faults.FAULTS`). `output`: the non-finite output, when there was one."""

    def __init__(self, reason: str, output: Any = None):
        super().__init__(reason)
        self.output = output


class Cancelled(GenccError):
    """A running task was cancelled (its result is never delivered)."""


class ModelError(GenccError, ValueError):
    """A user's model that cannot be loaded or fails its first call: the message names the model's spec and what
    failed (the factory raised, or its output for the given input shape failed). `source`: which of the user's
    inputs to fix, "model", "input_shape" or "data" (a command line names its option). The CLI reports it as a
    usage error (exit 2, one line)."""

    def __init__(self, message: str, source: str = "model"):
        super().__init__(message)
        self.source = source


class ConfigError(GenccError, ValueError):
    """A configuration value refused (a `gencc.serving.ServiceConfig` or `Slowdown` field, say): the message says
    what is wrong and what would do; `field` names the parameter to fix (a command line names its option)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field

    @staticmethod
    @contextmanager
    def about(field: str) -> Iterator[None]:
        """A ValueError raised inside, as the `ConfigError` naming `field` (one raised already keeps its field)."""
        try:
            yield
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e), field) from None


class BadRequest(GenccError, ValueError):
    """A request refused at the door: `status` (4xx) and the message naming the problem."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class ProtocolError(GenccError, ValueError):
    """A request the Open Inference Protocol's routes (`/v2/...`) refuse: `status` (400, 404, 405, 415) and
    `message`, answered as {"error": message}."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class BodyTooLarge(GenccError):
    """A request body that grew past the server's size limit while it was read (the door answers 413)."""


class ClientDisconnected(GenccError):
    """The client went away before its request body had all arrived (nothing is left to answer)."""


class CalibrationStopped(GenccError):
    """A calibration abandoned (its service closed)."""


class StartStopped(GenccError):
    """A stop (SIGTERM, SIGINT) requested while `gencc serve` was starting: not a failure (the command exits 0).
    `name`: the signal's."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class ClientError(GenccError):
    """A request that got no HTTP answer; `kind` names how (ConnectError, ReadError, RemoteProtocolError,
    ReadTimeout), as the CSV's error column shows it."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
