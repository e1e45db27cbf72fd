"""PIQA (Bisk et al.): physical commonsense, which of two solutions reaches the goal.

Matches lm-evaluation-harness 0.4.13 ``tasks/piqa`` (version 1.0): prompt
``"Question: {goal}\\nAnswer:"``, the two solutions as continuations after a
space, ``acc`` and ``acc_norm``, validation split, 0-shot by default; few-shot
examples from ``train`` by lm-eval's default sampler, each document excluded
from its own draw (the task sets no test split).

Data from the Hub (``baber/piqa``, the copy lm-eval reads) or, with
``--data-dir``, the original ``piqa/valid.jsonl`` with ``valid-labels.lst``;
``train.jsonl`` with ``train-labels.lst`` beside them is the few-shot pool when
present, otherwise the validation rows are, as lm-eval falls back to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalsweep.errors import DataError
from evalsweep.tasks._base import DataSource, Document, MetricSpec, TaskData
from evalsweep.tasks._choice import MultipleChoiceTask
from evalsweep.tasks._data import load_hub_split, read_jsonl, with_labels

Row = Mapping[str, Any]


class PIQA(MultipleChoiceTask):
    """The ``piqa`` task; rows are ``{goal, sol1, sol2, label}`` as on the Hub."""

    name = "piqa"
    version = "lm-eval piqa v1.0"
    default_num_fewshot = 0
    fewshot_excludes_document = True
    metrics = (MetricSpec("acc"), MetricSpec("acc_norm"))

    def question(self, row: Row) -> str:
        return f"Question: {row['goal']}\nAnswer:"

    def choices(self, row: Row) -> list[str]:
        return [str(row["sol1"]), str(row["sol2"])]

    def gold(self, row: Row) -> int:
        return int(row["label"])

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        pool: dict[str, list[Row]]
        if source.data_dir is None:
            test = _hub("validation")
            pool = {"fewshot": _hub("train")}
        else:
            folder = Path(source.data_dir) / "piqa"
            test = _local(folder, "valid")
            has_train = (folder / "train.jsonl").is_file()
            pool = {"fewshot": _local(folder, "train")} if has_train else {"eval": test}
        documents = [Document(str(i), i, row) for i, row in enumerate(test[:limit])]
        return TaskData(documents, pool, source.describe())


def _shown(row: Row) -> Row:
    """The row with what reports show (``question``, ``choices``); pool rows get them too,
    so that a document equals its own row in the pool and is left out of its draw."""
    return {**row, "question": row["goal"], "choices": [row["sol1"], row["sol2"]]}


def _hub(split: str) -> list[Row]:
    rows: list[Row] = []
    for index, row in enumerate(load_hub_split("baber/piqa", None, split)):
        try:
            label = int(row["label"])
            rows.append(_shown({"goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"],
                                "label": label}))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"baber/piqa {split} row {index}: unexpected format ({exc})") from exc
        if label not in (0, 1):
            raise DataError(f"baber/piqa {split} row {index}: label must be 0 or 1, found {label}")
    return rows


def _local(folder: Path, split: str) -> list[Row]:
    path = folder / f"{split}.jsonl"
    rows = read_jsonl(path, ("goal", "sol1", "sol2"))
    paired = with_labels(rows, folder / f"{split}-labels.lst", ("0", "1"), path)
    return [
        _shown({"goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"], "label": int(label)})
        for row, label in paired
    ]
