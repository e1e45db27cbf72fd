"""What code benchmarks share: n completions per problem, sandboxed scoring, pass@k.

Each completion runs in evalsweep's sandbox (:mod:`evalsweep.execution`), whose
verdict is decided outside the sample's process; pass@k uses the unbiased
estimator over the n completions of each problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalsweep.errors import TaskError
from evalsweep.requests import LoglikelihoodResult
from evalsweep.stats import pass_at_k
from evalsweep.tasks._aggregate import mean_per_metric
from evalsweep.tasks._base import AggregateScore, Document, MetricSpec, ScoredDocument, TaskDefaults


class CodeTask(TaskDefaults):
    """Base of code tasks: ``samples`` completions per problem, pass@k for each k <= samples."""

    name = "code"
    rescore_stored = False  # scoring runs code: stored verdicts are kept
    whole_program = False  # does a completion stand alone (MBPP) or follow the prompt?

    def __init__(
        self, samples: int = 1, temperature: float = 0.0, ks: Sequence[int] = (1, 10, 100)
    ) -> None:
        if samples < 1:
            raise TaskError(f"{self.name}: --samples-per-problem must be at least 1, got {samples}")
        if samples > 1 and temperature <= 0:
            raise TaskError(f"{self.name}: several samples per problem need --temperature above 0")
        if any(k < 1 for k in ks):
            raise TaskError(f"{self.name}: each k of pass@k must be at least 1, got {list(ks)}")
        self.samples = samples
        self.temperature = temperature
        self.ks = tuple(k for k in sorted(set(ks)) if k <= samples) or (1,)
        self.metrics = tuple(MetricSpec(f"pass@{k}") for k in self.ks)
        self._problems: dict[str, Any] = {}
        self._service: Any = None

    def extra_settings(self) -> dict[str, object]:
        # What the sandbox lets a completion import decides verdicts: part of the key.
        from evalsweep.execution import Limits

        imports = "installed packages" if Limits().installed_packages else "standard library"
        return {"samples": self.samples, "temperature": self.temperature, "imports": imports}

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        from evalsweep.codeproblems import CodeSample, build_request

        problem = self._problems[document.key]
        requests = [
            build_request(CodeSample(i, document.key, str(text), self.whole_program, {}), problem)
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
        return mean_per_metric([spec.key for spec in self.metrics], scored)

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
