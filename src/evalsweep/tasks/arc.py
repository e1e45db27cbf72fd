"""AI2 Reasoning Challenge: ``arc_easy`` and ``arc_challenge``, grade-school science.

Matches lm-evaluation-harness 0.4.13 ``tasks/arc``: prompt
``"Question: {question}\\nAnswer:"``, each choice's text as a continuation
after a space, ``acc`` and ``acc_norm``, 0-shot by default. Few-shot examples
come from ``train`` by lm-eval's default sampler. Data from the Hub
(``allenai/ai2_arc``) or, with ``--data-dir``, AI2's original JSON Lines
(``arc/ARC-Easy/ARC-Easy-{Test,Dev,Train}.jsonl``); without a local Train
file the few-shot pool is Dev, as lm-eval falls back to the validation split.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalsweep.errors import DataError
from evalsweep.tasks._base import DataSource, Document, MetricSpec, TaskData
from evalsweep.tasks._choice import MultipleChoiceTask
from evalsweep.tasks._data import load_hub_split, read_jsonl

Row = Mapping[str, Any]


class ARC(MultipleChoiceTask):
    """``arc_easy`` (subset ``ARC-Easy``) or ``arc_challenge`` (``ARC-Challenge``).

    Rows are ``{id, question, choices, labels, answerKey}``: the Hub's
    ``choices.text`` and ``choices.label`` as two flat lists.
    """

    version = "lm-eval arc v1.0"
    metrics = (MetricSpec("acc"), MetricSpec("acc_norm"))

    def __init__(self, subset: str = "ARC-Easy") -> None:
        if subset not in ("ARC-Easy", "ARC-Challenge"):
            raise DataError(f"unknown ARC subset {subset!r}")
        self.subset = subset
        self.name = "arc_easy" if subset == "ARC-Easy" else "arc_challenge"

    def question(self, row: Row) -> str:
        return f"Question: {row['question']}\nAnswer:"

    def choices(self, row: Row) -> list[str]:
        return list(row["choices"])

    def gold(self, row: Row) -> int:
        return int(row["labels"].index(row["answerKey"]))

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        if source.data_dir is None:
            test = [_check(r, "allenai/ai2_arc test", i) for i, r in enumerate(self._hub("test"))]
            pool: dict[str, list[Row]] = {"fewshot": self._hub("train")}
        else:
            folder = Path(source.data_dir) / "arc" / self.subset
            test = self._local(folder / f"{self.subset}-Test.jsonl", limit)
            train = folder / f"{self.subset}-Train.jsonl"
            fewshot = train if train.is_file() else folder / f"{self.subset}-Dev.jsonl"
            pool = {"fewshot": self._local(fewshot, None)}
        documents = [Document(str(i), i, row) for i, row in enumerate(test[:limit])]
        return TaskData(documents, pool, source.describe())

    def _hub(self, split: str) -> list[Row]:
        return [_flat(row) for row in load_hub_split("allenai/ai2_arc", self.subset, split)]

    def _local(self, path: Path, limit: int | None) -> list[Row]:
        """AI2's schema (``question.stem``, ``question.choices``) in the Hub's shape."""
        return [
            _check(_flat(row), str(path), number)
            for number, row in enumerate(ai2_rows_in_hub_schema(path, limit), 1)
        ]


def _flat(row: Row) -> Row:
    """A row of the Hub's schema with ``choices.text`` and ``choices.label`` as two lists."""
    return {
        "id": row["id"],
        "question": row["question"],
        "choices": list(row["choices"]["text"]),
        "labels": list(row["choices"]["label"]),
        "answerKey": row["answerKey"],
    }


def _check(row: Row, where: str, number: int) -> Row:
    if row["answerKey"] not in row["labels"]:
        raise DataError(
            f"{where}:{number}: answerKey {row['answerKey']!r} is not one of the labels "
            f"{row['labels']}"
        )
    return row


def ai2_rows_in_hub_schema(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """AI2's original ARC rows, in file order, in the Hub's ``allenai/ai2_arc`` schema.

    The schema lm-eval's ARC tasks read from the Hub; besides the task's own
    local loading, it lets lm-eval run on the same local files as evalsweep
    (the benchmarks and agreement tests do).
    """
    rows = []
    for number, row in enumerate(read_jsonl(path, ("id", "question", "answerKey"), limit), 1):
        question = row["question"]
        if not isinstance(question, dict) or not isinstance(question.get("choices"), list):
            raise DataError(f"{path}:{number}: 'question' must hold 'stem' and 'choices'")
        try:
            rows.append(
                {
                    "id": row["id"],
                    "question": question["stem"],
                    "choices": {
                        "text": [c["text"] for c in question["choices"]],
                        "label": [c["label"] for c in question["choices"]],
                    },
                    "answerKey": row["answerKey"],
                }
            )
        except (KeyError, TypeError) as exc:
            raise DataError(f"{path}:{number}: malformed question ({exc})") from exc
    return rows
