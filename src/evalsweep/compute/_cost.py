"""Spend as it accrues: the hourly rate times the seconds elapsed.

Providers bill per second after a minimum (often one minute), so a target's
spend is ``rate * max(elapsed, minimum) / 3600`` with elapsed rounded up to
the next second. The meter is read while a sweep runs (progress shows it) and
its final figures go into the run's provenance document.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class SpendMeter:
    """Accrued spend of one target while it is held.

    Args:
        hourly_rate: price per hour in ``currency`` (0 for hardware already paid for).
        minimum_seconds: the provider's minimum billed time once started.
        currency: ISO code of the rate.
    """

    hourly_rate: float
    minimum_seconds: int = 0
    currency: str = "USD"
    started: float | None = None
    ended: float | None = None

    def start(self, now: float | None = None) -> None:
        if self.started is None:
            self.started = time.time() if now is None else now

    def stop(self, now: float | None = None) -> None:
        if self.started is not None and self.ended is None:
            self.ended = time.time() if now is None else now

    def elapsed_seconds(self, now: float | None = None) -> int:
        """Whole seconds held so far, rounded up (0 before ``start``)."""
        if self.started is None:
            return 0
        end = self.ended if self.ended is not None else (time.time() if now is None else now)
        return max(0, math.ceil(end - self.started))

    def billed_seconds(self, now: float | None = None) -> int:
        if self.started is None:
            return 0
        return max(self.elapsed_seconds(now), self.minimum_seconds)

    def spent(self, now: float | None = None) -> float:
        """Spend so far: rate per second times billed seconds."""
        return self.hourly_rate * self.billed_seconds(now) / 3600.0

    def describe(self, now: float | None = None) -> str:
        """One line for progress: spend so far, seconds and rate."""
        return (
            f"spent {self.spent(now):.4f} {self.currency} "
            f"({self.elapsed_seconds(now)} s at {self.hourly_rate:.2f}/h)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "hourly_rate": self.hourly_rate,
            "currency": self.currency,
            "minimum_seconds": self.minimum_seconds,
            "started": self.started,
            "ended": self.ended,
            "seconds": self.elapsed_seconds(),
            "billed_seconds": self.billed_seconds(),
            "spend": round(self.spent(), 6),
        }
