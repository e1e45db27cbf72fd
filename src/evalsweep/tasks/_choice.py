"""Multiple choice scored by log-likelihood, as lm-eval's ``output_type: multiple_choice``.

The prompt is lm-eval's ``fewshot_context``: an optional description, then
each example as ``question + target_delimiter + gold choice +
fewshot_delimiter``, then the question. Each choice is one request,
``(context, target_delimiter + choice)``. ``acc`` is the first maximum of the
log-likelihoods; ``acc_norm`` divides each by its choice's length in
characters (lm-eval 0.4's ``completion_len``: ``len(choice)``, not bytes).

Few-shot examples come from ``TaskData.fewshot_pool["fewshot"]``, or from
``["eval"]`` when the pool is the evaluated split itself (lm-eval's rule for a
dataset without a training split), which drops the document from its draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsweep.requests import LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.tasks._aggregate import mean_per_metric
from evalsweep.tasks._base import (
    AggregateScore,
    ChatPrompt,
    Document,
    PreparedDocument,
    ScoredDocument,
    TaskData,
    TaskDefaults,
    Turn,
)
from evalsweep.tasks._fewshot import FewshotSampler

Row = Mapping[str, Any]


def first_argmax(values: Sequence[float]) -> int:
    """Index of the first maximum, as ``np.argmax``."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def qa_turns(
    question: str, answer: str | None, target_delimiter: str, fewshot_delimiter: str
) -> list[Turn]:
    """lm-eval's ``build_qa_turn``: the question, then the answer when there is one."""
    if answer is None:
        return [Turn("user", question, "")]
    return [Turn("user", question, target_delimiter), Turn("assistant", answer, fewshot_delimiter)]


def prompt_turns(
    description: str,
    shots: Sequence[tuple[str, str]],
    question: str,
    target_delimiter: str = " ",
    fewshot_delimiter: str = "\n\n",
) -> tuple[Turn, ...]:
    """Description (a system turn), the (question, answer) examples, then the question."""
    turns: list[Turn] = [Turn("system", description)] if description else []
    for shot_question, shot_answer in shots:
        turns += qa_turns(shot_question, shot_answer, target_delimiter, fewshot_delimiter)
    turns += qa_turns(question, None, target_delimiter, fewshot_delimiter)
    return tuple(turns)


class MultipleChoiceTask(TaskDefaults):
    """Shared machinery; a subclass gives ``question``, ``choices`` and ``gold`` of a row."""

    name: str
    version: str
    default_num_fewshot = 0
    description = ""
    target_delimiter = " "
    fewshot_delimiter = "\n\n"
    fewshot_method = "default"
    #: lm-eval drops the document from its draw (drawing n + 1) when the few-shot
    #: split "equals" the test split, which includes both being unset (HellaSwag).
    fewshot_excludes_document = False

    def question(self, row: Row) -> str:
        raise NotImplementedError

    def choices(self, row: Row) -> list[str]:
        raise NotImplementedError

    def gold(self, row: Row) -> int:
        raise NotImplementedError

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        from_eval = "eval" in data.fewshot_pool
        sampler = FewshotSampler(
            self.name,
            data.fewshot_pool["eval" if from_eval else "fewshot"],
            self.fewshot_method,
            exclude_self=from_eval or self.fewshot_excludes_document,
        )
        prepared = []
        for doc in data.documents:
            shots = [
                (self.question(s), self.choices(s)[self.gold(s)])
                for s in sampler.draw(num_fewshot, doc.fields)
            ]
            turns = prompt_turns(
                self.description,
                shots,
                self.question(doc.fields),
                self.target_delimiter,
                self.fewshot_delimiter,
            )
            chat = ChatPrompt(turns, tuple(self.choices(doc.fields)))
            context = chat.plain_text()
            requests = tuple(
                LoglikelihoodRequest(context, self.target_delimiter + choice)
                for choice in self.choices(doc.fields)
            )
            prepared.append(PreparedDocument(doc, requests, chat))
        return prepared

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        results = [r for r in responses if isinstance(r, LoglikelihoodResult)]
        lls = [r.logprob for r in results]
        choices = self.choices(document.fields)
        gold = self.gold(document.fields)
        pred = first_argmax(lls)
        pred_norm = first_argmax([ll / len(c) for ll, c in zip(lls, choices, strict=True)])
        metrics = {"acc": float(pred == gold), "acc_norm": float(pred_norm == gold)}
        return ScoredDocument(
            target=choices[gold],
            prediction=choices[pred],
            metrics={k: v for k, v in metrics.items() if k in self.metric_keys()},
            correct=pred == gold,
            details={
                "logprobs": lls,
                "is_greedy": [r.is_greedy for r in results],
                "gold": gold,
                "pred": pred,
                "pred_norm": pred_norm,
            },
        )

    def metric_keys(self) -> tuple[str, ...]:
        return tuple(spec.key for spec in self.metrics)  # type: ignore[attr-defined]

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        return mean_per_metric(self.metric_keys(), scored)
