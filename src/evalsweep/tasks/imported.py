"""Results that another harness computed (``evalsweep import-lm-eval``).

Such a task cannot be run by evalsweep: its documents, prompts and scores
come from the store. It only knows its metrics, so that comparisons, flips
and reports treat it like a built-in task, aggregated as lm-eval aggregates
per-sample metrics (mean and sample standard error).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsweep.errors import TaskError
from evalsweep.requests import LoglikelihoodResult
from evalsweep.tasks._aggregate import mean_per_metric
from evalsweep.tasks._base import (
    AggregateScore,
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    TaskData,
    TaskDefaults,
)


class ImportedTask(TaskDefaults):
    """A task known only from stored settings: name, version, metrics."""

    rescore_stored = False
    default_num_fewshot = 0

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.name = str(settings["task"])
        self.version = str(settings.get("version", "imported"))
        higher = settings.get("higher_is_better", {})
        self.metrics = tuple(
            MetricSpec(key, bool(higher.get(key.split(",")[0], True)))
            for key in settings.get("metrics", [])
        )

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        raise TaskError(f"{self.name}: imported results cannot be run again by evalsweep")

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        raise TaskError(f"{self.name}: imported results cannot be run again by evalsweep")

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        raise TaskError(f"{self.name}: imported results are scored by the harness that made them")

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        return mean_per_metric([spec.key for spec in self.metrics], scored, where_present=True)
