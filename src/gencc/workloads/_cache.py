"""Model cache: where trained weights live, recipe hashing, atomic writes.

The cache root is `$GENCC_CACHE_DIR` when set, else `platformdirs.user_cache_dir("gencc")`; trained models go
to `<root>/models/` as `<name>-<hash>.pt` (a state_dict) and `<name>-<hash>.json` (accuracy, training time,
the recipe). The hash covers everything that changes the weights, so a changed recipe trains a new file.

Trust: the metadata records the sha256 of the weights file written when they were trained, and every load
reads the file once, checks its sha256 against that record and refuses a mismatch (`read_verified`). The
cache root and its models folder must belong to the current user and not be writable by group or others
(`check_private_dir`): otherwise anyone else could plant a file and its metadata together.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_VAR = "GENCC_CACHE_DIR"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache root: `cache_dir` if given, else `$GENCC_CACHE_DIR`, else the platform's user cache dir."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("gencc"))


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding trained weights (`<root>/models`), not created here."""
    return cache_root(cache_dir) / "models"


#: the metadata key holding the sha256 of the weights file
SHA_KEY = "weights_sha256"


def check_private_dir(path: Path, *, create: bool = True) -> Path:
    """`path` (created with mode 0755 if missing and `create`), checked to be a folder owned by the current user
    and not writable by group or others; else PermissionError naming the folder and the fix. Returns `path`."""
    path = Path(path)
    if create and not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o755)
    if not path.exists():
        return path
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"the gencc cache path {path} is not a folder")
    uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
    if st.st_uid != uid:
        raise PermissionError(f"the gencc cache folder {path} belongs to uid {st.st_uid}, not to you (uid {uid}): "
                              f"another user could plant weights there; use a cache folder of your own "
                              f"(cache_dir= or ${ENV_VAR})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"the gencc cache folder {path} is writable by group or others (mode "
                              f"{stat.S_IMODE(st.st_mode):o}): another user could plant weights there; run "
                              f"`chmod go-w {path}` or use a private cache folder (cache_dir= or ${ENV_VAR})")
    return path


def check_cache(models: Path) -> Path:
    """The models folder and its cache root, each checked (and created) by `check_private_dir`."""
    check_private_dir(Path(models).parent)
    return check_private_dir(models)


def sha256_bytes(data: bytes) -> str:
    """The hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def read_verified(path: Path, expected: str | None, how_to_fix: str = "") -> bytes:
    """The bytes of `path`, refused (ValueError naming the file and the fix) unless their sha256 is `expected`
    (the one recorded when the weights were trained). Read once, so what is checked is what gets loaded."""
    if not expected:
        raise ValueError(f"{path}: no sha256 was recorded for these weights, so they cannot be verified; delete "
                         f"the file {how_to_fix}".rstrip())
    data = Path(path).read_bytes()
    got = sha256_bytes(data)
    if got != expected:
        raise ValueError(f"{path}: the weights' sha256 is {got[:16]}..., not the {expected[:16]}... recorded when "
                         f"they were trained: the file was changed or replaced after training. Delete it "
                         f"{how_to_fix}".rstrip())
    return data


def recipe_hash(recipe: dict[str, Any], length: int = 10) -> str:
    """Short stable hash of a JSON-serialisable recipe (keys sorted)."""
    blob = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)` on a temporary file next to `path`, then move it into place with os.replace.

    Two processes racing on the same path each write their own temporary file; the last replace wins and a
    reader never sees a half-written file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; cached models are ordinary readable files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as indented JSON, atomically."""

    def _write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")

    atomic_write(path, _write)


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON file written by `write_json`."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
