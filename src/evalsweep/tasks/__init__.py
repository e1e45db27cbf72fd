"""Benchmarks: one module per family, each satisfying :class:`Task`.

To add a benchmark, write a module with a class that satisfies the
:class:`Task` protocol and register it in ``TASKS`` below (one line); an installed
package adds its own through the entry point group ``evalsweep.tasks``
(:mod:`evalsweep.plugins`, ``docs/extending.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evalsweep.errors import TaskError
from evalsweep.plugins import Registry
from evalsweep.tasks._base import (
    NO_CATEGORIES,
    AggregateScore,
    ChatPrompt,
    DataSource,
    Document,
    LabelNoise,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    Task,
    TaskData,
    TaskDefaults,
    Turn,
)
from evalsweep.tasks._choice import MultipleChoiceTask
from evalsweep.tasks._code import CodeTask
from evalsweep.tasks.arc import ARC
from evalsweep.tasks.bbh import BBH
from evalsweep.tasks.bbh import SUBTASKS as BBH_SUBTASKS
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

#: Every task by name: a function (or class) of no arguments that makes it. evalsweep's
#: own, one line each; installed packages' through the entry point group ``evalsweep.tasks``.
TASKS = Registry("task", "evalsweep.tasks", TaskError, reserved=lambda name: builtin_task(name))
TASKS.add("mmlu", MMLU)
TASKS.add("gsm8k", GSM8K)
TASKS.add("humaneval", HumanEval)
TASKS.add("mbpp", MBPP)
TASKS.add("arc_easy", lambda: ARC("ARC-Easy"))
TASKS.add("arc_challenge", lambda: ARC("ARC-Challenge"))
TASKS.add("hellaswag", HellaSwag)
TASKS.add("truthfulqa_mc1", lambda: TruthfulQA("mc1"))
TASKS.add("truthfulqa_mc2", lambda: TruthfulQA("mc2"))
TASKS.add("winogrande", Winogrande)
TASKS.add("piqa", PIQA)
TASKS.add("boolq", BoolQ)
TASKS.add("bbh", lambda: BBH("cot"))
TASKS.add("bbh_fewshot", lambda: BBH("plain"))


@dataclass(frozen=True)
class Suite:
    """A named set of tasks, each at its own few-shot count (``--tasks leaderboard``)."""

    name: str
    description: str
    members: tuple[tuple[str, int], ...]
    """(task name, few-shot count), in the order the suite's table is read."""


#: Suites by name. ``leaderboard`` is the Open LLM Leaderboard (v1): its six tasks,
#: few-shot counts and column order.
SUITES: dict[str, Suite] = {
    "leaderboard": Suite(
        "leaderboard",
        "Open LLM Leaderboard (v1)",
        (
            ("arc_challenge", 25),
            ("hellaswag", 10),
            ("mmlu", 5),
            ("truthfulqa_mc2", 0),
            ("winogrande", 5),
            ("gsm8k", 5),
        ),
    ),
}


def expand_suites(names: Sequence[str], num_fewshot: int | None) -> list[tuple[str, int | None]]:
    """Each task of ``names`` once, suites replaced by their members, with the few-shot
    count a suite fixes (None for a task named on its own: its default or
    ``--num-fewshot``). A task named twice runs once, where first named.

    Raises:
        TaskError: a suite together with ``num_fewshot`` (its counts are part of it).
    """
    out: dict[str, int | None] = {}
    for name in names:
        if name in SUITES:
            suite = SUITES[name]
            if num_fewshot is not None:
                counts = ", ".join(f"{task} {shots}-shot" for task, shots in suite.members)
                raise TaskError(
                    f"--num-fewshot cannot be combined with the suite {name!r}: its tasks run "
                    f"at their own few-shot counts ({counts})"
                )
            for task, shots in suite.members:
                out.setdefault(task, shots)
        else:
            out.setdefault(name, None)
    return list(out.items())


def get_task(name: str) -> Task:
    """The task called ``name``; a :class:`TaskError` lists the known ones otherwise.

    ``name`` may also be a task file (``path/to/task.yaml``, see
    :mod:`evalsweep.tasks.custom`) or the name of one in ``$EVALSWEEP_TASK_DIRS``.
    """
    if name.startswith("mmlu_") and name[5:] in SUBJECTS:
        return MMLU(subjects=[name[5:]], name=name)
    if name.startswith("bbh_") and name[4:] in BBH_SUBTASKS:
        return BBH("cot", subtasks=[name[4:]], name=name)
    if is_task_file(name):
        return load_task_file(name)
    if TASKS.builtin(name):
        return TASKS[name]()  # type: ignore[no-any-return]
    found = find_task_file(name)
    if found is not None:
        return load_task_file(found)
    if name in TASKS:
        return TASKS.make(name, Task)  # type: ignore[no-any-return]
    known = (
        ", ".join(sorted(TASKS))
        + ", mmlu_<subject>, bbh_<subtask>, or a task file (.yaml/.toml); suites: "
        + ", ".join(sorted(SUITES))
    )
    raise TaskError(f"unknown task {name!r} (known tasks: {known})")


def builtin_task(name: str) -> bool:
    """``name`` is one of evalsweep's own tasks (an MMLU subject, a BBH subtask) or suites,
    never a task file nor an installed package's."""
    return (
        TASKS.builtin(name)
        or name in SUITES
        or (name.startswith("mmlu_") and name[5:] in SUBJECTS)
        or (name.startswith("bbh_") and name[4:] in BBH_SUBTASKS)
    )


def list_tasks() -> list[str]:
    """evalsweep's own tasks, by name (``TASKS`` also has the installed packages')."""
    return sorted(TASKS.builtin_names())


def code_task_class(name: str) -> type[CodeTask] | None:
    """The class of the code task ``name`` (it takes the code tasks' sampling options:
    ``--samples-per-problem``, ``--temperature``, ``--k``), or ``None`` for any other
    name (a task file, a task that is not a registered class deriving :class:`CodeTask`)."""
    if is_task_file(name):
        return None
    if builtin_task(name):  # no package is looked at for evalsweep's own names
        if not TASKS.builtin(name):
            return None
    elif find_task_file(name) is not None or name not in TASKS:
        return None  # as get_task: a task folder's file before an installed package's task
    factory = TASKS[name]
    return factory if isinstance(factory, type) and issubclass(factory, CodeTask) else None


@dataclass(frozen=True)
class BenchmarkFacts:
    """What a task declares of its benchmark (:class:`Task`'s optional members)."""

    label_noise: LabelNoise | None = None
    categories: Mapping[str, str] = field(default_factory=lambda: NO_CATEGORIES)


@functools.lru_cache(maxsize=256)
def benchmark_facts(name: str) -> BenchmarkFacts:
    """What the task called ``name`` declares of its benchmark, for the statistics and
    reports that hold only a stored task's name. A name that is no registered task (a task
    file, results imported under another name, a package no longer installed, a package's
    task that fails to load) declares nothing; a task file is never read for this."""
    if builtin_task(name):
        if name in SUITES:
            return BenchmarkFacts()
        task: object = get_task(name)
    elif is_task_file(name) or find_task_file(name) is not None or name not in TASKS:
        return BenchmarkFacts()
    else:
        try:
            task = TASKS.make(name, Task)
        except TaskError:
            return BenchmarkFacts()
    return facts_of(task)


def facts_of(task: object) -> BenchmarkFacts:
    """What ``task`` declares of its benchmark (members it lacks or gives wrongly: none)."""
    noise = getattr(task, "label_noise", None)
    categories = getattr(task, "categories", NO_CATEGORIES)
    return BenchmarkFacts(
        noise if isinstance(noise, LabelNoise) else None,
        categories if isinstance(categories, Mapping) else NO_CATEGORIES,
    )


def list_suites() -> list[Suite]:
    return [SUITES[name] for name in sorted(SUITES)]


__all__ = [
    "AggregateScore",
    "BenchmarkFacts",
    "LabelNoise",
    "benchmark_facts",
    "facts_of",
    "ChatPrompt",
    "DataSource",
    "Document",
    "ImportedTask",
    "MetricSpec",
    "MultipleChoiceTask",
    "PreparedDocument",
    "ScoredDocument",
    "Task",
    "TaskData",
    "TaskDefaults",
    "Turn",
    "SUBJECTS",
    "TASKS",
    "builtin_task",
    "code_task_class",
    "SUITES",
    "Suite",
    "expand_suites",
    "get_task",
    "list_suites",
    "list_tasks",
]
