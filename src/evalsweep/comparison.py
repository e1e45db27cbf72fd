"""Paired comparisons of a sweep's checkpoints against a baseline.

Glue between the engine's per-document results and :mod:`evalsweep.stats`:
it lines up each checkpoint's per-question scores by document key (headline
metrics over the whole task, and per MMLU subject) and hands them to
``compare_sweep``, which tests, adjusts for multiplicity and gives verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from evalsweep.engine import SweepResult
from evalsweep.errors import ComparisonError
from evalsweep.stats import Comparison, LabelNoise, ScoreSet, compare_pairs, compare_sweep
from evalsweep.tasks import Document, facts_of


def score_sets(result: SweepResult) -> list[ScoreSet]:
    """Per-question scores per (checkpoint, task, metric), and per subject if there are several."""
    sets: list[ScoreSet] = []
    for item in result.results:
        task = result.task_runs[item.task].task
        by_subject: dict[str | None, list[int]] = {}
        for index, doc in enumerate(item.documents):
            by_subject.setdefault(doc.subject, []).append(index)
        keys = [doc.key for doc in item.documents]
        for spec in task.metrics:
            values = [scored.metrics[spec.key] for scored in item.scored]
            sets.append(
                ScoreSet(
                    checkpoint=item.checkpoint.reference,
                    task=item.task,
                    metric=spec.key,
                    subject=None,
                    higher_is_better=spec.higher_is_better,
                    scores=dict(zip(keys, values, strict=True)),
                )
            )
            if len(by_subject) > 1:
                for subject in sorted(s for s in by_subject if s is not None):
                    sets.append(
                        ScoreSet(
                            checkpoint=item.checkpoint.reference,
                            task=item.task,
                            metric=spec.key,
                            subject=subject,
                            higher_is_better=spec.higher_is_better,
                            scores={keys[i]: values[i] for i in by_subject[subject]},
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


def label_noise(result: SweepResult) -> LabelNoise:
    """The label noise each task of the sweep declares (``Task.label_noise``), by name."""
    found = {}
    for name, run in result.task_runs.items():
        noise = facts_of(run.task).label_noise
        if noise is not None:
            found[name] = (noise.benchmark, noise.band)
    return found


def compare_results(result: SweepResult, baseline: str | None = None) -> list[Comparison]:
    """Every candidate against the baseline, every task metric and MMLU subject."""
    references = [c.reference for c in result.checkpoints]
    if len(references) < 2:
        return []
    sets = score_sets(result)
    return compare_sweep(sets, pick_baseline(references, baseline), label_noise=label_noise(result))


def compare_run(
    result: SweepResult, baseline: str | None = None
) -> tuple[list[Comparison], list[Comparison]]:
    """A training run's checkpoints (in step order): each against the baseline (the first
    unless named) and each against the one before it, all rows under one multiplicity
    control. Returns (against the baseline, against the previous checkpoint); a
    checkpoint whose previous one is the baseline has only its baseline row."""
    references = [c.reference for c in result.checkpoints]
    if len(references) < 2:
        return [], []
    chosen = pick_baseline(references, baseline)
    against_baseline = [(chosen, c) for c in references if c != chosen]
    against_previous = [
        (before, after)
        for before, after in zip(references, references[1:], strict=False)
        if before != chosen
    ]
    sets = score_sets(result)
    pairs = against_baseline + against_previous
    rows = compare_pairs(sets, pairs, label_noise=label_noise(result))
    return [c for c in rows if c.baseline == chosen], [c for c in rows if c.baseline != chosen]


def compare_best(
    result: SweepResult, best: str, rows: Sequence[tuple[str, str]]
) -> list[Comparison]:
    """The best checkpoint of a run against each other checkpoint, on the task metrics
    ``rows`` ((task, metric) headline rows it was chosen by): each row a paired test with
    the other checkpoint as the baseline (``delta`` = best - other), all rows in one Holm
    family of their own (:func:`compare_pairs`, the tests and control of every report)."""
    references = [c.reference for c in result.checkpoints]
    wanted = set(rows)
    sets = [s for s in score_sets(result) if s.subject is None and (s.task, s.metric) in wanted]
    others = [(other, best) for other in references if other != best]
    return compare_pairs(sets, others, label_noise=label_noise(result))


def shown_question(task: object, doc: Document) -> str:
    """The question a report shows beside a flip, for any task.

    A task that says what to show (a task file's ``doc_to_question``, else its
    rendered prompt) is asked first; then the row's own ``question`` text (MMLU,
    GSM8K); then the task's rendered question (ARC, HellaSwag); then a code
    problem's ``prompt``.
    """
    shown = getattr(task, "shown_question", None)
    if callable(shown):
        return str(shown(doc.fields))
    question = doc.fields.get("question")
    if isinstance(question, str) and question.strip():
        return question
    render = getattr(task, "question", None)
    if callable(render):
        return str(render(doc.fields))
    prompt = doc.fields.get("prompt")
    return str(prompt) if prompt is not None else ""


@dataclass(frozen=True)
class Flip:
    """A question one checkpoint got right and the other wrong."""

    task: str
    subject: str | None
    doc_id: int
    direction: str  # "regressed": baseline right, candidate wrong; "fixed": the reverse
    question: str
    target: str
    baseline_prediction: str
    candidate_prediction: str
    baseline_response: str | None
    candidate_response: str | None
    choices: list[str] | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def find_flips(result: SweepResult, baseline: str, candidate: str) -> list[Flip]:
    """Questions that changed between ``baseline`` and ``candidate``: regressions first."""
    if result.scores_only:
        raise ComparisonError("flips show the questions: read the stored rows in full")
    by_key = {(r.checkpoint.reference, r.task): r for r in result.results}
    references = [c.reference for c in result.checkpoints]
    for name in (baseline, candidate):
        if name not in references:
            raise ComparisonError(
                f"{name!r} is not one of the checkpoints: {', '.join(references)}"
            )
    flips: list[Flip] = []
    task_of = {name: run.task for name, run in result.task_runs.items()}
    for task in result.task_runs:
        base, cand = by_key[(baseline, task)], by_key[(candidate, task)]
        for doc, b, c in zip(base.documents, base.scored, cand.scored, strict=True):
            if b.correct == c.correct:
                continue
            flips.append(
                Flip(
                    task=task,
                    subject=doc.subject,
                    doc_id=doc.doc_id,
                    direction="regressed" if b.correct else "fixed",
                    question=shown_question(task_of[task], doc),
                    target=b.target,
                    baseline_prediction=b.prediction,
                    candidate_prediction=c.prediction,
                    baseline_response=b.response,
                    candidate_response=c.response,
                    choices=list(doc.fields["choices"]) if "choices" in doc.fields else None,
                )
            )
    flips.sort(key=lambda f: (f.direction != "regressed", f.task, f.subject or "", f.doc_id))
    return flips
