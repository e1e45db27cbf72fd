"""The record of a code-eval run: its pass@k, verdict counts and how it was run.

What :func:`evalsweep.codeeval.evaluate_samples_file` returns; ``--json`` prints
:meth:`CodeEvalResult.as_dict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from evalsweep.execution import Limits, SandboxReport


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
        data = dataclasses.asdict(self)
        data["pass_at_k"] = {f"pass@{k}": value for k, value in self.pass_at_k.items()}
        data["run"]["sandbox"]["active"] = list(self.run.sandbox.active)
        data["run"]["sandbox"]["missing"] = list(self.run.sandbox.missing)
        return data
