"""What judges a code-eval run's samples: one interface, two implementations.

:func:`evalsweep.codeeval.evaluate_samples_file` reads the inputs, keeps the
results files and counts pass@k; it hands the samples to a :class:`Judge`:
the local sandbox service (:class:`evalsweep.execution.ExecutionService`) or
the distributed judge that cuts them into slices for targets
(:class:`evalsweep.codeeval.DistributedJudge`). Either gives one verdict per
request, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from evalsweep.execution import ExecutionRequest, ExecutionResult, SandboxReport


@runtime_checkable
class Judge(Protocol):
    """Judges samples in sandboxes, here or on targets."""

    @property
    def hash_seed(self) -> int:
        """The ``PYTHONHASHSEED`` of every sandbox it starts (recorded with the run)."""
        ...

    @property
    def workers(self) -> int:
        """How many samples it judges at once."""
        ...

    def start(self) -> SandboxReport:
        """Start (once) and say which isolation layers hold; fails before any sample runs."""
        ...

    def run_many(
        self,
        requests: Sequence[ExecutionRequest],
        on_result: Callable[[int, ExecutionResult], None] | None = None,
    ) -> list[ExecutionResult]:
        """Judge ``requests``; ``on_result(i, result)`` as each verdict is known (never
        concurrently); the results in the order of ``requests``."""
        ...

    def close(self) -> None:
        """Stop what :meth:`start` started."""
        ...
