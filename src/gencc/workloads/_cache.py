"""Model cache: where trained weights live, recipe hashing, atomic writes.

The cache root is `$GENCC_CACHE_DIR` when set, else `platformdirs.user_cache_dir("gencc")`; trained models go
to `<root>/models/` as `<name>-<hash>.pt` (a state_dict) and `<name>-<hash>.json` (accuracy, training time,
the recipe). The hash covers everything that changes the weights, so a changed recipe trains a new file.
"""

from __future__ import annotations

import hashlib
import json
import os
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
