"""HumanEval: write the body of a Python function; judged by running its tests.

Matches lm-evaluation-harness 0.4.x ``humaneval`` (prompt = the problem's
prompt, stop at ``\\nclass``, ``\\ndef``, ``\\n#``, ``\\nif``, ``\\nprint``, up to
1,024 new tokens, greedy pass@1), and its ``humaneval_64`` style when asked for
``n`` samples at a temperature (pass@k with the unbiased estimator). Unlike
lm-eval, every completion runs in evalsweep's sandbox (:mod:`evalsweep.execution`):
the verdict is decided outside the sample's process.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsweep.errors import TaskError
from evalsweep.requests import GenerationRequest, LoglikelihoodResult
from evalsweep.stats import pass_at_k
from evalsweep.tasks._aggregate import mean, mean_stderr
from evalsweep.tasks._base import (
    AggregateScore,
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    TaskData,
)

UNTIL = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
MAX_GEN_TOKS = 1024


class HumanEval:
    """The ``humaneval`` task: ``samples`` completions per problem, pass@k for each k <= samples."""

    name = "humaneval"
    version = "lm-eval humaneval v1.0"
    default_num_fewshot = 0
    rescore_stored = False  # scoring runs code: stored verdicts are kept

    def __init__(
        self, samples: int = 1, temperature: float = 0.0, ks: Sequence[int] = (1, 10, 100)
    ) -> None:
        if samples < 1:
            raise TaskError(f"humaneval: --samples-per-problem must be at least 1, got {samples}")
        if samples > 1 and temperature <= 0:
            raise TaskError("humaneval: several samples per problem need --temperature above 0")
        self.samples = samples
        self.temperature = temperature
        self.ks = tuple(k for k in sorted(set(ks)) if k <= samples) or (1,)
        self.metrics = tuple(MetricSpec(f"pass@{k}") for k in self.ks)
        self._service: Any = None

    def extra_settings(self) -> dict[str, object]:
        return {"samples": self.samples, "temperature": self.temperature}

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        from evalsweep.execution import load_problems

        if source.data_dir is None:
            from evalsweep.tasks._data import load_hub_split

            rows = load_hub_split("openai/openai_humaneval", None, "test")
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
                handle.writelines(json.dumps(row) + "\n" for row in rows)
            path = Path(handle.name)
        else:
            path = Path(source.data_dir) / "humaneval" / "HumanEval.jsonl.gz"
            if not path.is_file():
                from evalsweep.errors import DataError

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

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        from evalsweep.execution import CodeSample, build_request

        problem = self._problems[document.key]
        requests = [
            build_request(CodeSample(i, document.key, str(text), False, {}), problem)
            for i, text in enumerate(responses)
        ]
        results = self._sandbox().run_many(requests)
        verdicts = [r.verdict.status for r in results]
        passed = sum(v == "passed" for v in verdicts)
        metrics = {f"pass@{k}": pass_at_k(self.samples, passed, k) for k in self.ks}
        return ScoredDocument(
            target="passes its tests",
            prediction=verdicts[0],
            metrics=metrics,
            correct=verdicts[0] == "passed",
            response=str(responses[0]),
            details={"verdicts": verdicts, "passed": passed, "n": self.samples},
        )

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        rows = []
        for spec in self.metrics:
            values = [result.metrics[spec.key] for result in scored]
            rows.append(AggregateScore(spec.key, mean(values), mean_stderr(values), len(values)))
        return rows

    def _sandbox(self) -> Any:
        if self._service is None:
            from evalsweep.execution import ExecutionService

            self._service = ExecutionService()
            self._service.__enter__()
        return self._service

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None

    def describe_sandbox(self) -> Mapping[str, Any] | None:
        return None if self._service is None else {"report": str(self._service.report)}
