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

from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit

from evalsweep.compute._base import LocalTarget, Target
from evalsweep.config import config_path, load_config, section
from evalsweep.errors import ConfigError, TargetError
from evalsweep.store import Store

KINDS = ("local", "ssh", "skypilot", "ray")


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
    """Build a target from its configuration table (``kind`` says which)."""
    from evalsweep.compute._ray import RayTarget
    from evalsweep.compute._skypilot import SkyPilotTarget
    from evalsweep.compute._ssh import SSHTarget

    options = dict(table)
    kind = options.pop("kind", None)
    classes: dict[str, Any] = {"ssh": SSHTarget, "ray": RayTarget, "skypilot": SkyPilotTarget}
    if kind == "local":
        return LocalTarget()
    if kind not in classes:
        raise ConfigError(
            f"{config_path()}: [targets.{name}] kind must be one of {', '.join(KINDS)}, "
            f"got {kind!r}"
        )
    allowed = {f.name for f in fields(classes[kind]) if f.init} - {"name", "store", "kind"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(
            f"{config_path()}: [targets.{name}] unknown setting(s) {', '.join(unknown)} "
            f"for kind {kind!r} (allowed: {', '.join(sorted(allowed))})"
        )
    if kind == "ssh" and "host" not in options:
        raise ConfigError(f'{config_path()}: [targets.{name}] needs host = "user@host"')
    if kind == "skypilot":
        options["store"] = store
    target: Target = classes[kind](name=name, **options)
    return target
