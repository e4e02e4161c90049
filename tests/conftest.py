"""Test-wide settings: property tests draw the same examples on every run, so CI never flakes on a new one; and
the launcher that re-executes Ray tests inside a loopback-only network namespace."""

import importlib.util
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("gencc", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("gencc")


def pytest_collection_modifyitems(config, items):
    """`ray`-marked tests run only inside a loopback-only network namespace (each package's
    test_ray_namespace.py re-executes them there, with `unshare -n` as root or `unshare -rn` as an ordinary
    user), so Ray never binds a routable address; outside they are skipped with the reason. The `ray_suite`
    launchers, which wait for those runs, go last: the session does everything else while the runs go on in the
    background (`pytest_collection_finish`) instead of waiting for them half-way."""
    from gencc.engine.ray.namespace import can_unshare, in_loopback_namespace

    if in_loopback_namespace():
        return
    items.sort(key=lambda item: item.get_closest_marker("ray_suite") is not None)  # stable: order kept otherwise
    ray_items = [item for item in items if item.get_closest_marker("ray") is not None]
    if not ray_items:
        return
    ok, how = can_unshare()
    reason = (f"run by test_ray_namespace.py in a loopback-only namespace made with {how}" if ok else
              f"not run: no loopback-only network namespace can be made here ({how})")
    for item in ray_items:
        item.add_marker(pytest.mark.skip(reason=reason))


class _NamespaceSuite:
    """One `ray_suite` launcher's run of the `ray` tests of its files, in a loopback-only namespace, as a child
    process: `run` (in the background thread from the session's start, or in the launcher test) sets `outcome`
    and then `done`; `stop` kills it. `gencc.engine.ray.namespace.run_in_loopback` with a child another thread
    can kill."""

    #: seconds one run may take; it shares the machine with the rest of the session
    TIMEOUT = 900

    def __init__(self, files: tuple[Path, ...]):
        self.files = files
        self.proc: subprocess.Popen | None = None
        self.done = threading.Event()
        self.outcome: tuple[int, str, str] | None = None

    def run(self) -> None:
        from gencc.engine.ray.namespace import loopback_command, ray_run_env

        try:
            with ray_run_env() as env:
                self.proc = subprocess.Popen(loopback_command([sys.executable, "-m", "pytest", "-m", "ray", "-q",
                                                               "-p", "no:cacheprovider", *map(str, self.files)]),
                                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                             cwd=Path(__file__).parent.parent)
                try:
                    out, err = self.proc.communicate(timeout=self.TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    out, err = self.proc.communicate()
                    err += f"\n(killed after {self.TIMEOUT} s)"
                self.outcome = (self.proc.returncode, out, err)
        except Exception as e:  # reported by the launcher test that waits for it
            self.outcome = (-1, "", repr(e))
        finally:
            self.done.set()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


#: the background runs of the session's `ray_suite` launchers, by node id (`pytest_collection_finish`)
_SUITES: dict[str, _NamespaceSuite] = {}


def _suite_files(item) -> tuple[Path, ...] | None:
    mark = item.get_closest_marker("ray_suite")
    return tuple(Path(f) for f in mark.args) if mark is not None else None


def pytest_collection_finish(session):
    """Start the `ray_suite` launchers' runs now, one after another in one background thread, so the Ray tests
    (minutes of cluster start-ups and waits) overlap the rest of the session instead of adding to it; each
    launcher test then waits for its own run. Not inside the namespace, nor where none can be made."""
    from gencc.engine.ray.namespace import can_unshare, in_loopback_namespace

    suites = [(item.nodeid, files) for item in session.items if (files := _suite_files(item))]
    # under pytest-xdist every worker collects every test: the launcher, wherever it runs, starts its own run
    if (not suites or session.config.option.collectonly or hasattr(session.config, "workerinput")
            or in_loopback_namespace()
            or importlib.util.find_spec("ray") is None or not can_unshare()[0]):
        return
    for nodeid, files in suites:
        _SUITES[nodeid] = _NamespaceSuite(files)

    def run_all() -> None:
        for suite in list(_SUITES.values()):
            suite.run()

    threading.Thread(target=run_all, name="ray-namespace-suites", daemon=True).start()


def pytest_sessionfinish(session, exitstatus):
    """A session that ends early (-x, Ctrl-C) kills the background Ray runs it started."""
    for suite in _SUITES.values():
        suite.stop()
        suite.done.set()


@pytest.fixture
def run_ray_tests_in_namespace(request):
    """Run the `ray`-marked tests of the files the test's `ray_suite` marker names inside a loopback-only network
    namespace (Ray never binds a routable address there); skips where no namespace can be made, fails unless they
    all ran and passed. The run was started in the background at the session's start (`pytest_collection_finish`);
    a test run alone starts it here, and a background run that failed is run again here, alone, before it fails the
    test."""
    from gencc.engine.ray.namespace import can_unshare, in_loopback_namespace

    def launch() -> None:
        files = _suite_files(request.node)
        assert files, "a launcher test names its files with @pytest.mark.ray_suite(...)"
        pytest.importorskip("ray")
        if in_loopback_namespace():
            pytest.skip("already inside the namespace: the Ray tests run directly")
        ok, why = can_unshare()
        if not ok:
            pytest.skip(f"Ray tests not run: cannot create a loopback-only network namespace here ({why})")
        suite = _SUITES.get(request.node.nodeid)
        if suite is not None:
            suite.done.wait()
        if suite is None or suite.outcome is None or suite.outcome[0] != 0:
            # not started, or failed while sharing the machine with the rest of the session (a Ray job's hard
            # timeout can pass while its actors start on a loaded machine): what counts is a run of its own. A
            # failed background run is reported (the warnings summary), since its rerun adds minutes to the session
            if suite is not None and suite.outcome is not None:
                rc, out, err = suite.outcome
                failed = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
                warnings.warn(f"the background run of {', '.join(f.name for f in files)} failed (exit {rc}) while "
                              f"sharing the machine; running it again alone. {' | '.join(failed) or err[-500:]}",
                              stacklevel=1)
            suite = _NamespaceSuite(files)
            suite.run()
        assert suite.outcome is not None
        rc, out, err = suite.outcome
        assert rc == 0, out[-6000:] + err[-3000:]
        assert " passed" in out and "skipped" not in out.splitlines()[-1], out[-2000:]

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
    """name -> the script benchmarks/<name>.py, or else benchmarks/investigations/<name>.py, imported as a module
    (the scripts are no package; benchmarks/ is on sys.path while it runs, as when a suite is run, for the scripts
    it imports beside it)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        path = folder / f"{name}.py"
        if not path.exists():
            path = folder / "investigations" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(folder))
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.path.remove(str(folder))
        return mod
    return load
