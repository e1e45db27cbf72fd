"""The ``capitals`` task: multiple choice over questions shipped in this package.

A task is a class (or a function of no arguments) whose objects satisfy
``evalsweep.tasks.Task``; ``MultipleChoiceTask`` does the prompts, the requests
(one log-likelihood per choice), scoring (``acc``) and aggregation, given a row's
question, choices and answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from evalsweep.tasks import DataSource, Document, MetricSpec, MultipleChoiceTask, TaskData

Row = Mapping[str, Any]


class Capitals(MultipleChoiceTask):
    """Capital cities: eight multiple-choice questions shipped in the package."""

    name = "capitals"
    version = "capitals v1"  # change it when the prompt or data change: stored rows are keyed by it
    default_num_fewshot = 0
    metrics = (MetricSpec("acc"),)

    def question(self, row: Row) -> str:
        return f"Question: {row['question']}\nAnswer:"

    def choices(self, row: Row) -> list[str]:
        return list(row["choices"])

    def gold(self, row: Row) -> int:
        return int(row["answer"])

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        """The shipped rows, or ``capitals.jsonl`` of ``--data-dir`` when it has one."""
        local = Path(source.data_dir or "") / "capitals.jsonl"
        if source.data_dir and local.is_file():
            text, where = local.read_text(encoding="utf-8"), f"local:{source.data_dir}"
        else:
            data = resources.files(__package__).joinpath("data/capitals.jsonl")
            text, where = data.read_text(encoding="utf-8"), "package:evalsweep-example-plugin"
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        documents = [Document(str(i), i, row) for i, row in enumerate(rows[:limit])]
        # Few-shot examples come from the evaluated rows themselves, never a document's own.
        return TaskData(documents, {"eval": rows}, where)
