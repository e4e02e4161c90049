"""gencc.errors: every exception class gencc defines, found by walking the package, is defined in gencc.errors,
listed in its __all__, subclasses GenccError, and keeps the built-in base its callers catch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import gencc
from gencc import errors


def _exception_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(gencc.__path__, "gencc."):
        if info.name.rpartition(".")[2] == "__main__":  # `python -m` entry points run the command when imported
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as e:  # an optional dependency (ray) missing here: its module cannot define one we use
            if (e.name or "").startswith("gencc"):
                raise
            continue
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_gencc_exception_class_is_defined_in_gencc_errors_under_gencc_error() -> None:
    found = _exception_classes()
    assert "gencc.errors.JobTimeout" in found and "gencc.errors.ProtocolError" in found  # the walk sees them
    elsewhere = sorted(name for name in found if not name.startswith("gencc.errors."))
    assert not elsewhere, f"exception classes defined outside gencc.errors (define them there): {elsewhere}"
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, errors.GenccError))
    assert not outside, f"exception classes not under gencc.GenccError: {outside}"
    assert {name.rpartition(".")[2] for name in found} == set(errors.__all__)


def test_the_walk_would_see_a_class_defined_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from gencc.serving._http import limits

    class Stray(Exception):
        pass

    Stray.__module__ = limits.__name__
    monkeypatch.setattr(limits, "Stray", Stray, raising=False)
    assert _exception_classes()["gencc.serving._http.limits.Stray"] is Stray


def test_the_public_classes_live_in_gencc_errors_and_keep_their_builtin_bases() -> None:
    assert gencc.GenccError is errors.GenccError and gencc.JobTimeout is errors.JobTimeout
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert cls.__module__ == "gencc.errors" and issubclass(cls, errors.GenccError)
    assert issubclass(errors.JobTimeout, TimeoutError) and issubclass(errors.JobTimeout, errors.JobFailed)
    assert issubclass(errors.JobFailed, RuntimeError) and issubclass(errors.InjectedFault, RuntimeError)
    assert issubclass(errors.BadRequest, ValueError) and issubclass(errors.ModelError, ValueError)
    assert issubclass(errors.ProtocolError, ValueError)
    from gencc.engine.task import WorkerError
    from gencc.faults import Cancelled, InjectedFault
    from gencc.serving._http.limits import BodyTooLarge, ClientDisconnected
    from gencc.serving._http.schemas import BadRequest
    from gencc.serving._http.v2 import ProtocolError

    assert (WorkerError, Cancelled, InjectedFault, BadRequest) == (errors.WorkerError, errors.Cancelled,
                                                                   errors.InjectedFault, errors.BadRequest)
    assert (ProtocolError, BodyTooLarge, ClientDisconnected) == (errors.ProtocolError, errors.BodyTooLarge,
                                                                 errors.ClientDisconnected)


def test_a_failed_job_is_caught_as_a_gencc_error() -> None:
    import numpy as np

    code = gencc.GCC(K=2, N=4)
    with pytest.raises(gencc.GenccError) as info:
        gencc.run(lambda x: np.asarray(x) * 2, np.ones((2, 3)), code, wait_for=4, latency=[0, 0, 0, np.inf],
                  timeout=0.2)
    assert isinstance(info.value, gencc.JobTimeout) and isinstance(info.value, TimeoutError)
