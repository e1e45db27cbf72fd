"""What a benchmark is, to the rest of evalsweep.

A task turns benchmark data into requests and turns the model's answers back
into per-question scores; it never sees which backend answered. Tasks are
plain Python modules that satisfy :class:`Task`, with the prompt visible in
one function, so that matching lm-evaluation-harness can be checked by eye.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from evalsweep.requests import LoglikelihoodResult, Request

NO_CATEGORIES: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Document:
    """One test question.

    Attributes:
        key: unique within the task (``"abstract_algebra/12"``, ``"12"``); results are keyed by it.
        doc_id: index within its test file (per subject for MMLU), as lm-eval numbers it.
        fields: the raw row.
        subject: the MMLU subject (or other sub-benchmark), else None.
    """

    key: str
    doc_id: int
    fields: Mapping[str, Any]
    subject: str | None = None


@dataclass(frozen=True)
class Turn:
    """One message of a prompt, as lm-eval's ``Message``.

    ``delimiter`` is what follows the content when the prompt is plain text
    (the target delimiter after a question, the few-shot delimiter after an
    answer); a chat template drops it.
    """

    role: str  # "system", "user" or "assistant"
    content: str
    delimiter: str = ""


@dataclass(frozen=True)
class ChatPrompt:
    """A document's prompt as turns, for checkpoints whose chat template renders it.

    Attributes:
        turns: system (description), few-shot question/answer pairs, then the question.
        continuations: per log-likelihood request, its continuation under a chat
            template (lm-eval drops the target delimiter there); empty for generation.
    """

    turns: tuple[Turn, ...]
    continuations: tuple[str, ...] = ()

    def plain_text(self) -> str:
        return "".join(turn.content + turn.delimiter for turn in self.turns)


@dataclass(frozen=True)
class PreparedDocument:
    """A document with the exact requests the task sends for it.

    ``chat`` is set by tasks that support ``--apply-chat-template``: the same
    prompt as turns, rendered per checkpoint by the engine.
    """

    document: Document
    requests: tuple[Request, ...]
    chat: ChatPrompt | None = None


@dataclass(frozen=True)
class ScoredDocument:
    """A document's result: what was expected, what the model said, and its metric values."""

    target: str
    prediction: str
    metrics: Mapping[str, float]
    correct: bool
    response: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricSpec:
    """A metric a task reports; ``key`` is lm-eval's ``metric,filter`` name."""

    key: str
    higher_is_better: bool = True


@dataclass(frozen=True)
class AggregateScore:
    """A metric over a set of documents: the whole task (group None), a category or a subject."""

    metric: str
    value: float
    stderr: float
    n: int
    group: str | None = None
    level: str = "task"  # "task", "category" or "subject"


@runtime_checkable
class Task(Protocol):
    """A benchmark family. One module in :mod:`evalsweep.tasks` implements it per family.

    What the rest of evalsweep knows of a benchmark it learns here, never from its name.
    Two members are optional (:class:`TaskDefaults` has them; a task without them has
    neither, see :func:`evalsweep.tasks.benchmark_facts`):

    - ``label_noise`` (:class:`LabelNoise` or None): the benchmark's disputed labels; a
      paired difference within its band carries a caution in every comparison.
    - ``categories`` (subject -> category): how the report groups its subjects.
    """

    name: str
    version: str
    default_num_fewshot: int
    metrics: tuple[MetricSpec, ...]
    #: Whether stored responses are scored again with today's scoring code; False when
    #: scoring runs code (HumanEval, MBPP) or happened elsewhere (imported results).
    rescore_stored: bool

    def extra_settings(self) -> Mapping[str, object]:
        """Settings of this task instance that can change an answer or its score (cache key)."""
        ...

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        """Read test documents (first ``limit`` per file) and the few-shot pool."""
        ...

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        """Build every document's requests, in document order (few-shot draws depend on it)."""
        ...

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        """Score one document from its requests' responses, in request order."""
        ...

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        """Aggregate per-document metrics exactly as lm-eval does (values and stderr)."""
        ...

    def close(self) -> None:
        """Release what scoring started (a sandbox service); called once the sweep ends."""
        ...


@dataclass(frozen=True)
class LabelNoise:
    """A benchmark's share of disputed labels: on shared labels they can move a paired
    difference by up to about ``band``, so a smaller one should be checked against them."""

    benchmark: str  # as a person names it ("GSM8K")
    band: float


class TaskDefaults:
    """The :class:`Task` members most tasks share: rescored, no extra settings, nothing to
    close, no known label noise, no subject categories."""

    rescore_stored: bool = True
    label_noise: LabelNoise | None = None
    categories: Mapping[str, str] = NO_CATEGORIES

    def extra_settings(self) -> Mapping[str, object]:
        return {}

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class TaskData:
    """Loaded benchmark data: test documents plus the pool few-shot examples come from."""

    documents: list[Document]
    # Rows by split for most tasks; the code tasks keep their parsed problems here too.
    fewshot_pool: Mapping[str, Sequence[Any]]
    source: str


@dataclass(frozen=True)
class DataSource:
    """Where benchmark data comes from: a local folder laid out like the originals, or the Hub."""

    data_dir: str | None = None

    def describe(self) -> str:
        return f"local:{self.data_dir}" if self.data_dir else "hub"
