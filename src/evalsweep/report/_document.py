"""The machine-readable result (``--json``, ``results.json``) and ``samples.jsonl``.

The document's types, and its one way to JSON and back, are in :mod:`._schema`.

The document records how the numbers were made: checkpoints with their
resolved identities, task and backend settings, versions and hardware, so a
result can be trusted and reproduced without the terminal it was shown in.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalsweep import __version__
from evalsweep._atomic import atomic_write
from evalsweep.engine import SweepResult
from evalsweep.errors import ConfigError
from evalsweep.jsonl import dumps_lines
from evalsweep.report._schema import (
    CheckpointEntry,
    ResultDocument,
    ResultRow,
    Settings,
    TaskSettings,
    document_json,
)
from evalsweep.stats import Comparison
from evalsweep.store import environment


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def results_document(
    result: SweepResult,
    command: Sequence[str] = (),
    comparisons: Sequence[Comparison] = (),
    *,
    steps: dict[str, int] | None = None,
    previous: Sequence[Comparison] | None = None,
) -> ResultDocument:
    """The typed result document of ``result`` (JSON through :mod:`._schema` only);
    ``steps`` and ``previous`` for checkpoints that are one training run."""
    spec = result.spec
    return ResultDocument(
        run_id=result.run_id,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        evalsweep_version=__version__,
        command=[str(part) for part in command],
        settings=Settings(
            backend=dict(result.backend_settings),
            options=asdict(spec.options),
            limit=spec.limit,
            data=result.origin
            if result.origin != "run"
            else (f"local:{spec.data_dir}" if spec.data_dir else "hub"),
            tasks={
                name: TaskSettings(
                    version=run.task.version,
                    num_fewshot=run.num_fewshot,
                    n_documents=len(run.prepared)
                    or max((len(r.documents) for r in result.results if r.task == name), default=0),
                    settings_key=run.settings_key,
                )
                for name, run in result.task_runs.items()
            },
        ),
        checkpoints=[
            CheckpointEntry(c, dict(result.backends.get(c.reference, {"loaded": False})))
            for c in result.checkpoints
        ],
        results=[
            ResultRow(
                checkpoint=item.checkpoint.reference,
                identity=item.checkpoint.identity,
                task=item.task,
                metric=agg.metric,
                level=agg.level,
                group=agg.group,
                value=_number(agg.value),
                stderr=_number(agg.stderr),
                n=agg.n,
            )
            for item in result.results
            for agg in item.aggregates
        ],
        computed_documents={
            f"{item.checkpoint.reference}::{item.task}": item.computed for item in result.results
        },
        comparisons=list(comparisons),
        environment=environment(),
        seconds=round(result.seconds, 3),
        steps=dict(steps) if steps else None,
        previous=list(previous) if previous is not None else None,
    )


def best_choice(
    document: ResultDocument, best_by: Sequence[str] | None = None
) -> tuple[str, list[tuple[str, str]]] | None:
    """The best checkpoint of a run by the tasks ``best_by`` (default: every task): the
    highest mean, over those tasks, of each task's headline metric (its first) as the
    document shows it; with the (task, metric) rows it was chosen by. ``None`` when the
    checkpoints are not one run, or no checkpoint has a value on every chosen task.

    Raises:
        ConfigError: a task of ``best_by`` the document has no result for.
    """
    from evalsweep.errors import ConfigError

    if not document.steps or len(document.references) < 2:
        return None
    rows = [r for r in document.results if r.level == "task"]
    headline: dict[str, str] = {}
    for row in rows:
        headline.setdefault(row.task, row.metric)
    chosen = list(best_by) if best_by else list(headline)
    unknown = [t for t in chosen if t not in headline]
    if unknown:
        raise ConfigError(
            f"--best-by {unknown[0]!r} is not a task of these results: {', '.join(headline)}"
        )
    picked = [(task, headline[task]) for task in dict.fromkeys(chosen)]
    values = {(r.checkpoint, r.task, r.metric): r.value for r in rows}
    means: dict[str, float] = {}
    for reference in document.references:
        found = [values.get((reference, task, metric)) for task, metric in picked]
        if all(v is not None for v in found):
            means[reference] = sum(v for v in found if v is not None) / len(found)
    if not means:
        return None
    best = max(means, key=means.__getitem__)  # the earliest of equal ones
    return best, picked


def with_best(
    document: ResultDocument, result: SweepResult, best_by: Sequence[str] | None = None
) -> ResultDocument:
    """``document`` with its run's best checkpoint (by ``best_by``, see :func:`best_choice`)
    tested against each other checkpoint (:func:`evalsweep.comparison.compare_best`);
    unchanged when the checkpoints are not one run."""
    import dataclasses

    from evalsweep.comparison import compare_best

    choice = best_choice(document, best_by)
    if choice is None:
        return document
    best, rows = choice
    return dataclasses.replace(document, best=compare_best(result, best, rows))


def sample_lines(result: SweepResult) -> Iterator[dict[str, Any]]:
    """One record per (checkpoint, task, document), in task and document order."""
    for item in result.results:
        for doc, scored in zip(item.documents, item.scored, strict=True):
            line: dict[str, Any] = {
                "checkpoint": item.checkpoint.reference,
                "identity": item.checkpoint.identity,
                "task": item.task,
                "doc_id": doc.doc_id,
            }
            if doc.subject is not None:
                line["subject"] = doc.subject
            if "question" in doc.fields:
                line["question"] = doc.fields["question"]
            if "choices" in doc.fields:
                line["choices"] = list(doc.fields["choices"])
            line.update(
                target=scored.target,
                prediction=scored.prediction,
                correct=scored.correct,
                metrics=dict(scored.metrics),
            )
            if scored.response is not None:
                line["response"] = scored.response
            line.update(scored.details)
            yield line


def write_outputs(out_dir: Path, document: ResultDocument, result: SweepResult) -> None:
    """Write ``results.json`` and ``samples.jsonl`` atomically (temp file, then rename)."""
    _make_folder(out_dir)
    _atomic_write(out_dir / "results.json", document_json(document) + "\n")
    _atomic_write(out_dir / "samples.jsonl", dumps_lines(sample_lines(result)))


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically, creating its folder."""
    _make_folder(path.parent)
    _atomic_write(path, text)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder {folder} ({exc.strerror})") from None


def _atomic_write(path: Path, text: str | bytes) -> None:
    """``path`` written whole (:mod:`evalsweep._atomic`), readable as an ordinary ``open()``
    would leave it (0666 less the umask). A path that cannot be written is one line."""
    try:
        atomic_write(path, text, mode=0o666)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({exc.strerror})") from None
