"""Benchmarks: one module per family, each satisfying :class:`Task`.

To add a benchmark, write a module with a class that satisfies the
:class:`Task` protocol and register it in ``TASKS`` below.
"""

from __future__ import annotations

from evalsweep.errors import TaskError
from evalsweep.tasks._base import (
    AggregateScore,
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    Task,
    TaskData,
)
from evalsweep.tasks.gsm8k import GSM8K
from evalsweep.tasks.humaneval import HumanEval
from evalsweep.tasks.mbpp import MBPP
from evalsweep.tasks.mmlu import MMLU, SUBJECTS

TASKS: dict[str, type] = {"mmlu": MMLU, "gsm8k": GSM8K, "humaneval": HumanEval, "mbpp": MBPP}


def get_task(name: str) -> Task:
    """The task called ``name``; a :class:`TaskError` lists the known ones otherwise."""
    if name.startswith("mmlu_") and name[5:] in SUBJECTS:
        return MMLU(subjects=[name[5:]], name=name)
    try:
        return TASKS[name]()  # type: ignore[no-any-return]
    except KeyError:
        known = ", ".join(sorted(TASKS)) + ", mmlu_<subject>"
        raise TaskError(f"unknown task {name!r} (known tasks: {known})") from None


def list_tasks() -> list[str]:
    return sorted(TASKS)


__all__ = [
    "AggregateScore",
    "DataSource",
    "Document",
    "MetricSpec",
    "PreparedDocument",
    "ScoredDocument",
    "Task",
    "TaskData",
    "get_task",
    "list_tasks",
]
