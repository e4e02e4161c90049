"""The installed package's version, read from its metadata (pyproject.toml is the one place it is written)."""

from importlib import metadata

try:
    __version__ = metadata.version("gencc")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
