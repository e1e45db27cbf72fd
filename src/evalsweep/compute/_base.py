"""The target protocol, what a target is asked to run, and the local target."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evalsweep.engine import Progress, SweepResult, SweepSpec, run_sweep
from evalsweep.options import to_argv
from evalsweep.store import Store

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument


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


@dataclass(frozen=True)
class SweepJob:
    """One sweep, as the local engine runs it and as ``evalsweep run`` arguments.

    Attributes:
        spec: the engine's spec (what a local or Ray run executes).
        baseline: the checkpoint the others are compared with.
        steps: each checkpoint's training step, when they are one run (in step order).
        best_by: the tasks a run's best checkpoint is chosen by (default: every task).
    """

    spec: SweepSpec
    baseline: str | None = None
    steps: dict[str, int] | None = None
    best_by: tuple[str, ...] | None = None

    @property
    def run_args(self) -> tuple[str, ...]:
        """The same sweep as ``evalsweep run`` arguments (what a remote machine executes):
        the options that change the work, then ``--`` and the references
        (:func:`evalsweep.options.to_argv`). Where results go and how they are shown are
        the caller's to add, before these."""
        return tuple(to_argv(self.spec, baseline=self.baseline))


@dataclass
class TargetRun:
    """What a target hands back: the sweep's results, now in the local store.

    Attributes:
        result: the sweep rebuilt from the local store (identical to a local run's).
        document: the result document made where the sweep ran, when it ran elsewhere.
        compute: where it ran, the setup it found, and the spend (provenance).
    """

    result: SweepResult
    compute: dict[str, Any]
    document: ResultDocument | None = None


@runtime_checkable
class Target(Protocol):
    """A place a sweep can run."""

    name: str

    def info(self) -> TargetInfo:
        """Kind, hardware and hourly rate (0 for hardware already paid for)."""
        ...

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        """Run the sweep there and bring its rows into ``store``.

        Args:
            job: the sweep.
            store: the local results store; rows already there are not recomputed,
                and every command sent to the target is written to its audit log.
            progress: where progress and the target's log lines are shown.

        Returns:
            The results, identical to a local run's, and the compute provenance.

        Raises:
            TargetError: the target is unreachable, refused the work or died; finished
                work stays in the store and the same command resumes.
        """
        ...


@runtime_checkable
class LifecycleTarget(Target, Protocol):
    """A target that is provisioned for the work and costs money while it exists.

    It owns its runner: every lifecycle command goes through a
    :class:`~evalsweep.compute.CommandRunner` built on ``store``, the results
    store it was given (``load_targets(config, store=...)``), so each one lands
    in that store's audit log. A caller in another thread gives it that
    thread's own store before calling (SQLite connections stay in their thread).
    """

    store: Store | None

    def deploy(self, *, dryrun: bool = False) -> dict[str, Any]:
        """Provision the machine with the quoted resources; return what was launched."""
        ...

    def stop(self) -> None:
        """Stop the machine (billing for compute stops, disks are kept)."""
        ...

    def start(self) -> None:
        """Start a stopped machine again."""
        ...

    def terminate(self) -> None:
        """Delete the machine and everything on it."""
        ...


class LocalTarget:
    """This machine: free, no lifecycle, work runs in-process."""

    name = "local"

    def info(self) -> TargetInfo:
        return TargetInfo(
            name="local",
            kind="local",
            hardware=local_hardware(),
            hourly_rate=0.0,
            lifecycle=False,
        )

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        from evalsweep.compute._cost import SpendMeter

        meter = SpendMeter(0.0)
        meter.start()
        result = run_sweep(job.spec, store, progress)
        meter.stop()
        return TargetRun(result, {**self.info().as_dict(), "spend": meter.as_dict()})


def local_hardware() -> str:
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
