"""What a code-eval run used and what it would cost: CPU seconds, peak memory, wall time.

:class:`UsageMeter` measures one process tree (this process and everything it
started): CPU seconds from ``getrusage`` (itself and its reaped children, so
it is read after the sandbox service has closed), peak memory by sampling the
proportional set size of every process in the tree (a forked zygote's shared
pages are counted once, not once per fork), and wall time. Sandboxed sample
processes are reaped inside their sandbox, where ``getrusage`` cannot see
them: their CPU time is added as the sandbox measured it (:meth:`add_sample`).

A :class:`Tariff` prices that usage as sandbox providers bill it: per
vCPU-second and per GB-second of memory held, each billing unit (a host, or a
worker started for one slice) charged at least ``minimum_seconds``.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalsweep.errors import ConfigError


def _children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def _memory_kb(pid: int) -> int:
    """Proportional set size of ``pid`` (its resident size where PSS cannot be read)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_memory_kb(root: int) -> int:
    """Memory of ``root`` and all its descendants now, in KiB."""
    children = _children_of()
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _memory_kb(pid)
        stack.extend(children.get(pid, ()))
    return total


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


class UsageMeter:
    """CPU seconds, peak memory and wall time of this process tree between start and stop."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak_kb = 0
        self.cpu_seconds = 0.0
        self.wall_seconds = 0.0
        self.sample_cpu_seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> UsageMeter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._cpu0 = _cpu_seconds()
        self._wall0 = time.monotonic()
        self._thread = threading.Thread(target=self._sample, name="evalsweep-usage", daemon=True)
        self._thread.start()

    def add_sample(self, cpu_seconds: float) -> None:
        """Count a sandboxed sample's CPU time, as the sandbox measured it.

        Sample processes are reaped inside the sandbox, out of reach of this
        process's ``getrusage``; the service's own processes are not.
        """
        self.sample_cpu_seconds += max(0.0, cpu_seconds)

    def _sample(self) -> None:
        pid = os.getpid()
        while True:
            with contextlib.suppress(OSError):
                self.peak_kb = max(self.peak_kb, tree_memory_kb(pid))
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.cpu_seconds = _cpu_seconds() - self._cpu0 + self.sample_cpu_seconds
        self.wall_seconds = time.monotonic() - self._wall0

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_seconds": round(self.cpu_seconds, 3),
            "peak_memory_mb": round(self.peak_kb / 1024, 1),
            "wall_seconds": round(self.wall_seconds, 3),
        }


@dataclass(frozen=True)
class Tariff:
    """A sandbox provider's prices.

    Args:
        vcpu_second: price of one vCPU held for one second.
        gb_second: price of one GB (10^9 bytes) of memory held for one second.
        minimum_seconds: each billing unit is charged at least this long.
        currency: ISO code of the prices.
        name: where the figures come from (shown with the cost).
    """

    vcpu_second: float = 0.0
    gb_second: float = 0.0
    minimum_seconds: float = 0.0
    currency: str = "USD"
    name: str = ""

    @classmethod
    def from_table(cls, table: dict[str, Any], where: str) -> Tariff:
        allowed = {"vcpu_second", "gb_second", "minimum_seconds", "currency", "name"}
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ConfigError(
                f"{where}: unknown tariff setting(s) {', '.join(unknown)} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        values: dict[str, Any] = {}
        for key, value in table.items():
            if key in ("currency", "name"):
                if not isinstance(value, str):
                    raise ConfigError(f"{where}: tariff {key} must be a string")
                values[key] = value
            elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"{where}: tariff {key} must be a number >= 0, got {value!r}")
            else:
                values[key] = float(value)
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BillingUnit:
    """One thing a provider bills: a host for the run, or a worker started for a slice."""

    label: str
    vcpus: float
    wall_seconds: float
    peak_memory_mb: float
    cpu_seconds: float


@dataclass
class RunCost:
    """Usage of a whole run and, with a tariff, its price."""

    samples: int
    wall_seconds: float
    units: list[BillingUnit] = field(default_factory=list)
    tariff: Tariff | None = None

    @property
    def cpu_seconds(self) -> float:
        return sum(unit.cpu_seconds for unit in self.units)

    @property
    def peak_memory_mb(self) -> float:
        return max((unit.peak_memory_mb for unit in self.units), default=0.0)

    def _per_1000(self, value: float) -> float:
        return value * 1000.0 / self.samples if self.samples else 0.0

    def cost(self) -> float | None:
        if self.tariff is None:
            return None
        total = 0.0
        for unit in self.units:
            billed = max(math.ceil(unit.wall_seconds), self.tariff.minimum_seconds)
            memory_gb = unit.peak_memory_mb * 1024 * 1024 / 1e9
            total += billed * (
                unit.vcpus * self.tariff.vcpu_second + memory_gb * self.tariff.gb_second
            )
        return total

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "samples": self.samples,
            "wall_seconds": round(self.wall_seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "peak_memory_mb": round(self.peak_memory_mb, 1),
            "billing_units": len(self.units),
            "per_1000_samples": {
                "wall_seconds": round(self._per_1000(self.wall_seconds), 3),
                "cpu_seconds": round(self._per_1000(self.cpu_seconds), 3),
            },
            "tariff": self.tariff.as_dict() if self.tariff is not None else None,
            "cost": None,
        }
        cost = self.cost()
        if cost is not None:
            data["cost"] = round(cost, 8)
            data["per_1000_samples"]["cost"] = round(self._per_1000(cost), 8)
        return data

    def describe(self) -> str:
        per = self._per_1000(1.0)
        text = (
            f"{self.cpu_seconds:.1f} CPU s, peak {self.peak_memory_mb:.0f} MB, "
            f"{self.wall_seconds:.1f} s wall; per 1,000 samples: "
            f"{self.cpu_seconds * per:.1f} CPU s, {self.wall_seconds * per:.1f} s wall"
        )
        cost = self.cost()
        if cost is not None and self.tariff is not None:
            text += (
                f"; cost {cost:.6f} {self.tariff.currency} "
                f"({cost * per:.6f} per 1,000 samples, tariff {self.tariff.name or 'configured'}: "
                f"{self.tariff.vcpu_second:g}/vCPU-s, {self.tariff.gb_second:g}/GB-s, "
                f"minimum {self.tariff.minimum_seconds:g} s per unit)"
            )
        return text


def tariff_from_config(config: dict[str, Any], target: str, where: str) -> Tariff | None:
    """``[tariff]`` of the configuration, overridden by ``[tariff.TARGET]`` where present."""
    table = config.get("tariff")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tariff] must be a table")
    base = {key: value for key, value in table.items() if not isinstance(value, dict)}
    own = table.get(target)
    if isinstance(own, dict):
        base = {**base, **own}
    if not base:
        return None
    return Tariff.from_table(base, f"{where} [tariff]")
