"""MBPP: write a Python function from a description and three asserts.

Matches lm-evaluation-harness 0.4.x ``mbpp`` (``full`` config): the test split
is task ids 11-510; the prompt is "You are an expert Python programmer, and
here is your task: {text} Your code should pass these tests:\\n\\n{3 asserts}\\n
[BEGIN]\\n"; three few-shot examples (task ids 2, 3, 4) each end with their
code and "\\n[DONE]"; generation stops at "[DONE]"; pass@1 by running the
completion with the asserts, here in evalsweep's sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsweep.datafiles import display_path, read_records
from evalsweep.errors import DataError
from evalsweep.requests import GenerationRequest
from evalsweep.tasks._base import DataSource, Document, PreparedDocument, TaskData
from evalsweep.tasks._code import CodeTask
from evalsweep.tasks._data import load_hub_split

FEWSHOT_IDS = (2, 3, 4)
TEST_IDS = range(11, 511)
UNTIL = ("[DONE]",)
MAX_GEN_TOKS = 256


def question_text(row: Mapping[str, Any]) -> str:
    """lm-eval's ``doc_to_text`` for MBPP."""
    tests = row["test_list"]
    return (
        f"You are an expert Python programmer, and here is your task: {row['text']} "
        f"Your code should pass these tests:\n\n{tests[0]}\n{tests[1]}\n{tests[2]}\n[BEGIN]\n"
    )


def _check_prompt_fields(path: Path, line: int, row: Mapping[str, Any]) -> None:
    """What :func:`question_text` and :func:`build_context` need of a row."""
    where = f"{display_path(path)}:{line}"
    for field in ("text", "code"):
        if not isinstance(row.get(field), str):
            raise DataError(f"{where}: field {field!r} is missing or not a string")
    tests = row.get("test_list")
    if not isinstance(tests, list) or len(tests) < 3 or not all(isinstance(t, str) for t in tests):
        raise DataError(f"{where}: field 'test_list' must hold at least 3 strings")


def build_context(shots: list[Mapping[str, Any]], row: Mapping[str, Any]) -> str:
    examples = "".join(question_text(s) + s["code"] + "\n[DONE]" + "\n\n" for s in shots)
    return examples + question_text(row)


class MBPP(CodeTask):
    """The ``mbpp`` task."""

    name = "mbpp"
    version = "lm-eval mbpp v1.0"
    default_num_fewshot = 3
    whole_program = True

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        from evalsweep.codeproblems import load_problems

        if source.data_dir is None:
            rows = load_hub_split("google-research-datasets/mbpp", "full", "test")
            rows += load_hub_split("google-research-datasets/mbpp", "full", "prompt")
            path, problems = None, None
        else:
            path = Path(source.data_dir) / "mbpp" / "mbpp.jsonl"
            problems = load_problems(path)  # every row's task_id and tests checked, by line
            records = read_records(path, lines=True, what="rows").records
            for record in records:
                _check_prompt_fields(path, record.line, record.value)
            rows = [record.value for record in records]
        by_id = {int(row["task_id"]): row for row in rows}
        missing = [i for i in FEWSHOT_IDS if i not in by_id]
        if missing:
            raise DataError(f"mbpp: few-shot task {missing[0]} not found in {path or 'the Hub'}")
        if path is None:
            import tempfile

            from evalsweep.jsonl import dumps_lines

            with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as handle:
                handle.write(dumps_lines(rows))
            path = Path(handle.name)
        if problems is None:
            problems = load_problems(path)
        tests = [by_id[i] for i in TEST_IDS if i in by_id][:limit]
        documents = [
            Document(f"MBPP/{row['task_id']}", i, {"question": row["text"], **row})
            for i, row in enumerate(tests)
        ]
        pool: dict[str, Sequence[Any]] = {
            "shots": [by_id[i] for i in FEWSHOT_IDS],
            "problems": list(problems.values()),
        }
        return TaskData(documents, pool, source.describe())

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        shots = list(data.fewshot_pool["shots"])
        if num_fewshot > len(shots):
            raise DataError(f"mbpp: at most {len(shots)} few-shot examples, asked {num_fewshot}")
        self._problems = {p.task_id: p for p in data.fewshot_pool["problems"]}
        sampling = self.temperature > 0
        prepared = []
        for doc in data.documents:
            context = build_context(shots[:num_fewshot], doc.fields)
            requests = tuple(
                GenerationRequest(
                    context, UNTIL, MAX_GEN_TOKS, sampling, self.temperature, sample_index=i
                )
                for i in range(self.samples)
            )
            prepared.append(PreparedDocument(doc, requests))
        return prepared
