"""make_backend, the one way a backend is built by name: the local backend and its alias, the Ray backend's
address checked before Ray starts, and every front end building its backend through it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import gencc
from gencc.engine import BACKEND_ALIASES, ThreadBackend, backend_name, make_backend
from gencc.engine.ray import check_address

SRC = Path(gencc.__file__).resolve().parent


def test_local_and_its_alias_threads_build_a_thread_backend() -> None:
    assert BACKEND_ALIASES == {"threads": "local"}
    for kind in ("local", "threads"):
        be = make_backend(kind, 3, {"f": lambda x: x * 2}, dtype=np.float32)
        assert isinstance(be, ThreadBackend) and be.dtype is np.float32
    assert backend_name("threads") == "local" and backend_name("ray") == "ray"
    with pytest.raises(ValueError, match="unknown backend 'gpu'; choose one of local, ray, remote"):
        make_backend("gpu", 3)


@pytest.mark.parametrize("option", [{"address": "auto"}, {"factories": {"f": dict}}, {"num_cpus": 2}])
def test_the_local_backend_refuses_what_only_ray_takes(option: dict) -> None:
    with pytest.raises(ValueError, match=f"{next(iter(option))} applies to the ray backend"):
        make_backend("local", 2, **option)


@pytest.mark.parametrize("address", ["auto", "127.0.0.1:6379", "head:10001", "ray://head:10001", "[::1]:6379"])
def test_a_ray_address_in_a_form_ray_init_takes_passes(address: str) -> None:
    assert check_address(address) == address


@pytest.mark.parametrize("address", ["bogus", "h:0", "h:65536", "h:port", ":6379", "http://h:6379", "ray://h", "",
                                     6379, None])
def test_a_malformed_ray_address_is_refused_before_ray_starts(address: object, monkeypatch) -> None:
    import gencc.engine.ray.backend as ray_backend

    monkeypatch.setattr(ray_backend, "import_ray", lambda: pytest.fail("Ray was started"))
    with pytest.raises(ValueError, match=r"a Ray address is auto, HOST:PORT or ray://HOST:PORT \(port in 1\.\.65535\)"):
        check_address(address)  # type: ignore[arg-type]
    if address is not None:
        with pytest.raises(ValueError, match="a Ray address is auto"):
            make_backend("ray", 2, address=address)  # type: ignore[arg-type]


def test_a_ray_executor_refuses_a_malformed_address_when_built() -> None:
    with pytest.raises(ValueError, match="a Ray address is auto, HOST:PORT or ray://HOST:PORT"):
        gencc.RayExecutor(address="h:0")


def test_only_make_backend_constructs_a_ray_backend() -> None:
    """Jobs (RayExecutor), serving (Service) and training build a Ray backend through make_backend alone."""
    calls = []
    for p in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name == "RayBackend":
                    calls.append(str(p.relative_to(SRC)))
    assert calls == ["engine/pool.py"]
