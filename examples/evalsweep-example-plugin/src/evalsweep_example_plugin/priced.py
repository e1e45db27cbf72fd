"""The ``priced-local`` target kind: this machine, at an hourly rate the configuration sets.

A target kind is a class made as ``Class(name=NAME, **settings)`` from a
``[targets.NAME]`` table; as a dataclass, its init fields are the settings a table may
give (those without a default are required). Its objects satisfy
``evalsweep.compute.Target``: ``info`` and ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalsweep.compute import LocalTarget, SpendMeter, SweepJob, TargetInfo, TargetRun
from evalsweep.engine import Progress, run_sweep
from evalsweep.store import Store


@dataclass
class PricedLocal:
    """This machine, at the hourly rate the configuration gives."""

    name: str
    hourly_rate: float = 0.0
    currency: str = "USD"

    def info(self) -> TargetInfo:
        return TargetInfo(
            name=self.name,
            kind="priced-local",
            hardware=LocalTarget().info().hardware,
            hourly_rate=self.hourly_rate,
            currency=self.currency,
        )

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        meter = SpendMeter(self.hourly_rate)
        meter.start()
        result = run_sweep(job.spec, store, progress)
        meter.stop()
        return TargetRun(result, {**self.info().as_dict(), "spend": meter.as_dict()})
