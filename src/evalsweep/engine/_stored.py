"""Rebuild a sweep's results from the store alone, with no model call.

``evalsweep compare`` and ``evalsweep flips`` work on checkpoints evaluated in
different runs or on different days. They need each checkpoint's rows for the
same task settings and backend settings; when the stored settings differ,
they refuse and say how, rather than compare unlike with unlike.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from evalsweep.checkpoints import ResolvedCheckpoint, resolve_checkpoint
from evalsweep.engine._sweep import (
    CheckpointTaskResult,
    SweepResult,
    SweepSpec,
    TaskRun,
    _scored,
)
from evalsweep.errors import CheckpointError, ComparisonError, TaskError
from evalsweep.store import SampleRecord, ScoreRecord, Store
from evalsweep.tasks import (
    Document,
    ImportedTask,
    ScoredDocument,
    Task,
    expand_suites,
    get_task,
)


def stored_sweep(
    store: Store,
    references: Sequence[str],
    tasks: Sequence[str],
    num_fewshot: int | None = None,
    *,
    scores_only: bool = False,
    identities: Sequence[str] | None = None,
) -> SweepResult:
    """The stored results of ``references`` on ``tasks``, on the documents all of them have.

    ``scores_only`` reads only what statistics read (:meth:`Store.scores`): each
    document's key, id and subject, and each result's metrics and correctness; the
    documents' rows, targets, predictions and responses are left empty. Aggregates and
    comparisons are the same numbers as from the full rows (a task's ``aggregate`` reads
    only subjects and metrics); flips, which show the questions, need the full rows.

    ``identities``: what each reference was pinned to (an approved job's): its stored
    results are read under that identity, and nothing is resolved again.
    """
    began = time.time()
    if identities is not None:
        if len(identities) != len(references):
            raise CheckpointError(
                f"{len(identities)} identities pinned for {len(references)} checkpoints"
            )
        checkpoints = [
            _pinned(store, ref, identity)
            for ref, identity in zip(references, identities, strict=True)
        ]
    else:
        checkpoints = [_identity(store, ref) for ref in references]
    task_runs: dict[str, TaskRun] = {}
    results: list[CheckpointTaskResult] = []
    backend_key = ""
    for name, suite_shots in expand_suites(tasks, num_fewshot):
        try:
            task: Task | None = get_task(name)
        except TaskError:  # not evalsweep's: results imported from another harness?
            task = None
        task_name = task.name if task is not None else name
        wanted = num_fewshot if suite_shots is None else suite_shots
        try:
            backend_key, settings = _common_settings(store, checkpoints, task_name, wanted)
        except ComparisonError:
            if task is None:
                get_task(name)  # neither evalsweep's nor imported: the "unknown task" error
            raise
        stored_settings = store.lookup_key(settings) or {}
        if task is None or stored_settings.get("source") == "lm-eval":
            task = ImportedTask(stored_settings)
        read = store.scores if scores_only else store.records
        shared: dict[tuple[bool, int], ScoredDocument] = {}
        per_checkpoint: dict[str, dict[str, SampleRecord | ScoreRecord]] = {
            c.identity: {
                r.doc_key: r
                for r in read(c.identity, task.name, backend_key, settings)
                if not name.startswith("mmlu_") or r.subject == name[5:]
            }
            for c in checkpoints
        }
        common = set.intersection(*(set(rows) for rows in per_checkpoint.values()))
        if not common:
            raise ComparisonError(f"{name}: the checkpoints have no stored questions in common")
        first = per_checkpoint[checkpoints[0].identity]
        keys = sorted(common, key=lambda k: (first[k].subject or "", first[k].doc_id))
        documents = [
            Document(k, first[k].doc_id, _fields(first[k]), first[k].subject) for k in keys
        ]
        shots = stored_settings.get("num_fewshot", wanted)
        task_runs[task.name] = TaskRun(task, int(shots or 0), settings, [])
        for checkpoint in checkpoints:
            rows = per_checkpoint[checkpoint.identity]
            scored = [
                _scored(row) if isinstance(row, SampleRecord) else _score(row, shared)
                for row in (rows[k] for k in keys)
            ]
            results.append(
                CheckpointTaskResult(
                    checkpoint, task.name, documents, scored, task.aggregate(documents, scored), 0
                )
            )
    backend = store.lookup_key(backend_key) or {}
    return SweepResult(
        run_id=f"compare-{int(began)}",
        spec=SweepSpec(checkpoints=list(references), tasks=list(tasks), num_fewshot=num_fewshot),
        checkpoints=checkpoints,
        task_runs=task_runs,
        backend_key=backend_key,
        backend_settings=dict(backend),
        results=results,
        backends={},
        seconds=time.time() - began,
        origin=f"stored results in {store.path}",
        scores_only=scores_only,
    )


def _fields(row: SampleRecord | ScoreRecord) -> dict[str, Any]:
    return row.document if isinstance(row, SampleRecord) else {}


def _score(row: ScoreRecord, shared: dict[tuple[bool, int], ScoredDocument]) -> ScoredDocument:
    """A scores-only result; rows with equal scores share one (frozen, read-only) object."""
    key = (row.correct, id(row.metrics))  # Store.scores hands out one dict per metric text
    found = shared.get(key)
    if found is None:
        found = shared[key] = ScoredDocument(
            target="", prediction="", metrics=row.metrics, correct=row.correct
        )
    return found


def _pinned(store: Store, reference: str, identity: str) -> ResolvedCheckpoint:
    """``reference`` as it was pinned to ``identity``: what the store recorded of it when it
    resolved so, else the identity alone (nothing is read from the folder or the Hub)."""
    known = store.lookup_reference(reference)
    if known is not None and known.get("identity") == identity:
        return ResolvedCheckpoint.from_dict(known)
    kind = "hub" if identity.startswith("hub:") else "local"
    return ResolvedCheckpoint(reference, kind, reference, None, identity)


def _identity(store: Store, reference: str) -> ResolvedCheckpoint:
    """Resolve now if possible (a local folder), else use what the reference resolved to last.

    A reference imported from another harness's logs that could not be resolved
    then keeps the identity it was imported under.
    """
    known = store.lookup_reference(reference)
    if known is not None and known.get("kind") == "imported":
        return ResolvedCheckpoint(**known)
    try:
        return resolve_checkpoint(reference)
    except CheckpointError as exc:
        known = store.lookup_reference(reference)
        if known is None:
            raise CheckpointError(f"{exc}; and the store has no results for it") from exc
        return ResolvedCheckpoint.from_dict(known)


def _common_settings(
    store: Store, checkpoints: Sequence[ResolvedCheckpoint], task: str, num_fewshot: int | None
) -> tuple[str, str]:
    """The (backend, task settings) pair every checkpoint has rows for; the fullest one wins."""
    options: list[dict[tuple[str, str], int]] = []
    for checkpoint in checkpoints:
        found = {
            (backend, settings): count
            for backend, settings, count in store.settings_of(checkpoint.identity, task)
            if num_fewshot is None
            or (store.lookup_key(settings) or {}).get("num_fewshot") == num_fewshot
        }
        if not found:
            raise ComparisonError(
                f"{task}: no stored results for {checkpoint.reference}"
                + (f" with {num_fewshot}-shot" if num_fewshot is not None else "")
            )
        options.append(found)
    shared = set.intersection(*(set(o) for o in options))
    if not shared:
        described = "; ".join(
            f"{c.reference}: " + ", ".join(_describe(store, key) for key in o)
            for c, o in zip(checkpoints, options, strict=True)
        )
        raise ComparisonError(f"{task}: settings differ between checkpoints ({described})")
    return max(shared, key=lambda key: min(o[key] for o in options))


def _describe(store: Store, key: tuple[str, str]) -> str:
    backend = store.lookup_key(key[0]) or {}
    settings = store.lookup_key(key[1]) or {}
    return (
        f"{settings.get('num_fewshot')}-shot {settings.get('version', '')} on "
        f"{backend.get('backend')} {backend.get('dtype')} {backend.get('device_type')}"
    )
