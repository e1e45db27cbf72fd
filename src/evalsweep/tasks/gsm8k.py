"""GSM8K: grade-school math word problems, answered by free generation.

Matches lm-evaluation-harness 0.4.x ``gsm8k`` (``tasks/gsm8k/gsm8k.yaml``,
version 3.0): "Question: ...\\nAnswer:" prompts, 5 few-shot examples drawn
from ``train`` by lm-eval's default sampler (one ``random.Random(1234)``
drawing ``sample(train, 5)`` per test document, in document order), greedy
decoding up to 256 tokens with stop sequences, and ``exact_match`` under
both the ``strict-match`` and ``flexible-extract`` filters.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsweep.errors import DataError
from evalsweep.requests import GenerationRequest, LoglikelihoodResult
from evalsweep.tasks._aggregate import mean_per_metric
from evalsweep.tasks._base import (
    AggregateScore,
    ChatPrompt,
    DataSource,
    Document,
    LabelNoise,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    TaskData,
    TaskDefaults,
)
from evalsweep.tasks._choice import prompt_turns
from evalsweep.tasks._data import load_hub_split, read_jsonl

FEWSHOT_SEED = 1234
UNTIL = ("Question:", "</s>", "<|im_end|>")
MAX_GEN_TOKS = 256
INVALID = "[invalid]"
STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORED = (",", "\\$", "(?s).*#### ", "\\.$")


def question_text(row: Mapping[str, Any]) -> str:
    """lm-eval's ``doc_to_text``: ``"Question: {{question}}\\nAnswer:"``."""
    return f"Question: {row['question']}\nAnswer:"


def build_context(shots: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> str:
    examples = "".join(question_text(shot) + " " + shot["answer"] + "\n\n" for shot in shots)
    return examples + question_text(row)


def extract(response: str, pattern: re.Pattern[str], group_select: int) -> str:
    """lm-eval's ``regex`` filter followed by ``take_first``."""
    matches = pattern.findall(response)
    if not matches:
        return INVALID
    match = matches[group_select]
    if isinstance(match, tuple):
        non_empty = [part for part in match if part]
        match = non_empty[0] if non_empty else INVALID
    return str(match).strip()


def exact_match(prediction: str, reference: str) -> float:
    """lm-eval's ``exact_match`` with GSM8K's settings (regexes ignored, case-insensitive)."""
    for pattern in IGNORED:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    return float(prediction.lower() == reference.lower())


class GSM8K(TaskDefaults):
    """The ``gsm8k`` task."""

    name = "gsm8k"
    version = "lm-eval gsm8k v3.0"
    default_num_fewshot = 5
    #: About 1.7% of GSM8K's problems have disputed labels (dataset card, Cobbe et al.,
    #: appendix A).
    label_noise = LabelNoise("GSM8K", 0.017)
    metrics = (MetricSpec("exact_match,strict-match"), MetricSpec("exact_match,flexible-extract"))

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        if source.data_dir is None:
            test = load_hub_split("openai/gsm8k", "main", "test")[:limit]
            train = load_hub_split("openai/gsm8k", "main", "train")
        else:
            folder = Path(source.data_dir) / "gsm8k"
            test = read_jsonl(folder / "test.jsonl", ("question", "answer"), limit)
            train = read_jsonl(folder / "train.jsonl", ("question", "answer"))
        documents = [Document(str(i), i, row) for i, row in enumerate(test)]
        return TaskData(documents, {"train": train}, source.describe())

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        # One generator for the whole task, drawn in document order: document i
        # gets the i-th draw, so --limit N keeps the first N documents' prompts.
        rnd = random.Random(FEWSHOT_SEED)
        pool = list(data.fewshot_pool["train"])
        if num_fewshot > len(pool):
            raise DataError(
                f"gsm8k: {num_fewshot}-shot needs {num_fewshot} training rows, found {len(pool)}"
            )
        prepared = []
        for doc in data.documents:
            shots = rnd.sample(pool, num_fewshot) if num_fewshot > 0 else []
            request = GenerationRequest(build_context(shots, doc.fields), UNTIL, MAX_GEN_TOKS)
            turns = prompt_turns(
                "", [(question_text(s), s["answer"]) for s in shots], question_text(doc.fields)
            )
            prepared.append(PreparedDocument(doc, (request,), ChatPrompt(turns)))
        return prepared

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        response = str(responses[0])
        answer = str(document.fields["answer"])
        filtered = {
            "strict-match": extract(response, STRICT, 0),
            "flexible-extract": extract(response, FLEXIBLE, -1),
        }
        metrics = {
            f"exact_match,{name}": exact_match(value, answer) for name, value in filtered.items()
        }
        target = answer.split("####")[-1].strip()
        return ScoredDocument(
            target=target,
            prediction=filtered["strict-match"],
            metrics=metrics,
            correct=metrics["exact_match,strict-match"] == 1.0,
            response=response,
            details={"filtered": filtered},
        )

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        return mean_per_metric([spec.key for spec in self.metrics], scored)
