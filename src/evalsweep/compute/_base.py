"""The target protocol and the always-present local target."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from evalsweep.config import load_config, section


@dataclass(frozen=True)
class TargetInfo:
    """What a price preview and ``list_targets`` show about a target."""

    name: str
    kind: str
    hardware: str
    hourly_rate: float
    currency: str = "USD"
    lifecycle: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Target(Protocol):
    """A place a sweep can run."""

    name: str

    def info(self) -> TargetInfo:
        """Kind, hardware and hourly rate (0 for hardware already paid for)."""
        ...


class LocalTarget:
    """This machine: free, no lifecycle, work runs in-process."""

    name = "local"

    def info(self) -> TargetInfo:
        return TargetInfo(
            name="local",
            kind="local",
            hardware=_local_hardware(),
            hourly_rate=0.0,
            lifecycle=False,
        )


def _local_hardware() -> str:
    cpus = os.cpu_count() or 1
    text = f"{platform.machine()} {cpus} CPU"
    try:
        import torch

        if torch.cuda.is_available():
            names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
            text += f", {torch.cuda.device_count()} x {'/'.join(sorted(names))}"
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return text


def load_targets(config: dict[str, Any] | None = None) -> dict[str, Target]:
    """``local`` plus the targets configured in ``[targets.NAME]`` tables."""
    config = load_config() if config is None else config
    targets: dict[str, Target] = {"local": LocalTarget()}
    section(config, "targets")  # validated; remote kinds are added by their modules
    return targets
