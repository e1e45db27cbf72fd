"""Offline GPU price quotes from a shipped, dated catalog snapshot.

A price preview must work before any cloud account is touched, so the
cheapest offer for ``GPU x count`` is read from CSV files in SkyPilot's
catalog schema that ship with evalsweep (``catalog/<date>/<cloud>/vms.csv``,
sources in ``SOURCE.md``). The quote names the snapshot's date; the launch
re-checks the real price after provisioning.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from evalsweep.errors import TargetError

DEFAULT_GPU = "H100"


@dataclass(frozen=True)
class Offer:
    """One catalog row: an instance type with its accelerators and on-demand price."""

    cloud: str
    instance_type: str
    accelerator: str
    count: int
    vcpus: float
    memory_gib: float
    hourly_price: float
    region: str


@dataclass(frozen=True)
class Quote:
    """The cheapest offer for what was asked, and where the figure comes from."""

    gpu: str
    count: int
    offer: Offer
    catalog: str  # the snapshot's date

    @property
    def hourly_price(self) -> float:
        return self.offer.hourly_price

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "count": self.count,
            "hourly_price": self.hourly_price,
            "catalog": self.catalog,
            **{f"offer_{k}": v for k, v in asdict(self.offer).items()},
        }


def catalog_root() -> Path:
    return Path(str(resources.files("evalsweep.compute") / "catalog"))


def latest_snapshot(root: Path | None = None) -> Path:
    root = root or catalog_root()
    dated = sorted(p for p in root.iterdir() if p.is_dir() and p.name[:4].isdigit())
    if not dated:
        raise TargetError(f"no GPU price snapshot in {root}")
    return dated[-1]


def load_offers(snapshot: Path | None = None) -> list[Offer]:
    """Every GPU row of every provider in the snapshot."""
    snapshot = snapshot or latest_snapshot()
    offers = []
    for path in sorted(snapshot.glob("*/vms.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                if not row.get("AcceleratorName") or not row.get("Price"):
                    continue
                offers.append(
                    Offer(
                        cloud=path.parent.name,
                        instance_type=row["InstanceType"],
                        accelerator=row["AcceleratorName"],
                        count=int(float(row["AcceleratorCount"])),
                        vcpus=float(row.get("vCPUs") or 0),
                        memory_gib=float(row.get("MemoryGiB") or 0),
                        hourly_price=float(row["Price"]),
                        region=row.get("Region") or "",
                    )
                )
    return offers


def quote(gpu: str = DEFAULT_GPU, count: int = 1, snapshot: Path | None = None) -> Quote:
    """The cheapest on-demand offer with exactly ``count`` of ``gpu``.

    Raises:
        TargetError: the GPU type (or that many of it) is not in the snapshot.
    """
    snapshot = snapshot or latest_snapshot()
    offers = load_offers(snapshot)
    wanted = gpu.strip().upper()
    same_gpu = [o for o in offers if o.accelerator.upper() == wanted]
    if not same_gpu:
        known = ", ".join(sorted({o.accelerator for o in offers}))
        raise TargetError(
            f"GPU type {gpu!r} is not in the price catalog of {snapshot.name}; known: {known}"
        )
    matching = [o for o in same_gpu if o.count == count]
    if not matching:
        counts = ", ".join(str(c) for c in sorted({o.count for o in same_gpu}))
        raise TargetError(
            f"no offer of {count} x {gpu} in {snapshot.name}; {gpu} comes in {counts}"
        )
    best = min(matching, key=lambda o: (o.hourly_price, o.cloud, o.instance_type))
    return Quote(gpu=best.accelerator, count=count, offer=best, catalog=snapshot.name)
