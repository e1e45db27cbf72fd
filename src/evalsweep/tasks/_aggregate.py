"""lm-eval's aggregation: means, sample standard errors and pooled group errors.

Reproduced exactly (``api/metrics.py``: ``mean_stderr``,
``pooled_sample_stderr``) so that a table from evalsweep and one from
lm-evaluation-harness agree to the last digit on the same samples.

A task's ``aggregate`` is built from the rows here: :func:`mean_per_metric` (the whole
task, one row per metric), :func:`per_subject` (one row per subject) and :func:`pooled`
(a category or the whole task over its subjects, as lm-eval pools a group).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from evalsweep.tasks._base import AggregateScore, Document, ScoredDocument


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def mean_stderr(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1) over sqrt(n); NaN below two values."""
    n = len(values)
    if n < 2:
        return math.nan
    mu = mean(values)
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (n - 1)) / math.sqrt(n)


def pooled_stderr(stderrs: Sequence[float], sizes: Sequence[int]) -> float:
    """lm-eval's ``pooled_sample_stderr`` for a size-weighted group of subtasks."""
    total = sum(sizes)
    if total - len(sizes) <= 0:
        return math.nan
    pooled_var = sum((size - 1) * err**2 * size for size, err in zip(sizes, stderrs, strict=True))
    return math.sqrt(pooled_var / (total - len(sizes)) / total)


def weighted_mean(values: Sequence[float], sizes: Sequence[int]) -> float:
    total = sum(sizes)
    return sum(v * s for v, s in zip(values, sizes, strict=True)) / total if total else math.nan


def score(
    metric: str, values: Sequence[float], group: str | None = None, level: str = "task"
) -> AggregateScore:
    """One metric over a set of documents: its mean and sample standard error."""
    return AggregateScore(metric, mean(values), mean_stderr(values), len(values), group, level)


def mean_per_metric(
    keys: Iterable[str], scored: Sequence[ScoredDocument], *, where_present: bool = False
) -> list[AggregateScore]:
    """The whole task's row for each metric in ``keys``, in that order. Every document has
    every metric, unless ``where_present``: then each metric is over the documents that have
    it (an imported run whose samples lack one)."""
    if where_present:
        return [score(key, [r.metrics[key] for r in scored if key in r.metrics]) for key in keys]
    return [score(key, [r.metrics[key] for r in scored]) for key in keys]


def per_subject(
    key: str, documents: Sequence[Document], scored: Sequence[ScoredDocument]
) -> list[AggregateScore]:
    """One row of ``key`` per subject (``Document.subject``), in the subjects' sorted order."""
    by_subject: dict[str, list[float]] = {}
    for doc, result in zip(documents, scored, strict=True):
        by_subject.setdefault(doc.subject or "", []).append(result.metrics[key])
    return [
        score(key, values, subject, "subject") for subject, values in sorted(by_subject.items())
    ]


def pooled(items: Sequence[AggregateScore], group: str | None, level: str) -> AggregateScore:
    """A group of rows of one metric as lm-eval aggregates a group: the size-weighted mean and
    the pooled sample standard error over its leaves."""
    sizes = [item.n for item in items]
    return AggregateScore(
        items[0].metric,
        weighted_mean([item.value for item in items], sizes),
        pooled_stderr([item.stderr for item in items], sizes),
        sum(sizes),
        group,
        level,
    )
