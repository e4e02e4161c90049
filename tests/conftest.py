"""Test-wide settings: property tests draw the same examples on every run, so CI never flakes on a new one; and
the launcher that re-executes Ray tests inside a loopback-only network namespace."""

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("gencc", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("gencc")


def pytest_collection_modifyitems(config, items):
    """`ray`-marked tests run only inside a loopback-only network namespace (each package's
    test_ray_namespace.py re-executes them there, with `unshare -n` as root or `unshare -rn` as an ordinary
    user), so Ray never binds a routable address; outside they are skipped with the reason."""
    from gencc.netns import can_unshare, in_loopback_namespace

    if in_loopback_namespace():
        return
    ray_items = [item for item in items if item.get_closest_marker("ray") is not None]
    if not ray_items:
        return
    ok, how = can_unshare()
    reason = (f"run by test_ray_namespace.py in a loopback-only namespace made with {how}" if ok else
              f"not run: no loopback-only network namespace can be made here ({how})")
    for item in ray_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def run_ray_tests_in_namespace():
    """Run the `ray`-marked tests of the given files inside a loopback-only network namespace (Ray never binds a
    routable address there); skips where no namespace can be made, fails unless they all ran and passed."""
    from gencc.netns import can_unshare, in_loopback_namespace, run_in_loopback

    def launch(*files: Path) -> None:
        pytest.importorskip("ray")
        if in_loopback_namespace():
            pytest.skip("already inside the namespace: the Ray tests run directly")
        ok, why = can_unshare()
        if not ok:
            pytest.skip(f"Ray tests not run: cannot create a loopback-only network namespace here ({why})")
        p = run_in_loopback([sys.executable, "-m", "pytest", "-m", "ray", "-q", "-p", "no:cacheprovider",
                             *map(str, files)], timeout=400, capture_output=True, text=True,
                            cwd=Path(__file__).parent.parent)
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
        assert " passed" in p.stdout and "skipped" not in p.stdout.splitlines()[-1], p.stdout[-2000:]

    return launch


@pytest.fixture
def wait_healthy():
    """Wait until a `gencc serve` subprocess answers GET URL/healthz with 200: fails with its output if it exits
    first, or if `timeout` seconds pass."""
    import time

    import httpx

    def wait(proc, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the server at {url} did not come up in {timeout:g} s"
            time.sleep(0.5)

    return wait


@pytest.fixture(scope="session")
def load_benchmark():
    """name -> the script benchmarks/<name>.py imported as a module (the scripts are no package; the folder is on
    sys.path while it runs, as when the script is run, for the scripts it imports beside it)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", folder / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(folder))
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.path.remove(str(folder))
        return mod
    return load
