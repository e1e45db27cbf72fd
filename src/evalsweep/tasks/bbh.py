"""BIG-Bench Hard (Suzgun et al.): 27 hard BIG-bench tasks, answered by generation.

Matches lm-evaluation-harness 0.4.13 ``tasks/bbh``, its 27 subtasks kept as subjects
(like MMLU's):

* ``bbh``: lm-eval's ``bbh`` group (``cot_fewshot``, version 3.0 / subtasks 4.0): the
  task's description, three worked chain-of-thought exemplars
  (``Q: …\\nA: Let's think step by step.\\n`` then the worked answer, no delimiter),
  greedy generation of up to 1024 tokens stopping at ``</s>``, ``Q`` or a blank line,
  the answer taken by lm-eval's ``get-answer`` filter (``(?<=the answer is )(.*)(?=.)``,
  first match) and ``exact_match`` against the target, as ``exact_match,get-answer``.
* ``bbh_fewshot``: lm-eval's ``bbh_fewshot`` (version 3.0 / subtasks 2.0): the same
  exemplars with their final answers only (``Q: …\\nA: answer``), up to 256 tokens,
  ``exact_match`` of the response as generated.
* ``bbh_<subtask>``: one subtask of ``bbh``.

Each subtask's ``exact_match`` is its mean; the task's is the size-weighted mean with
lm-eval's pooled standard error. Exemplars are first-n (``--num-fewshot`` 0 to 3).
They come with evalsweep (``tasks/data/bbh_prompts.json``, written from the benchmark's
``cot-prompts`` by ``scripts/bbh-prompts``; MIT, Copyright (c) 2022 suzgunmirac) and are
lm-eval's few-shot samples string for string. Test examples come from the Hub
(``SaylorTwift/bbh``, lm-eval's copy, split ``test``) or, with ``--data-dir``, the
original ``bbh/bbh/<subtask>.json`` files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from evalsweep.datafiles import read_json_object
from evalsweep.errors import DataError, TaskError
from evalsweep.requests import GenerationRequest, LoglikelihoodResult
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
from evalsweep.tasks._data import load_hub_split
from evalsweep.tasks.gsm8k import extract

SUBTASKS = (
    "boolean_expressions", "causal_judgement", "date_understanding", "disambiguation_qa",
    "dyck_languages", "formal_fallacies", "geometric_shapes", "hyperbaton",
    "logical_deduction_five_objects", "logical_deduction_seven_objects",
    "logical_deduction_three_objects", "movie_recommendation", "multistep_arithmetic_two",
    "navigate", "object_counting", "penguins_in_a_table", "reasoning_about_colored_objects",
    "ruin_names", "salient_translation_error_detection", "snarks", "sports_understanding",
    "temporal_sequences", "tracking_shuffled_objects_five_objects",
    "tracking_shuffled_objects_seven_objects", "tracking_shuffled_objects_three_objects",
    "web_of_lies", "word_sorting",
)  # fmt: skip
UNTIL = ("</s>", "Q", "\n\n")
#: lm-eval's ``get-answer`` filter of the chain-of-thought form.
ANSWER = re.compile(r"(?<=the answer is )(.*)(?=.)")
COT_SUFFIX = " Let's think step by step.\n"


@cache
def prompts() -> dict[str, Any]:
    """Each subtask's description and exemplars (``cot`` and ``plain`` forms)."""
    text = resources.files("evalsweep.tasks").joinpath("data/bbh_prompts.json").read_text("utf-8")
    return dict(json.loads(text))


class BBH(TaskDefaults):
    """``bbh`` (``form="cot"``), ``bbh_fewshot`` (``"plain"``), or ``bbh_<subtask>``."""

    default_num_fewshot = 3

    def __init__(
        self, form: str = "cot", subtasks: Sequence[str] = SUBTASKS, name: str | None = None
    ) -> None:
        if form not in ("cot", "plain"):
            raise TaskError(f"unknown BIG-Bench Hard form {form!r} (cot, plain)")
        unknown = [s for s in subtasks if s not in SUBTASKS]
        if unknown:
            raise TaskError(f"unknown BIG-Bench Hard subtask {unknown[0]!r}")
        self.form = form
        self.subtasks = tuple(subtasks)
        self.name = name or ("bbh" if form == "cot" else "bbh_fewshot")
        if form == "cot":
            self.version = "lm-eval bbh cot_fewshot v3.0 (subtasks v4.0)"
            self.metrics: tuple[MetricSpec, ...] = (MetricSpec("exact_match,get-answer"),)
            self.max_gen_toks = 1024
            self.target_delimiter = ""
        else:
            self.version = "lm-eval bbh_fewshot v3.0 (subtasks v2.0)"
            self.metrics = (MetricSpec("exact_match"),)
            self.max_gen_toks = 256
            self.target_delimiter = " "

    def question(self, row: Mapping[str, Any]) -> str:
        """lm-eval's ``doc_to_text`` of the form."""
        return f"Q: {row['input']}\nA:" + (COT_SUFFIX if self.form == "cot" else "")

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        documents: list[Document] = []
        for subtask in self.subtasks:
            for index, row in enumerate(self._rows(source, subtask)[:limit]):
                documents.append(Document(f"{subtask}/{index}", index, row, subtask))
        return TaskData(documents, {}, source.describe())

    def _rows(self, source: DataSource, subtask: str) -> list[dict[str, Any]]:
        rows: Any
        if source.data_dir is None:
            where = f"SaylorTwift/bbh/{subtask} test"
            rows = load_hub_split("SaylorTwift/bbh", subtask, "test")
        else:
            path = Path(source.data_dir) / "bbh" / "bbh" / f"{subtask}.json"
            where = str(path)
            data, _ = read_json_object(path)
            rows = data.get("examples")
            if not isinstance(rows, list):
                raise DataError(f"{path}: expected an object with an 'examples' array")
        checked = []
        for index, row in enumerate(rows):
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("input"), str)
                or not isinstance(row.get("target"), str)
            ):
                raise DataError(f"{where}: example {index} must have text 'input' and 'target'")
            checked.append(
                {"input": row["input"], "target": row["target"], "question": row["input"]}
            )
        return checked

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        if num_fewshot > 3:
            raise DataError(
                f"{self.name}: {num_fewshot}-shot needs {num_fewshot} exemplars, "
                "BIG-Bench Hard has 3"
            )
        prepared = []
        for doc in data.documents:
            assert doc.subject is not None
            prompt = prompts()[doc.subject]
            shots = [(self.question(s), s["target"]) for s in prompt[self.form][:num_fewshot]]
            turns = prompt_turns(
                prompt["description"], shots, self.question(doc.fields), self.target_delimiter
            )
            chat = ChatPrompt(turns)
            request = GenerationRequest(chat.plain_text(), UNTIL, self.max_gen_toks)
            prepared.append(PreparedDocument(doc, (request,), chat))
        return prepared

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        response = str(responses[0])
        target = str(document.fields["target"])
        if self.form == "cot":
            answer = extract(response, ANSWER, 0)
            key = "exact_match,get-answer"
        else:
            answer, key = response, "exact_match"
        correct = answer == target
        return ScoredDocument(
            target=target,
            prediction=answer,
            metrics={key: float(correct)},
            correct=correct,
            response=response,
            details={"filtered": {"get-answer": answer}} if self.form == "cot" else {},
        )

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        rows = per_subject(self.metrics[0].key, documents, scored)
        return [pooled(rows, None, "task"), *rows]
