"""HumanEval: write the body of a Python function; judged by running its tests.

Matches lm-evaluation-harness 0.4.x ``humaneval`` (prompt = the problem's
prompt, stop at ``\\nclass``, ``\\ndef``, ``\\n#``, ``\\nif``, ``\\nprint``, up to
1,024 new tokens, greedy pass@1), and its ``humaneval_64`` style when asked for
``n`` samples at a temperature (pass@k with the unbiased estimator). Unlike
lm-eval, every completion runs in evalsweep's sandbox.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from evalsweep.errors import DataError, TaskError
from evalsweep.jsonl import dumps_lines
from evalsweep.requests import GenerationRequest
from evalsweep.tasks._base import DataSource, Document, PreparedDocument, TaskData
from evalsweep.tasks._code import CodeTask

UNTIL = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
MAX_GEN_TOKS = 1024


class HumanEval(CodeTask):
    """The ``humaneval`` task."""

    name = "humaneval"
    version = "lm-eval humaneval v1.0"
    default_num_fewshot = 0

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        from evalsweep.codeproblems import load_problems

        if source.data_dir is None:
            from evalsweep.tasks._data import load_hub_split

            rows = load_hub_split("openai/openai_humaneval", None, "test")
            with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as handle:
                handle.write(dumps_lines(rows))
            path = Path(handle.name)
        else:
            path = Path(source.data_dir) / "humaneval" / "HumanEval.jsonl.gz"
            if not path.is_file():
                raise DataError(f"data file not found: {path}")
        problems = list(load_problems(path).values())[:limit]
        documents = [
            Document(p.task_id, i, {"question": p.prompt, "task_id": p.task_id})
            for i, p in enumerate(problems)
        ]
        return TaskData(documents, {"problems": problems}, source.describe())

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        if num_fewshot:
            raise TaskError("humaneval is zero-shot; drop --num-fewshot")
        self._problems = {p.task_id: p for p in data.fewshot_pool["problems"]}
        sampling = self.temperature > 0
        prepared = []
        for doc in data.documents:
            prompt = self._problems[doc.key].prompt
            requests = tuple(
                GenerationRequest(
                    prompt, UNTIL, MAX_GEN_TOKS, sampling, self.temperature, sample_index=i
                )
                for i in range(self.samples)
            )
            prepared.append(PreparedDocument(doc, requests))
        return prepared
