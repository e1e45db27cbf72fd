"""MMLU (Hendrycks et al.): 57 subjects of four-way multiple choice.

Matches lm-evaluation-harness 0.4.x ``mmlu`` (``tasks/mmlu/default``): a
per-subject description line, few-shot examples from ``dev`` (first n, in
order), choices " A".." D" scored by log-likelihood, ``acc`` per subject,
per category and overall, aggregated size-weighted with pooled standard
errors. One difference by design: evalsweep defaults to 5-shot (lm-eval's
YAML defaults to 0); the setting is recorded with every result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evalsweep.errors import DataError, TaskError
from evalsweep.requests import LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.tasks._aggregate import per_subject, pooled
from evalsweep.tasks._base import (
    AggregateScore,
    ChatPrompt,
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    TaskData,
    TaskDefaults,
)
from evalsweep.tasks._choice import prompt_turns
from evalsweep.tasks._data import load_hub_split, read_csv_rows

LETTERS = ("A", "B", "C", "D")

#: lm-eval's category of each subject (its ``tag: mmlu_<category>_tasks``).
CATEGORIES: dict[str, str] = {
    "abstract_algebra": "stem", "anatomy": "stem", "astronomy": "stem",
    "business_ethics": "other", "clinical_knowledge": "other", "college_biology": "stem",
    "college_chemistry": "stem", "college_computer_science": "stem",
    "college_mathematics": "stem", "college_medicine": "other", "college_physics": "stem",
    "computer_security": "stem", "conceptual_physics": "stem",
    "econometrics": "social_sciences", "electrical_engineering": "stem",
    "elementary_mathematics": "stem", "formal_logic": "humanities", "global_facts": "other",
    "high_school_biology": "stem", "high_school_chemistry": "stem",
    "high_school_computer_science": "stem", "high_school_european_history": "humanities",
    "high_school_geography": "social_sciences",
    "high_school_government_and_politics": "social_sciences",
    "high_school_macroeconomics": "social_sciences", "high_school_mathematics": "stem",
    "high_school_microeconomics": "social_sciences", "high_school_physics": "stem",
    "high_school_psychology": "social_sciences", "high_school_statistics": "stem",
    "high_school_us_history": "humanities", "high_school_world_history": "humanities",
    "human_aging": "other", "human_sexuality": "social_sciences",
    "international_law": "humanities", "jurisprudence": "humanities",
    "logical_fallacies": "humanities", "machine_learning": "stem", "management": "other",
    "marketing": "other", "medical_genetics": "other", "miscellaneous": "other",
    "moral_disputes": "humanities", "moral_scenarios": "humanities", "nutrition": "other",
    "philosophy": "humanities", "prehistory": "humanities",
    "professional_accounting": "other", "professional_law": "humanities",
    "professional_medicine": "other", "professional_psychology": "social_sciences",
    "public_relations": "social_sciences", "security_studies": "social_sciences",
    "sociology": "social_sciences", "us_foreign_policy": "social_sciences",
    "virology": "other", "world_religions": "humanities",
}  # fmt: skip
SUBJECTS = tuple(sorted(CATEGORIES))


def description(subject: str) -> str:
    return (
        "The following are multiple choice questions (with answers) about "
        f"{subject.replace('_', ' ')}.\n\n"
    )


def question_text(row: Mapping[str, Any]) -> str:
    """lm-eval's ``doc_to_text`` for MMLU."""
    c = row["choices"]
    return f"{row['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:"


def build_context(subject: str, shots: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> str:
    """Description, then each shot as question + " " + letter + blank line, then the question."""
    examples = "".join(
        question_text(shot) + " " + LETTERS[int(shot["answer"])] + "\n\n" for shot in shots
    )
    return description(subject) + examples + question_text(row)


class MMLU(TaskDefaults):
    """The ``mmlu`` task."""

    name = "mmlu"
    version = "lm-eval mmlu v2 (subjects v1.0)"
    default_num_fewshot = 5
    categories: Mapping[str, str] = MappingProxyType(CATEGORIES)
    metrics: tuple[MetricSpec, ...] = (MetricSpec("acc"),)

    def __init__(self, subjects: Sequence[str] = SUBJECTS, name: str = "mmlu") -> None:
        unknown = [s for s in subjects if s not in CATEGORIES]
        if unknown:
            raise TaskError(f"unknown MMLU subject {unknown[0]!r}")
        self.subjects = tuple(subjects)
        self.name = name

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        documents: list[Document] = []
        pool: dict[str, list[Mapping[str, Any]]] = {}
        for subject in self.subjects:
            test = self._rows(source, subject, "test", limit)
            pool[subject] = self._rows(source, subject, "dev", None)
            for index, row in enumerate(test):
                documents.append(Document(f"{subject}/{index}", index, row, subject))
        return TaskData(documents, pool, source.describe())

    def _rows(
        self, source: DataSource, subject: str, split: str, limit: int | None
    ) -> list[Mapping[str, Any]]:
        if source.data_dir is None:
            rows = load_hub_split("cais/mmlu", subject, split)
            return [_check_hub_row(row, subject, split) for row in rows[:limit]]
        path = Path(source.data_dir) / "mmlu" / split / f"{subject}_{split}.csv"
        parsed: list[Mapping[str, Any]] = []
        for number, row in enumerate(read_csv_rows(path, 6, limit), start=1):
            if row[5] not in LETTERS:
                raise DataError(f"{path}:{number}: answer must be one of A-D, found {row[5]!r}")
            parsed.append(
                {"question": row[0], "choices": row[1:5], "answer": LETTERS.index(row[5])}
            )
        return parsed

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        prepared = []
        for doc in data.documents:
            assert doc.subject is not None
            shots = data.fewshot_pool[doc.subject]
            if num_fewshot > len(shots):
                raise DataError(
                    f"mmlu/{doc.subject}: {num_fewshot}-shot needs {num_fewshot} dev rows, "
                    f"found {len(shots)}"
                )
            context = build_context(doc.subject, shots[:num_fewshot], doc.fields)
            requests = tuple(LoglikelihoodRequest(context, " " + letter) for letter in LETTERS)
            turns = prompt_turns(
                description(doc.subject),
                [(question_text(s), LETTERS[int(s["answer"])]) for s in shots[:num_fewshot]],
                question_text(doc.fields),
            )
            prepared.append(PreparedDocument(doc, requests, ChatPrompt(turns, LETTERS)))
        return prepared

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        lls = [r.logprob for r in responses if isinstance(r, LoglikelihoodResult)]
        best = max(range(len(lls)), key=lambda i: (lls[i], -i))  # first maximum, as np.argmax
        gold = int(document.fields["answer"])
        correct = best == gold
        return ScoredDocument(
            target=LETTERS[gold],
            prediction=LETTERS[best],
            metrics={"acc": float(correct)},
            correct=correct,
            details={"logprobs": lls, "is_greedy": [r.is_greedy for r in responses]},  # type: ignore[union-attr]
        )

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        rows = per_subject("acc", documents, scored)
        categories: dict[str, list[AggregateScore]] = {}
        for row in rows:
            categories.setdefault(CATEGORIES.get(row.group or "", "other"), []).append(row)
        category_rows = [
            pooled(items, name, "category") for name, items in sorted(categories.items())
        ]
        # lm-eval pools the group's error over its leaf subtasks (the subjects),
        # not over the category groups in between.
        return [pooled(rows, None, "task"), *category_rows, *rows]


def _check_hub_row(row: Mapping[str, Any], subject: str, split: str) -> Mapping[str, Any]:
    if not {"question", "choices", "answer"} <= set(row) or len(row["choices"]) != 4:
        raise DataError(f"cais/mmlu/{subject} {split}: unexpected row format {sorted(row)}")
    return {
        "question": row["question"],
        "choices": list(row["choices"]),
        "answer": int(row["answer"]),
    }
