"""evalsweep: did this checkpoint really get better?

Scores several checkpoints on the same benchmarks, stores every per-question
result, and compares them with paired statistics.
"""

from importlib import metadata

try:  # one place holds the version: pyproject.toml, read back from the installed metadata
    __version__ = metadata.version("evalsweep")
except metadata.PackageNotFoundError:  # pragma: no cover - run from a tree never installed
    __version__ = "0+unknown"
