"""How a result was made: settings hashes, software versions and hardware.

Every result records these so that a number can be reproduced, and so that
results made under different settings are never silently compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

PACKAGES = ("evalsweep", "torch", "transformers", "tokenizers", "datasets", "numpy", "scipy")


def settings_key(kind: str, settings: Any) -> str:
    """A short stable hash of a settings mapping, prefixed with its kind."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return f"{kind}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def environment() -> dict[str, Any]:
    """Versions of the software that computed the numbers, and the machine it ran on."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hardware": _hardware(),
    }


def _hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu": _cpu_name(), "cpu_count": os.cpu_count()}
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        info["memory_gib"] = round(pages / 2**30, 1)
    except (ValueError, OSError):
        pass
    # GPUs are named when this process has loaded torch (it ran a model). Reading
    # stored results (compare, flips, report) must not pay for importing it.
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda"] = torch.version.cuda
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
