"""Code evaluation end to end: ``evalsweep code-eval`` and the code tasks' scoring.

One sample's straight line: the inputs are read and checked
(:mod:`._problems`, through :mod:`evalsweep.datafiles`), each sample becomes an
:class:`~evalsweep.execution.ExecutionRequest` (:func:`build_request`), a
:class:`Judge` gives its verdict (the local sandbox service of
:mod:`evalsweep.execution`, or :class:`DistributedJudge`, which cuts the run
into slices (:mod:`._slices`) and judges them on targets through each target
kind's transport (:mod:`._transports`, :mod:`._slice_worker` on the far side)),
and :func:`evaluate_samples_file` streams the verdicts into the results files
(:mod:`._resultfiles`) and counts pass@k (:class:`CodeEvalResult`).
:func:`code_eval` is the command's entry: it picks the judge, meters usage and
cost (:mod:`._usage`) and writes the run's record (:class:`CodeEvalRun`).

The sandbox (:mod:`evalsweep.execution`) knows nothing of benchmarks; the
targets (:mod:`evalsweep.compute`) nothing of code evaluation.
"""

from evalsweep.codeproblems import (
    CodeProblem,
    CodeSample,
    build_request,
    load_problems,
    load_samples,
)

from ._distributed import DistributedJudge
from ._evaluate import estimate_pass_at_k, evaluate_samples_file
from ._judge import Judge
from ._record import (
    CodeEvalRecord,
    CodeEvalResult,
    RunRecord,
    code_eval_schema,
    read_code_eval_record,
)
from ._run import CodeEvalRun, code_eval, record_path

__all__ = [
    "CodeEvalRecord",
    "CodeEvalResult",
    "CodeEvalRun",
    "CodeProblem",
    "CodeSample",
    "DistributedJudge",
    "Judge",
    "RunRecord",
    "build_request",
    "code_eval",
    "code_eval_schema",
    "estimate_pass_at_k",
    "evaluate_samples_file",
    "load_problems",
    "load_samples",
    "read_code_eval_record",
    "record_path",
]
