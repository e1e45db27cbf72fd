"""Targets by name: ``local``, the configuration's ``[targets.NAME]`` tables, or a URL.

The configuration file (``evalsweep.config``) is where a person names their
machines and says what they cost::

    [targets.gpu1]
    kind = "ssh"
    host = "me@gpu1.example.org"
    identity_file = "~/.ssh/id_ed25519"
    python = "/opt/venv/bin/python"
    hourly_rate = 0.0
    hardware = "1 x H100 80GB"

    [targets.cloud]
    kind = "skypilot"
    gpu = "H200"          # H100 by default; priced from the shipped catalog
    idle_minutes = 10
    deadline_minutes = 180

    [targets.cluster]
    kind = "ray"
    address = "head.example.org:6379"   # the head's GCS address (ray:// is Ray Client)
    num_gpus = 1
    hourly_rate = 12.0
    auth_token_secret = "RAY_TOKEN"   # an evalsweep secret (token authentication)

An ssh target's ``secrets = ["HF_TOKEN"]`` names evalsweep secrets its remote
run gets; ``[tariff]`` (and ``[tariff.NAME]``) prices code-eval runs.

``--target`` also takes ``ssh://user@host[:port]`` and ``ray://host:port`` (Ray
Client, which needs ``ray[client]``) directly, and ``skypilot:GPU`` for a cloud GPU
with the defaults.
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields, is_dataclass
from typing import Any
from urllib.parse import urlsplit

from evalsweep.compute._base import LocalTarget, Target
from evalsweep.compute._kinds import TARGET_KINDS
from evalsweep.config import config_path, load_config, section
from evalsweep.errors import ConfigError, TargetError
from evalsweep.store import Store


def load_targets(
    config: dict[str, Any] | None = None, store: Store | None = None
) -> dict[str, Target]:
    """``local`` plus every target configured in ``[targets.NAME]`` tables."""
    config = load_config() if config is None else config
    targets: dict[str, Target] = {"local": LocalTarget()}
    for name, table in section(config, "targets").items():
        if not isinstance(table, dict):
            raise ConfigError(f"{config_path()}: [targets.{name}] must be a table")
        targets[name] = make_target(name, table, store)
    return targets


def get_target(
    name: str, config: dict[str, Any] | None = None, store: Store | None = None
) -> Target:
    """The target called ``name`` in the configuration, or described by a URL."""
    if name.startswith("ssh://"):
        url = urlsplit(name)
        if not url.hostname:
            raise TargetError(f"target {name!r}: no host (use ssh://user@host[:port])")
        host = f"{url.username}@{url.hostname}" if url.username else url.hostname
        return make_target(name, {"kind": "ssh", "host": host, "port": url.port or 22}, store)
    if name.startswith("ray://"):
        return make_target(name, {"kind": "ray", "address": name}, store)
    if name == "skypilot" or name.startswith("skypilot:"):
        gpu = name.partition(":")[2] or "H100"
        return make_target(name, {"kind": "skypilot", "gpu": gpu}, store)
    targets = load_targets(config, store)
    if name not in targets:
        known = ", ".join(sorted(targets))
        raise TargetError(
            f"no target {name!r} (known: {known}; add [targets.{name}] to {config_path()})"
        )
    return targets[name]


def make_target(name: str, table: dict[str, Any], store: Store | None = None) -> Target:
    """Build a target from its configuration table (``kind`` says which: ``TARGET_KINDS``)."""
    options = dict(table)
    kind = options.pop("kind", None)
    if not isinstance(kind, str) or kind not in TARGET_KINDS:
        raise ConfigError(
            f"{config_path()}: [targets.{name}] kind must be one of {', '.join(TARGET_KINDS)}, "
            f"got {kind!r}"
        )
    target_class = TARGET_KINDS[kind]
    if target_class is LocalTarget:
        return LocalTarget()
    settings, required, takes_store = _settings(target_class)
    unknown = sorted(set(options) - settings) if settings is not None else []
    if unknown:
        raise ConfigError(
            f"{config_path()}: [targets.{name}] unknown setting(s) {', '.join(unknown)} "
            f"for kind {kind!r} (allowed: {', '.join(sorted(settings or ()))})"
        )
    for missing in [each for each in required if each not in options]:
        needs = TARGET_KINDS.entry(kind).details.get("needs", missing)
        raise ConfigError(f"{config_path()}: [targets.{name}] needs {needs}")
    if takes_store:
        options["store"] = store
    target: Target = TARGET_KINDS.make(kind, Target, name=name, **options)
    return target


#: Init parameters a target class fills itself, never from a table.
_OWN = frozenset({"name", "store", "kind"})


def _settings(target_class: Any) -> tuple[set[str] | None, list[str], bool]:
    """A target class's settings (``None``: any), the required ones, and whether it
    takes the results store: a dataclass's init fields, else its signature's parameters."""
    if is_dataclass(target_class):
        init = [f for f in fields(target_class) if f.init]
        required = [
            f.name
            for f in init
            if f.name not in _OWN and f.default is MISSING and f.default_factory is MISSING
        ]
        return {f.name for f in init} - _OWN, required, any(f.name == "store" for f in init)
    parameters = inspect.signature(target_class).parameters.values()
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    named = [p for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD]
    required = [p.name for p in named if p.name not in _OWN and p.default is p.empty]
    settings = None if anything else {p.name for p in named} - _OWN
    return settings, required, any(p.name == "store" for p in named)
