"""Starting or joining Ray for the engine's Ray backend (`gencc.engine.ray.backend`): a cluster's address checked
before Ray is imported (`check_address`) and reached within a bounded time (`reach_cluster`), a private Ray on
127.0.0.1 with a private temp dir and no credential file on disk (`init_ray`, `private_auth`).

Ray is imported only inside functions, so importing this module never imports it."""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...errors import ClusterUnreachable
from .namespace import RAY_QUIET_ENV, in_loopback_namespace

#: the longest temp folder Ray's private folder goes in (its socket paths add about 75 bytes, of 107 allowed)
MAX_TEMP_BASE = 30
#: seconds `init_ray` tries to reach a cluster's address before it gives up (`connect_timeout`), unless the
#: environment variable CONNECT_ENV sets milliseconds
CONNECT_TIMEOUT_S = 10.0
CONNECT_ENV = "GENCC_RAY_CONNECT_MS"


def check_address(address: str) -> str:
    """`address` if it names a Ray cluster as `ray.init` takes it: "auto", HOST:PORT or ray://HOST:PORT (port in
    1..65535); a ValueError saying so otherwise. Checked before Ray is imported or started."""
    from urllib.parse import urlparse

    if address == "auto":
        return address
    parsed, port = None, -1
    if isinstance(address, str):
        parsed = urlparse(address if "://" in address else f"ray-gcs://{address}")
        try:
            port = parsed.port
        except ValueError:
            port = -1
    if (parsed is None or parsed.scheme not in ("ray", "ray-gcs") or not parsed.hostname or port is None
            or not 1 <= port <= 65535):
        raise ValueError(f"a Ray address is auto, HOST:PORT or ray://HOST:PORT (port in 1..65535), got {address!r}")
    return address


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("the Ray backend needs ray: pip install 'gencc[ray]'") from e
    return ray


def init_ray(address: str | None = None, *, num_cpus: int | None = None, temp_dir: str | None = None,
             init_kwargs: dict | None = None, connect_timeout: float | None = None
             ) -> tuple[Any, bool, str | None]:
    """(the ray module, whether this call initialised it, the temp dir it created or None).

    A private Ray (no `address`) is quiet: `RAY_QUIET_ENV` is set where the environment does not set it (before
    Ray is imported, when it is not yet; its processes inherit it), so Ray keeps the node address 127.0.0.1
    without probing 8.8.8.8 for a routable one and prints no colour codes; its "ray" logger on the driver logs
    warnings and up (`logging_level`), so its "Started a local Ray instance" line goes too; its credentials stay
    off the disk (`private_auth`). `init_kwargs` (passed to `ray.init`) override these defaults.

    With `address`, the cluster must answer within `connect_timeout` seconds (`reach_cluster`; None:
    `connect_timeout_s()`), else `gencc.errors.ClusterUnreachable` (a ConnectionError) names the address; a
    loopback HOST is used as it is."""
    if address is None and not _ray_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        for key, value in RAY_QUIET_ENV.items():
            os.environ.setdefault(key, value)
        private_auth()
    if address is not None and not _ray_initialized():
        reach_cluster(address, connect_timeout_s() if connect_timeout is None else connect_timeout)
    ray = import_ray()
    if ray.is_initialized():
        return ray, False, None
    kw: dict[str, Any] = {"log_to_driver": False, **(init_kwargs or {})}
    own_tmp = None
    if address is not None:
        with _loopback_node_address(ray, force=_loopback_host(address)):
            try:
                ray.init(address=address, **kw)
            except ConnectionError as e:  # "auto" with no cluster running, a cluster gone meanwhile
                raise ClusterUnreachable(f"no Ray cluster answers at {address}: {str(e).splitlines()[0]}",
                                         address) from e
    else:
        tmp = temp_dir
        if tmp is None:
            tmp, own_tmp = private_temp_dir()
        kw.setdefault("num_cpus", num_cpus)
        kw.setdefault("logging_level", logging.WARNING)
        try:
            with _loopback_node_address(ray):
                ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, _temp_dir=tmp, **kw)
        except BaseException:
            remove_temp_dir(own_tmp)
            raise
    return ray, True, own_tmp


def _ray_initialized() -> bool:
    """Whether Ray is imported and initialised in this process (without importing it)."""
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def connect_timeout_s() -> float:
    """Seconds to reach a cluster by default: $GENCC_RAY_CONNECT_MS / 1000 where set (a positive number of
    milliseconds, else a `gencc.errors.ConfigError` naming it), else CONNECT_TIMEOUT_S."""
    raw = os.environ.get(CONNECT_ENV)
    if raw is None or not raw.strip():
        return CONNECT_TIMEOUT_S
    try:
        ms = float(raw)
    except ValueError:
        ms = float("nan")
    if not 0 < ms < float("inf"):
        from ...errors import ConfigError

        raise ConfigError(f"{CONNECT_ENV} must be a positive number of milliseconds, got {raw!r}", CONNECT_ENV)
    return ms / 1000


def reach_cluster(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Return once something accepts a TCP connection at the host and port of `address` (HOST:PORT, or
    ray://HOST:PORT: the Ray Client port), trying again until `timeout` seconds have passed; then
    `gencc.errors.ClusterUnreachable` naming the address and the last error. "auto" (Ray finds the address
    itself) passes."""
    from urllib.parse import urlparse

    if address == "auto":
        return
    parsed = urlparse(address if "://" in address else f"ray-gcs://{address}")
    host, port = parsed.hostname or "", parsed.port or 0
    deadline = time.monotonic() + max(0.0, float(timeout))
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.2, min(left, 2.0))):
                return
        except OSError as e:
            why = e.strerror or type(e).__name__
        if time.monotonic() + 0.25 >= deadline:
            raise ClusterUnreachable(f"no Ray cluster answers at {address} ({why}; tried for {timeout:g} s): start "
                                     "one there (ray start --head) or give the address of a running one", address)
        time.sleep(0.25)


def _loopback_host(address: str) -> bool:
    """Whether `address` (HOST:PORT or ray://HOST:PORT) names a loopback host (127.0.0.0/8, ::1, localhost)."""
    import ipaddress
    from urllib.parse import urlparse

    if address == "auto":
        return False
    host = urlparse(address if "://" in address else f"ray-gcs://{address}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def private_auth() -> None:
    """Keep a private Ray's credentials off the disk, unless the environment already says how (RAY_AUTH_MODE).

    Ray (2.5x and later) turns token authentication on for a new local Ray and writes the token it generates to
    ~/.ray/auth_token, readable by every user of the machine (0644). Inside the loopback-only network namespace
    nothing else can reach Ray, so its authentication is off (RAY_AUTH_MODE=disabled, as for the command line's
    Ray runs); outside it, token authentication stays on with a fresh token held only in this process's
    environment (RAY_AUTH_TOKEN, which Ray's processes inherit and only this user can read), where no token is
    given (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH). Set before Ray starts; Ray versions without authentication
    ignore both."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if in_loopback_namespace():
        os.environ["RAY_AUTH_MODE"] = "disabled"
    else:
        os.environ["RAY_AUTH_MODE"] = "token"
        if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    _reload_ray_config()


def _reload_ray_config() -> None:
    """Make an already imported Ray read its settings from the environment again (its authentication mode is
    read when Ray is imported); nothing where Ray is not imported yet or has no such call."""
    import sys

    raylet = sys.modules.get("ray._raylet")
    config = getattr(raylet, "Config", None)
    if config is not None and hasattr(config, "initialize"):
        try:
            config.initialize("")
        except Exception:  # noqa: BLE001 - an older Ray: it reads the environment when it starts
            pass


@contextmanager
def _loopback_node_address(ray: Any, force: bool = False) -> Iterator[None]:
    """Within the block, Ray takes the node address 127.0.0.1 as given. `ray.init` replaces a loopback
    `_node_ip_address` by the address Ray's `get_node_ip_address` finds (a UDP connect towards 8.8.8.8:53) unless
    Ray's cluster mode is off (`ray_constants.ENABLE_RAY_CLUSTER`, read from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
    when Ray is imported): a Ray imported before that variable was set has it on, so it is turned off here while
    Ray starts (it is read nowhere else but by `ray start`). `force`: whatever that variable says (joining a
    cluster at a loopback address, which Ray would otherwise rewrite to the machine's network address). Nothing
    where this Ray has no such constant."""
    consts = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if (not force and os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0") or getattr(
            consts, "ENABLE_RAY_CLUSTER", None) is not True:
        yield
        return
    consts.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        consts.ENABLE_RAY_CLUSTER = True


def private_temp_dir() -> tuple[str, str]:
    """(Ray's temp dir, the folder to remove afterwards): Ray makes its temp dir and session folders
    world-writable (0777), so it goes inside a private 0700 folder of this user (in the temp folder, or /tmp
when that path is too long for Ray's socket paths), removed by `remove_temp_dir`
    at close or, failing that, when the process exits (registered before Ray's own exit hook, so it runs after
    Ray has shut down)."""
    base = tempfile.gettempdir()
    if len(base) > MAX_TEMP_BASE and os.path.isdir("/tmp"):
        base = "/tmp"  # Ray's socket paths under it must stay within 107 bytes
    own = tempfile.mkdtemp(prefix="gcr", dir=base)
    atexit.register(remove_temp_dir, own)
    _OWN_DIRS.add(own)
    return os.path.join(own, "r"), own


#: the folders `private_temp_dir` made that are not removed yet
_OWN_DIRS: set[str] = set()


def remove_temp_dir(path: str | None) -> None:
    """Remove a folder made by `private_temp_dir` (nothing if None or already gone)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        _OWN_DIRS.discard(path)


def remove_own_temp_dirs() -> None:
    """Remove every folder `private_temp_dir` made that is still there (for a process that ends without its
    exit hooks)."""
    for path in list(_OWN_DIRS):
        remove_temp_dir(path)
