"""Paired comparisons of a sweep's checkpoints against a baseline.

Glue between the engine's per-document results and :mod:`evalsweep.stats`:
it lines up each checkpoint's per-question scores by document key (headline
metrics over the whole task, and per MMLU subject) and hands them to
``compare_sweep``, which tests, adjusts for multiplicity and gives verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalsweep.engine import SweepResult
from evalsweep.errors import ComparisonError
from evalsweep.stats import Comparison, ScoreSet, compare_sweep


def score_sets(result: SweepResult) -> list[ScoreSet]:
    """Per-question scores per (checkpoint, task, metric), and per subject if there are several."""
    sets: list[ScoreSet] = []
    for item in result.results:
        task = result.task_runs[item.task].task
        subjects = {doc.subject for doc in item.documents}
        for spec in task.metrics:
            pairs = [
                (doc, scored.metrics[spec.key])
                for doc, scored in zip(item.documents, item.scored, strict=True)
            ]
            sets.append(
                ScoreSet(
                    checkpoint=item.checkpoint.reference,
                    task=item.task,
                    metric=spec.key,
                    subject=None,
                    higher_is_better=spec.higher_is_better,
                    scores={doc.key: value for doc, value in pairs},
                )
            )
            if len(subjects) > 1:
                for subject in sorted(s for s in subjects if s is not None):
                    sets.append(
                        ScoreSet(
                            checkpoint=item.checkpoint.reference,
                            task=item.task,
                            metric=spec.key,
                            subject=subject,
                            higher_is_better=spec.higher_is_better,
                            scores={d.key: v for d, v in pairs if d.subject == subject},
                        )
                    )
    return sets


def pick_baseline(references: Sequence[str], baseline: str | None) -> str:
    """The first checkpoint, or the one named by ``--baseline``."""
    if baseline is None:
        return references[0]
    if baseline not in references:
        raise ComparisonError(
            f"--baseline {baseline!r} is not one of the checkpoints: {', '.join(references)}"
        )
    return baseline


def compare_results(result: SweepResult, baseline: str | None = None) -> list[Comparison]:
    """Every candidate against the baseline, every task metric and MMLU subject."""
    references = [c.reference for c in result.checkpoints]
    if len(references) < 2:
        return []
    return compare_sweep(score_sets(result), pick_baseline(references, baseline))
