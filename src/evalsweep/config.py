"""The person's configuration: one TOML file, read-only to evalsweep.

It holds what only the person may decide: compute targets and their hourly
rates (``[targets.NAME]``), spend limits and approval rules (``[limits]``,
``[approval]``). evalsweep never writes it, and nothing an agent calls through
the MCP server can change it: a limit raised there would not be a limit.

Location: ``$EVALSWEEP_CONFIG``, else ``$XDG_CONFIG_HOME/evalsweep/config.toml``
(``~/.config/evalsweep/config.toml``). A missing file means defaults.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from evalsweep.errors import ConfigError


def config_path() -> Path:
    if os.environ.get("EVALSWEEP_CONFIG"):
        return Path(os.environ["EVALSWEEP_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "evalsweep" / "config.toml"


def load_config(path: Path | None = None) -> dict[str, Any]:
    """The parsed configuration, ``{}`` when there is no file."""
    path = path or config_path()
    if not path.is_file():
        return {}
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc.strerror}") from None


def section(config: dict[str, Any], name: str, path: Path | None = None) -> dict[str, Any]:
    """A table of the configuration (``{}`` when absent); an error if it is not a table."""
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path or config_path()}: [{name}] must be a table")
    return value
