"""The record of a code-eval run: its pass@k, verdict counts and how it was run.

:class:`CodeEvalResult` is what :func:`evalsweep.codeeval.evaluate_samples_file`
returns; :class:`CodeEvalRecord` is the versioned record ``code-eval --json`` prints
and ``<results>.run.json`` keeps, declared once: written, read back strictly
(:func:`read_code_eval_record`) and described as a JSON Schema
(``codeeval/code-eval-record.schema.json``) by :mod:`evalsweep._records`.

Versions: 1, this module's :class:`CodeEvalRecord` (records written before it carried
no ``schema_version`` and are read as version 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from evalsweep._records import LEADING, VERSION, decode, encode, json_schema, kind_of
from evalsweep.errors import DataError
from evalsweep.execution import Limits, SandboxReport

CODE_EVAL_RECORD_VERSION = 1
"""The version :class:`CodeEvalRecord` is written with."""


@dataclass(frozen=True)
class RunRecord:
    """How a run was executed, for the record kept with its results."""

    sandbox: SandboxReport
    limits: Limits
    workers: int
    python: str
    platform: str
    versions: dict[str, str] = field(default_factory=dict)
    wall_seconds: float = 0.0
    samples_run: int = 0
    samples_resumed: int = 0


@dataclass(frozen=True)
class CodeEvalResult:
    """The outcome of :func:`evaluate_samples_file`."""

    pass_at_k: dict[int, float]
    n_samples: int
    n_tasks: int
    counts: dict[str, int]
    results_path: str
    run: RunRecord

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json`` output (pass@k keyed ``"pass@k"``)."""
        data: dict[str, Any] = encode(self)
        data["pass_at_k"] = pass_at_k_by_name(self.pass_at_k)
        return data


def pass_at_k_by_name(values: dict[int, float]) -> dict[str, float]:
    """pass@k keyed as people read it: ``{"pass@1": ...}``."""
    return {f"pass@{k}": value for k, value in values.items()}


@dataclass(frozen=True)
class CodeEvalRecord:
    """A code-eval run's record: the result, how it was judged, what it used and cost."""

    pass_at_k: dict[str, float]
    """Mean unbiased pass@k over tasks, keyed ``"pass@k"``, for each k every task reaches."""
    n_samples: int
    n_tasks: int
    counts: dict[str, int]
    """Samples per verdict: passed, failed, timeout, error, unsupported."""
    results_path: str
    run: RunRecord
    execution: dict[str, Any]
    """Which path served (``local`` or ``distributed``), its targets, workers and seed."""
    usage: dict[str, Any]
    """CPU seconds, peak memory, wall time, per 1,000 samples, and the cost by the tariff."""
    schema_version: int = field(
        default=CODE_EVAL_RECORD_VERSION, metadata={LEADING: True, VERSION: True}
    )

    @classmethod
    def of(
        cls, result: CodeEvalResult, execution: dict[str, Any], usage: dict[str, Any]
    ) -> CodeEvalRecord:
        return cls(
            pass_at_k=pass_at_k_by_name(result.pass_at_k),
            n_samples=result.n_samples,
            n_tasks=result.n_tasks,
            counts=result.counts,
            results_path=result.results_path,
            run=result.run,
            execution=execution,
            usage=usage,
        )


def code_eval_schema() -> dict[str, Any]:
    """The code-eval record's JSON Schema, from its declaration (shipped beside this module
    as ``code-eval-record.schema.json``)."""
    return json_schema(
        CodeEvalRecord,
        title="evalsweep code-eval record",
        schema_id=f"urn:evalsweep:code-eval-record:{CODE_EVAL_RECORD_VERSION}",
    )


def read_code_eval_record(path: str | Path) -> CodeEvalRecord:
    """A code-eval record from a file (``<results>.run.json``), by the strict rules.

    Raises:
        DataError: one line naming the file, and the field where one is wrong.
    """
    from evalsweep.datafiles import display_path, read_json_text

    value = read_json_text(path)
    where = display_path(path)

    def fail(name: str, message: str) -> NoReturn:
        raise DataError(f"{where}: code-eval record field {name}: {message}")

    if not isinstance(value, dict):
        fail("", f"expected an object, found {kind_of(value)}")
    version = value.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        fail("schema_version", f"expected an integer, found {kind_of(version)}")
    if version > CODE_EVAL_RECORD_VERSION:
        raise DataError(
            f"{where}: code-eval record schema version {version} is newer than this evalsweep "
            f"reads (1 to {CODE_EVAL_RECORD_VERSION}); upgrade evalsweep to read it"
        )
    if version < 1:
        fail("schema_version", f"{version} is not a schema version")
    record: CodeEvalRecord = decode(CodeEvalRecord, value, fail, strict=True)
    return record
