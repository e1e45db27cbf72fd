"""Run a sweep: every checkpoint on every task, reusing whatever the store holds.

The order of work is chosen so that mistakes cost nothing: every reference
is resolved and every task's data is read and turned into prompts before any
model is loaded. Then each checkpoint is loaded once (and only if something
is missing from the store), its requests are answered in chunks, and each
chunk's scores are committed in one transaction, so an interrupted sweep
resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from evalsweep.checkpoints import ResolvedCheckpoint, resolve_checkpoints
from evalsweep.engine._cache_key import backend_cache_key, task_cache_key
from evalsweep.engine._chat import ChatOptions, load_chat_template, render_documents
from evalsweep.errors import CheckpointError, TaskError
from evalsweep.models import Backend, BackendOptions, load_backend
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.store import SampleRecord, Store
from evalsweep.tasks import (
    AggregateScore,
    DataSource,
    Document,
    PreparedDocument,
    ScoredDocument,
    Task,
    expand_suites,
    get_task,
)

#: Requests answered between two commits to the store.
LOGLIKELIHOOD_CHUNK = 2048
GENERATION_CHUNK = 128


class Progress(Protocol):
    """Where the engine reports progress; the CLI shows it as bars."""

    def start(self, label: str, total: int) -> None: ...
    def advance(self, count: int) -> None: ...
    def finish(self) -> None: ...
    def note(self, message: str) -> None: ...


class SilentProgress:
    def start(self, label: str, total: int) -> None: ...
    def advance(self, count: int) -> None: ...
    def finish(self) -> None: ...
    def note(self, message: str) -> None: ...


@dataclass(frozen=True)
class SweepSpec:
    """What to run: the options of ``evalsweep run`` that change the work."""

    checkpoints: Sequence[str]
    tasks: Sequence[str | Task]
    data_dir: str | None = None
    limit: int | None = None
    num_fewshot: int | None = None
    backend: str = "hf"
    options: BackendOptions = field(default_factory=BackendOptions)
    chat: ChatOptions = field(default_factory=ChatOptions)
    #: The identities the checkpoints must resolve to, in order, separated by spaces (an
    #: approved agent job's: what the person approved is what runs); ``None``: any.
    expect_identities: str | None = None
    #: The :func:`work_digest` the planned sweep must have (an approved agent job's: the
    #: prompts it reads are the ones approved); ``None``: any.
    expect_work: str | None = None


@dataclass
class TaskRun:
    """One task's prompts, shared by all checkpoints unless a chat template renders them."""

    task: Task
    num_fewshot: int
    settings_key: str
    prepared: list[PreparedDocument]
    settings: dict[str, Any] = field(default_factory=dict)
    #: prompts rendered per checkpoint identity (``--apply-chat-template``)
    rendered: dict[str, list[PreparedDocument]] = field(default_factory=dict)

    def prepared_for(self, checkpoint: ResolvedCheckpoint) -> list[PreparedDocument]:
        return self.rendered.get(checkpoint.identity, self.prepared)


@dataclass
class CheckpointTaskResult:
    """A checkpoint's scored documents and aggregates on one task."""

    checkpoint: ResolvedCheckpoint
    task: str
    documents: list[Document]
    scored: list[ScoredDocument]
    aggregates: list[AggregateScore]
    computed: int


@dataclass
class SweepResult:
    run_id: str
    spec: SweepSpec
    checkpoints: list[ResolvedCheckpoint]
    task_runs: dict[str, TaskRun]
    backend_key: str
    backend_settings: dict[str, Any]
    results: list[CheckpointTaskResult]
    backends: dict[str, dict[str, Any]]
    seconds: float
    origin: str = "run"  # "run": computed now (or reused); otherwise where the results came from
    scores_only: bool = False
    """Read back with scores only (``stored_sweep(scores_only=True)``): no question texts."""


def plan_sweep(spec: SweepSpec) -> tuple[list[ResolvedCheckpoint], dict[str, TaskRun]]:
    """Resolve references and build every prompt; raises before any compute."""
    if not spec.tasks:
        raise TaskError("no tasks given (use --tasks mmlu,gsm8k)")
    if spec.limit is not None and spec.limit < 1:
        raise TaskError(f"--limit must be at least 1, got {spec.limit}")
    if spec.num_fewshot is not None and spec.num_fewshot < 0:
        raise TaskError(f"--num-fewshot must be 0 or more, got {spec.num_fewshot}")
    # A suite (--tasks leaderboard) stands for its tasks at its own few-shot counts.
    plan: dict[str, tuple[Task, int | None]] = {}
    for given in dict.fromkeys(spec.tasks):
        if not isinstance(given, str):
            plan.setdefault(given.name, (given, None))
            continue
        for name, suite_shots in expand_suites([given], spec.num_fewshot):
            task = get_task(name)
            plan.setdefault(task.name, (task, suite_shots))
    checkpoints = resolve_checkpoints(list(spec.checkpoints))
    if spec.expect_identities is not None:
        expected = spec.expect_identities.split()
        for index, checkpoint in enumerate(checkpoints):
            wanted = expected[index] if index < len(expected) else "(none)"
            if checkpoint.identity != wanted or len(expected) != len(checkpoints):
                raise CheckpointError(
                    f"checkpoint {checkpoint.reference!r} is not the one approved: it resolves "
                    f"to {checkpoint.identity} now, the approval was for {wanted}; quote again"
                )
    source = DataSource(spec.data_dir)
    task_runs = {}
    for task, suite_shots in plan.values():
        if suite_shots is not None:
            shots = suite_shots
        else:
            shots = task.default_num_fewshot if spec.num_fewshot is None else spec.num_fewshot
        data = task.load(source, spec.limit)
        key = task_cache_key(task, shots, spec.chat)
        task_runs[task.name] = TaskRun(
            task, shots, key.key, task.prepare(data, shots), dict(key.settings)
        )
    if spec.chat.active:
        for checkpoint in checkpoints:
            template = (
                load_chat_template(checkpoint, spec.options.trust_remote_code)
                if spec.chat.apply_chat_template
                else None
            )
            for run in task_runs.values():
                run.rendered[checkpoint.identity] = render_documents(
                    run.task.name, run.prepared, spec.chat, template
                )
    if spec.expect_work is not None and work_digest(checkpoints, task_runs) != spec.expect_work:
        raise TaskError(
            "the sweep's prompts are not the ones approved (a task file or its data changed "
            "since the quote); quote again"
        )
    return checkpoints, task_runs


def work_digest(checkpoints: Sequence[ResolvedCheckpoint], task_runs: dict[str, TaskRun]) -> str:
    """One hash of a planned sweep's work: every checkpoint's identity, every task's settings
    and every request's key, in order. What an agent's quote is priced and approved on, and
    what the approved job checks again (``expect_work``) after it has read every file."""
    digest = hashlib.sha256()
    for checkpoint in checkpoints:
        digest.update(checkpoint.identity.encode())
    for run in task_runs.values():
        digest.update(run.settings_key.encode())
        for prepared in run.prepared:
            for request in prepared.requests:
                digest.update(request.key().encode())
    return digest.hexdigest()


def backend_settings(spec: SweepSpec) -> dict[str, Any]:
    """The backend part of the cache key, as a mapping (see :mod:`evalsweep.engine._cache_key`)."""
    return dict(backend_cache_key(spec).settings)


def run_sweep(spec: SweepSpec, store: Store, progress: Progress | None = None) -> SweepResult:
    """Score every checkpoint on every task; return per-document results and aggregates."""
    progress = progress or SilentProgress()
    began = time.time()
    checkpoints, task_runs = plan_sweep(spec)
    cache_key = backend_cache_key(spec)
    settings, backend_key = dict(cache_key.settings), cache_key.key
    store.remember_key(backend_key, "backend", settings)
    for run in task_runs.values():
        store.remember_key(run.settings_key, "task", run.settings)
    results: list[CheckpointTaskResult] = []
    backends: dict[str, dict[str, Any]] = {}
    for checkpoint in checkpoints:
        store.remember_reference(checkpoint.reference, checkpoint.to_dict())
        backend: Backend | None = None
        try:
            for run in task_runs.values():
                prepared = run.prepared_for(checkpoint)
                keys = [p.document.key for p in prepared]
                stored = store.fetch(
                    checkpoint.identity, backend_key, run.task.name, run.settings_key, keys
                )
                missing = [
                    p
                    for p in prepared
                    if p.document.key not in stored
                    or stored[p.document.key].request_hash != _request_hash(p)
                ]
                if missing:
                    if backend is None:
                        progress.note(f"loading {checkpoint.reference}")
                        backend = load_backend(spec.backend, checkpoint, spec.options)
                        backends[checkpoint.reference] = dict(backend.describe())
                    _answer(backend, checkpoint, run, missing, backend_key, store, progress)
                    # Again after answering: the description counts what each path served.
                    backends[checkpoint.reference] = dict(backend.describe())
                stored = store.fetch(
                    checkpoint.identity, backend_key, run.task.name, run.settings_key, keys
                )
                documents = [p.document for p in prepared]
                if run.task.rescore_stored:
                    scored = _rescore(run, prepared, [stored[key] for key in keys], store)
                else:  # scoring runs code (HumanEval): keep the stored verdicts
                    scored = [_scored(stored[key]) for key in keys]
                aggregates = run.task.aggregate(documents, scored)
                results.append(
                    CheckpointTaskResult(
                        checkpoint, run.task.name, documents, scored, aggregates, len(missing)
                    )
                )
        finally:
            if backend is not None:
                backend.close()
    for run in task_runs.values():
        run.task.close()
    return SweepResult(
        run_id=uuid.uuid4().hex[:12],
        spec=spec,
        checkpoints=checkpoints,
        task_runs=task_runs,
        backend_key=backend_key,
        backend_settings=settings,
        results=results,
        backends=backends,
        seconds=time.time() - began,
    )


def _answer(
    backend: Backend,
    checkpoint: ResolvedCheckpoint,
    run: TaskRun,
    missing: list[PreparedDocument],
    backend_key: str,
    store: Store,
    progress: Progress,
) -> None:
    """Answer the missing documents' requests chunk by chunk, committing each chunk."""
    total = sum(len(p.requests) for p in missing)
    progress.start(f"{checkpoint.reference} · {run.task.name}", total)
    try:
        for chunk in _chunks(missing):
            flat = [request for p in chunk for request in p.requests]
            answers = _ask(backend, flat, progress.advance)
            records = []
            offset = 0
            for prepared in chunk:
                count = len(prepared.requests)
                responses = answers[offset : offset + count]
                offset += count
                scored = _with_prompt(run, prepared, run.task.score(prepared.document, responses))
                records.append(_record(checkpoint, backend_key, run, prepared, responses, scored))
            store.write(records)
    finally:
        progress.finish()


def _ask(backend: Backend, requests: list[Any], advance: Any) -> list[Any]:
    """Send each kind of request to the backend in one call, keeping request order."""
    answers: list[Any] = [None] * len(requests)
    for kind, method in (
        (LoglikelihoodRequest, backend.loglikelihood),
        (GenerationRequest, backend.generate_until),
    ):
        indices = [i for i, r in enumerate(requests) if isinstance(r, kind)]
        if indices:
            for i, answer in zip(
                indices, method([requests[i] for i in indices], advance), strict=True
            ):
                answers[i] = answer
    return answers


def _chunks(prepared: list[PreparedDocument]) -> list[list[PreparedDocument]]:
    chunks: list[list[PreparedDocument]] = [[]]
    size = 0
    for item in prepared:
        limit = (
            GENERATION_CHUNK
            if isinstance(item.requests[0], GenerationRequest)
            else LOGLIKELIHOOD_CHUNK
        )
        if size + len(item.requests) > limit and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += len(item.requests)
    return [c for c in chunks if c]


def _request_hash(prepared: PreparedDocument) -> str:
    import hashlib

    digest = hashlib.sha256()
    for request in prepared.requests:
        digest.update(request.key().encode())
    return digest.hexdigest()


def _record(
    checkpoint: ResolvedCheckpoint,
    backend_key: str,
    run: TaskRun,
    prepared: PreparedDocument,
    responses: list[Any],
    scored: ScoredDocument,
) -> SampleRecord:
    doc = prepared.document
    return SampleRecord(
        checkpoint=checkpoint.identity,
        backend=backend_key,
        task=run.task.name,
        settings=run.settings_key,
        doc_key=doc.key,
        doc_id=doc.doc_id,
        subject=doc.subject,
        request_hash=_request_hash(prepared),
        requests=[_request_json(r) for r in prepared.requests],
        responses=[_response_json(r) for r in responses],
        target=scored.target,
        prediction=scored.prediction,
        correct=scored.correct,
        response=scored.response,
        metrics=dict(scored.metrics),
        details=dict(scored.details),
        document=dict(doc.fields),
    )


def _request_json(request: Any) -> dict[str, Any]:
    if isinstance(request, LoglikelihoodRequest):
        return {
            "kind": request.kind,
            "context": request.context,
            "continuation": request.continuation,
        }
    return {
        "kind": request.kind,
        "context": request.context,
        "until": list(request.until),
        "max_gen_toks": request.max_gen_toks,
    }


def _response_json(response: Any) -> Any:
    if isinstance(response, LoglikelihoodResult):
        return [response.logprob, response.is_greedy]
    return response


def _with_prompt(
    run: TaskRun, prepared: PreparedDocument, scored: ScoredDocument
) -> ScoredDocument:
    """Rendered prompts differ per checkpoint: keep the one each sample was asked with."""
    if not run.rendered:
        return scored
    return replace(scored, details={**scored.details, "prompt": prepared.requests[0].context})


def _rescore(
    run: TaskRun, prepared: list[PreparedDocument], records: list[SampleRecord], store: Store
) -> list[ScoredDocument]:
    """Score stored raw responses again with today's document and scoring code.

    The model's answers are what is expensive and what the store keeps; the
    score is recomputed every time, so a corrected gold label or a scoring fix
    applies to stored results too. Rows whose score changed are rewritten.
    """
    scored: list[ScoredDocument] = []
    changed: list[SampleRecord] = []
    for item, record in zip(prepared, records, strict=True):
        document = item.document
        responses = [_response_from_json(r) for r in record.responses]
        result = _with_prompt(run, item, run.task.score(document, responses))
        scored.append(result)
        if dict(result.metrics) != record.metrics or result.target != record.target:
            changed.append(
                replace(
                    record,
                    target=result.target,
                    prediction=result.prediction,
                    correct=result.correct,
                    metrics=dict(result.metrics),
                    details=dict(result.details),
                    document=dict(document.fields),
                )
            )
    if changed:
        store.write(changed)
    return scored


def _response_from_json(response: Any) -> Any:
    if isinstance(response, list):
        return LoglikelihoodResult(float(response[0]), bool(response[1]))
    return response


def _scored(record: SampleRecord) -> ScoredDocument:
    return ScoredDocument(
        target=record.target,
        prediction=record.prediction,
        metrics=record.metrics,
        correct=record.correct,
        response=record.response,
        details=record.details,
    )
