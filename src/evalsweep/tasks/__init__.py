"""Benchmarks: one module per family, each satisfying :class:`Task`.

To add a benchmark, write a module with a class that satisfies the
:class:`Task` protocol and register it in ``TASKS`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evalsweep.errors import TaskError
from evalsweep.tasks._base import (
    AggregateScore,
    ChatPrompt,
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    Task,
    TaskData,
    TaskDefaults,
    Turn,
)
from evalsweep.tasks.arc import ARC
from evalsweep.tasks.boolq import BoolQ
from evalsweep.tasks.custom import find_task_file, is_task_file, load_task_file
from evalsweep.tasks.gsm8k import GSM8K
from evalsweep.tasks.hellaswag import HellaSwag
from evalsweep.tasks.humaneval import HumanEval
from evalsweep.tasks.imported import ImportedTask
from evalsweep.tasks.mbpp import MBPP
from evalsweep.tasks.mmlu import MMLU, SUBJECTS
from evalsweep.tasks.piqa import PIQA
from evalsweep.tasks.truthfulqa import TruthfulQA
from evalsweep.tasks.winogrande import Winogrande

TASKS: dict[str, Callable[[], Any]] = {
    "mmlu": MMLU,
    "gsm8k": GSM8K,
    "humaneval": HumanEval,
    "mbpp": MBPP,
    "arc_easy": lambda: ARC("ARC-Easy"),
    "arc_challenge": lambda: ARC("ARC-Challenge"),
    "hellaswag": HellaSwag,
    "truthfulqa_mc1": lambda: TruthfulQA("mc1"),
    "truthfulqa_mc2": lambda: TruthfulQA("mc2"),
    "winogrande": Winogrande,
    "piqa": PIQA,
    "boolq": BoolQ,
}


def get_task(name: str) -> Task:
    """The task called ``name``; a :class:`TaskError` lists the known ones otherwise.

    ``name`` may also be a task file (``path/to/task.yaml``, see
    :mod:`evalsweep.tasks.custom`) or the name of one in ``$EVALSWEEP_TASK_DIRS``.
    """
    if name.startswith("mmlu_") and name[5:] in SUBJECTS:
        return MMLU(subjects=[name[5:]], name=name)
    if is_task_file(name):
        return load_task_file(name)
    if name in TASKS:
        return TASKS[name]()  # type: ignore[no-any-return]
    found = find_task_file(name)
    if found is not None:
        return load_task_file(found)
    known = ", ".join(sorted(TASKS)) + ", mmlu_<subject>, or a task file (.yaml/.toml)"
    raise TaskError(f"unknown task {name!r} (known tasks: {known})")


def list_tasks() -> list[str]:
    return sorted(TASKS)


__all__ = [
    "AggregateScore",
    "ChatPrompt",
    "DataSource",
    "Document",
    "ImportedTask",
    "MetricSpec",
    "PreparedDocument",
    "ScoredDocument",
    "Task",
    "TaskData",
    "TaskDefaults",
    "Turn",
    "SUBJECTS",
    "get_task",
    "list_tasks",
]
