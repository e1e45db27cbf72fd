"""BoolQ (Clark et al.): yes/no questions about a Wikipedia passage.

Matches lm-evaluation-harness 0.4.13 ``boolq`` (``tasks/super_glue/boolq``,
version 2.0): prompt ``"{passage}\\nQuestion: {question}?\\nAnswer:"``, the
choices ``" no"`` and ``" yes"`` as continuations, ``acc``, validation split,
0-shot by default; few-shot examples from ``train`` by lm-eval's default
sampler, each document excluded from its own draw (no test split is set).

Data from the Hub (``aps/super_glue``, config ``boolq``, the copy lm-eval
reads) or, with ``--data-dir``, Google's original ``boolq/dev.jsonl``
(``question``, ``title``, ``answer``, ``passage``), turned into SuperGLUE's
rows as SuperGLUE built them: ``passage = title + " -- " + passage`` and
``label = answer``. ``train.jsonl`` beside it is the few-shot pool when
present, otherwise the validation rows are, as lm-eval falls back to them.
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
CHOICES = ("no", "yes")


class BoolQ(MultipleChoiceTask):
    """The ``boolq`` task; rows are SuperGLUE's ``{question, passage, idx, label}``."""

    name = "boolq"
    version = "lm-eval boolq v2.0"
    default_num_fewshot = 0
    fewshot_excludes_document = True
    metrics = (MetricSpec("acc"),)

    def question(self, row: Row) -> str:
        return f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:"

    def choices(self, row: Row) -> list[str]:
        return list(CHOICES)

    def gold(self, row: Row) -> int:
        return int(row["label"])

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        pool: dict[str, list[Row]]
        if source.data_dir is None:
            test = _hub("validation")
            pool = {"fewshot": _hub("train")}
        else:
            folder = Path(source.data_dir) / "boolq"
            test = _local(folder / "dev.jsonl")
            train = folder / "train.jsonl"
            pool = {"fewshot": _local(train)} if train.is_file() else {"eval": test}
        documents = [Document(str(i), i, row) for i, row in enumerate(test[:limit])]
        return TaskData(documents, pool, source.describe())


def _hub(split: str) -> list[Row]:
    rows: list[Row] = []
    for index, row in enumerate(load_hub_split("aps/super_glue", "boolq", split)):
        try:
            label = int(row["label"])
            rows.append({"question": row["question"], "passage": row["passage"],
                         "idx": int(row["idx"]), "label": label})  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"aps/super_glue boolq {split} row {index}: unexpected format ({exc})"
            ) from exc
        if label not in (0, 1):
            raise DataError(f"aps/super_glue boolq {split} row {index}: label must be 0 or 1")
    return rows


def _local(path: Path) -> list[Row]:
    rows: list[Row] = []
    for index, row in enumerate(read_jsonl(path, ("question", "title", "answer", "passage"))):
        if not isinstance(row["answer"], bool):
            raise DataError(f"{path}:{index + 1}: 'answer' must be true or false")
        rows.append(
            {
                "question": row["question"],
                "passage": f"{row['title']} -- {row['passage']}",
                "idx": index,
                "label": int(row["answer"]),
            }
        )
    return rows
