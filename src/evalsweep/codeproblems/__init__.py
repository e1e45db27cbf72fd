"""Code benchmarks' problems and samples, and how one sample becomes a sandbox request.

Shared by the code tasks (:mod:`evalsweep.tasks`: HumanEval and MBPP generate completions and
score them) and by code evaluation (:mod:`evalsweep.codeeval`: files of completions judged
locally or on remote machines), so that both run a sample exactly alike. It sits below both:
it imports the sandbox's request types (:mod:`evalsweep.execution`), the strict file reader
and nothing of tasks, engines, targets or statistics (the far side of a distributed judge
imports it, and stays light).
"""

from __future__ import annotations

from ._problems import (
    CodeProblem,
    CodeSample,
    build_request,
    load_problems,
    load_samples,
    read_problems,
    read_samples,
)

__all__ = [
    "CodeProblem",
    "CodeSample",
    "build_request",
    "load_problems",
    "load_samples",
    "read_problems",
    "read_samples",
]
