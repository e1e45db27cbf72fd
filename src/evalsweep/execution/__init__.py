"""Run model-written code in real kernel isolation and judge it from outside.

Public API:

* :class:`ExecutionService`: a pool of pre-warmed, forking, sandboxed workers;
  ``run`` / ``run_many`` take :class:`ExecutionRequest` and return
  :class:`ExecutionResult` with a :class:`SampleVerdict` (``passed``, ``failed``,
  ``timeout`` or ``error`` with a reason); ``report`` says which isolation
  layers are active on this machine (:class:`SandboxReport`).

The sandbox alone: it knows nothing of benchmarks. Code evaluation (problems,
samples, results files, pass@k, distributed judging) is :mod:`evalsweep.codeeval`.
"""

from ._service import (
    MAX_HASH_SEED,
    ExecutionService,
    SandboxUnavailableError,
    default_workers,
)
from ._types import (
    ExecutionRequest,
    ExecutionResult,
    FunctionTest,
    Layer,
    Limits,
    SampleVerdict,
    SandboxReport,
)

__all__ = [
    "MAX_HASH_SEED",
    "ExecutionRequest",
    "ExecutionResult",
    "ExecutionService",
    "FunctionTest",
    "Layer",
    "Limits",
    "SandboxReport",
    "SandboxUnavailableError",
    "SampleVerdict",
    "default_workers",
]
