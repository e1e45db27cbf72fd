"""``evalsweep code-eval`` here or on targets, with what it used and what it cost.

Both paths run :func:`evalsweep.execution.evaluate_samples_file` (so the input
checks, the streamed ``.partial`` file, resume, the results file and pass@k
are one piece of code); a distributed run only hands it a
:class:`DistributedJudge` instead of a local sandbox service. The record says
which path served, the usage (CPU seconds, peak memory, wall time, per 1,000
samples) and, with a tariff from the configuration, the cost; it is written beside
the results file as ``<results>.run.json``.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsweep._records import encode
from evalsweep.codeeval._distributed import DistributedJudge
from evalsweep.codeeval._evaluate import evaluate_samples_file
from evalsweep.codeeval._record import CodeEvalRecord, CodeEvalResult
from evalsweep.codeeval._usage import BillingUnit, RunCost, Tariff, UsageMeter, tariff_from_config
from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    Limits,
    SandboxReport,
)


@dataclass
class CodeEvalRun:
    """A code-eval run's result, how it was run, and its usage and cost."""

    result: CodeEvalResult
    record: dict[str, Any]
    cost: RunCost

    def as_dict(self) -> dict[str, Any]:
        """The run's versioned record (:class:`CodeEvalRecord`) as plain JSON values."""
        data: dict[str, Any] = encode(
            CodeEvalRecord.of(self.result, self.record, self.cost.as_dict())
        )
        return data


def _local_vcpus() -> float:
    import os

    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return float(os.cpu_count() or 1)


def code_eval(
    problems: Path,
    samples: Path,
    *,
    targets: Sequence[str] = ("local",),
    ks: Sequence[int] = (1, 10, 100),
    workers: int | None = None,
    timeout: float = 3.0,
    results_path: Path | None = None,
    resume: bool = True,
    unsafe_no_sandbox: bool = False,
    slice_samples: int | None = None,
    slices_per_host: int = 2,
    retries: int = 2,
    config: dict[str, Any] | None = None,
    store: Any = None,
    progress: Callable[[int, int], None] | None = None,
    note: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
    hash_seed: int | None = None,
    installed_packages: bool = False,
) -> CodeEvalRun:
    """Judge a samples file here (``targets == ["local"]``) or on the named targets.

    Args:
        targets: ``local``, or names/URLs of ssh and ray targets (one or more).
        slice_samples: most samples per slice (distributed runs).
        slices_per_host: slices in flight per host (distributed runs).
        retries: retries of a slice, or of a lone sample, whose worker died.
        config: the person's configuration (targets and ``[tariff]``).
        store: the results store whose audit log records each command sent.
        warn: told each warning about the results files (a resume file set aside).
        hash_seed: the ``PYTHONHASHSEED`` of every sandbox of the run, here or on every
            slice (default: one random seed); recorded, so a run can be judged again alike.
        installed_packages: programs and tests may import the packages installed beside
            evalsweep, not only the standard library (``Limits.installed_packages``).
    """
    from evalsweep.codeeval._slices import DEFAULT_SLICE_SAMPLES
    from evalsweep.codeeval._transports import make_transport
    from evalsweep.compute._registry import get_target
    from evalsweep.compute._runner import CommandRunner
    from evalsweep.config import config_path, load_config

    config = load_config() if config is None else config
    names = list(dict.fromkeys(targets)) or ["local"]
    tariff_key = names[0] if len(names) == 1 else "distributed"
    tariff = tariff_from_config(config, tariff_key, str(config_path()))
    limits = Limits(installed_packages=installed_packages).with_timeout(timeout)
    if names == ["local"]:
        with UsageMeter() as meter:
            service = _MeteredService(
                ExecutionService(
                    workers=workers,
                    limits=limits,
                    unsafe_no_sandbox=unsafe_no_sandbox,
                    hash_seed=hash_seed,
                ),
                meter,
            )
            try:
                result = evaluate_samples_file(
                    problems, samples, ks=ks, timeout=timeout, limits=limits,
                    results_path=results_path, resume=resume, service=service, progress=progress,
                    warn=warn,
                )  # fmt: skip
            finally:
                service.close()
        unit = BillingUnit(
            label=f"local {platform.node()}",
            vcpus=_local_vcpus(),
            wall_seconds=meter.wall_seconds,
            peak_memory_mb=meter.peak_kb / 1024,
            cpu_seconds=meter.cpu_seconds,
        )
        cost = RunCost(result.run.samples_run, meter.wall_seconds, [unit], tariff)
        record: dict[str, Any] = {
            "path": "local",
            "targets": ["local"],
            "hash_seed": service.hash_seed,
            "workers": [{"target": "local", "host": platform.node(),
                         "versions": result.run.versions,
                         "sandbox": {"active": list(result.run.sandbox.active),
                                     "missing": list(result.run.sandbox.missing)}}],
        }  # fmt: skip
        return _recorded(CodeEvalRun(result, {**record, "tariff": _tariff(tariff)}, cost))
    if "local" in names:
        from evalsweep.errors import TargetError

        raise TargetError("--target local cannot be combined with other targets")
    if store is None:
        raise ValueError("a distributed code-eval needs a results store for its audit log")
    transports = []
    for name in names:
        target = get_target(name, config, store)
        runner = CommandRunner(store, target.name)
        transports.append(make_transport(target, runner, slices_per_host))
    judge = DistributedJudge(
        transports,
        slice_samples=slice_samples or DEFAULT_SLICE_SAMPLES,
        slices_per_host=slices_per_host,
        retries=retries,
        workers=workers,
        unsafe_no_sandbox=unsafe_no_sandbox,
        note=note,
        hash_seed=hash_seed,
    )
    with UsageMeter() as meter:  # this machine's share: reading, cutting, writing
        try:
            result = evaluate_samples_file(
                problems, samples, ks=ks, timeout=timeout, limits=limits,
                results_path=results_path, resume=resume, service=judge, progress=progress,
                warn=warn,
            )  # fmt: skip
        finally:
            judge.close()
    cost = judge.cost(result.run.samples_run, meter.wall_seconds, tariff)
    record = {**judge.record(), "coordinator": meter.as_dict(), "tariff": _tariff(tariff)}
    return _recorded(CodeEvalRun(result, record, cost))


class _MeteredService:
    """The local sandbox service, counting each sample's CPU time into the run's usage."""

    def __init__(self, service: ExecutionService, meter: UsageMeter) -> None:
        self._service = service
        self._meter = meter

    @property
    def workers(self) -> int:
        return self._service.workers

    @property
    def hash_seed(self) -> int:
        return self._service.hash_seed

    def start(self) -> SandboxReport:
        return self._service.start()

    def close(self) -> None:
        self._service.close()

    def run_many(
        self,
        requests: Sequence[ExecutionRequest],
        on_result: Callable[[int, ExecutionResult], None] | None = None,
    ) -> list[ExecutionResult]:
        def counted(index: int, result: ExecutionResult) -> None:
            self._meter.add_sample(result.cpu_seconds)
            if on_result is not None:
                on_result(index, result)

        return self._service.run_many(requests, counted)


def record_path(results_path: str | Path) -> Path:
    """Where a run's record is kept: beside its results file, ``<results>.run.json``."""
    return Path(f"{results_path}.run.json")


def _recorded(run: CodeEvalRun) -> CodeEvalRun:
    """Write the run's record (what ``--json`` prints) beside the results, whole or not at all."""
    import json

    from evalsweep.codeeval._resultfiles import write_beside

    text = json.dumps(run.as_dict(), indent=2, default=str) + "\n"
    write_beside(record_path(run.result.results_path), text.encode("utf-8"))
    return run


def _tariff(tariff: Tariff | None) -> dict[str, Any] | None:
    return tariff.as_dict() if tariff is not None else None
