"""The judge sandbox's zygote work: keep compiled tests, judge each sample in a fresh fork.

The judge process keeps every test it was given, compiled. Each sample is
judged in a child forked for it alone, which runs the problem's prelude and
test in a new namespace and ends after one report: nothing a test does (patch
``math.isclose``, import a module with side effects, change the recursion
limit, seed ``random``) and nothing a sample's values make it do outlives that
sample. The child has its own CPU-time limit and a wall-clock alarm; if it
exceeds either, crashes or runs out of memory, its sample gets the error.
Right after start-up the judge drops every privilege for good (it mounts
nothing; it forks only these children).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import resource
import select
import signal
import sys
import time
from types import CodeType
from typing import TYPE_CHECKING, Any, NoReturn

from . import confine, judge, wire

if TYPE_CHECKING:
    from .zygote import Zygote


# Python's default bound on int <-> str conversion, set again in every judging child.
_INT_DIGITS = 4300


def compile_test(prelude: str | None, test: str) -> tuple[CodeType | None, CodeType]:
    """A test's code and its prelude's, as the judge runs them (raises SyntaxError)."""
    return (
        None if prelude is None else compile(prelude, "<prompt>", "exec", dont_inherit=True),
        compile(test, "<test>", "exec", dont_inherit=True),
    )


# The largest report a judge child may write (its messages are bounded far below).
_REPORT_BYTES = 64 * 1024
# Seconds beyond twice the judgement's timeout after which the judge stops a child
# (it waits at most the sample's load, then the test's own alarm).
_CHILD_GRACE = 1.0
_STOP = signal.SIGKILL


class JudgeRole:
    """Requests ``test`` (register and compile a test) and ``judge`` (run it)."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self._tests: dict[str, dict[str, Any]] = {}
        judge.preload()  # the modules whose types and exceptions cross by value

    def confine_self(self) -> None:
        """Drop capabilities (or uid), then no_new_privs and both seccomp filters."""
        z = self._zygote
        if z.config["unsafe"]:
            return
        limits = z.config["judge_limits"]
        rlimits = confine.rlimits_for(
            address_space=limits["address_space"],
            file_size=limits["file_size"],
            open_files=limits["open_files"],
            open_files_hard=limits["open_files_hard"],
            cpu_seconds=limits["cpu_seconds"],
            processes=limits["processes"],
        )
        plan = confine.Confinement(
            # CPU time adds up over every sample this process serves: each
            # judging child gets its own limit instead (see _judge_child).
            rlimits=[limit for limit in rlimits if limit[0] != resource.RLIMIT_CPU],
            drop_capabilities=z.userns or (z.namespaces and not z.privileged),
            switch_to=z.switch_to,
            seccomp=z.seccomp,
            oom_score_adj=None,
            dumpable=False,
        )
        confine.apply(plan)
        if z.sample_seccomp is not None:
            z.sample_seccomp.load()  # the judge mounts nothing either
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def add_test(self, message: dict[str, Any]) -> dict[str, Any]:
        """Register a test (compiled by the parent, or here); later samples of it reuse it."""
        try:
            code = message.get("code")
            if code is not None:  # compiled by the parent, once for every judge
                prelude, test = marshal.loads(code)
            else:
                prelude, test = compile_test(message["prelude"], message["test"])
            spec = {
                "prelude": prelude,
                "test": test,
                "entry_point": message["entry_point"],
                "sample_names": tuple(message.get("sample_names", ())),
                "seed": int(message["key"], 16),
            }
        except (SyntaxError, ValueError) as error:
            return {"t": "test_error", "key": message["key"], "msg": str(error)[:500]}
        self._tests[message["key"]] = spec
        return {"t": "test_ok", "key": message["key"]}

    def judge(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Judge one sample over the socket in ``fds``, in a child forked for it.

        ``fds``: the channel to the sample, then the pipe its zygote watches,
        closed only once the child is gone and so the judge free for the next
        sample (the zygote forks that one only then, see sample_role).
        """
        reply: dict[str, Any] = {"t": "result", "id": message["id"], "timed_out": False}
        spec = self._tests.get(message["key"])
        started = time.monotonic()
        try:
            if spec is None:
                reply["report"] = {
                    "outcome": "error",
                    "origin": "test",
                    "msg": "the test code does not compile",
                }
            else:
                # The test imports what the program may.
                path = self._zygote.import_path(message["limits"])
                interpreter = self._zygote.interpreter(message["limits"])
                reply.update(_judge_in_child(spec, message, fds, path, interpreter))
        finally:
            for fd in fds:
                os.close(fd)
        reply["wall"] = round(time.monotonic() - started, 6)
        return reply


def _judge_in_child(
    spec: dict[str, Any],
    message: dict[str, Any],
    fds: list[int],
    path: list[str],
    interpreter: tuple[str, str, str],
) -> dict[str, Any]:
    """Fork, judge in the child, and return what it reported (or why it did not)."""
    report_read, report_write = os.pipe()
    try:
        pid = os.fork()
    except OSError as error:  # out of processes or memory: this sample is not judged
        os.close(report_read)
        os.close(report_write)
        return {
            "report": {
                "outcome": "error",
                "origin": "judge limit",
                "type": "JudgeLost",
                "msg": f"the judge could not start for this sample ({error.strerror})",
            }
        }
    if pid == 0:
        os.close(report_read)
        sys.path[:] = path
        sys.executable, sys.prefix, sys.exec_prefix = interpreter
        _judge_child(spec, message, fds[0], report_write)  # never returns
    os.close(report_write)
    # The child holds the channel now: the sample sees end-of-file when it ends.
    os.close(fds[0])
    fds[0] = os.open(os.devnull, os.O_RDONLY)  # closed by the caller with the rest
    limit = 2 * float(message["timeout"]) + _CHILD_GRACE
    data, overran = _read_report(report_read, time.monotonic() + limit)
    os.close(report_read)
    if overran:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, _STOP)
    _, status = os.waitpid(pid, 0)
    if overran:
        return {"timed_out": True, "report": None}
    try:
        facts = wire.load_json(data) if data else None
    except wire.ProtocolError:
        facts = None
    if isinstance(facts, dict) and (
        facts.get("timed_out") or isinstance(facts.get("report"), dict)
    ):
        return {
            "timed_out": bool(facts.get("timed_out")),
            "report": facts.get("report"),
            "sent": facts.get("sent", 0),
        }
    return {"report": _child_death(status, message)}


def _child_death(status: int, message: dict[str, Any]) -> dict[str, Any]:
    """The report for a judging child that ended without one: its sample's error."""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        seconds = message["limits"]["cpu_seconds"]
        return {
            "outcome": "error",
            "origin": "judge limit",
            "type": "JudgeLimit",
            "msg": f"judging this sample took more than the judge's {seconds} s of CPU time"
            if os.WTERMSIG(status) == signal.SIGXCPU
            else "the judge was killed while judging this sample (CPU or memory limit)",
        }
    return {
        "outcome": "error",
        "origin": "judge limit",
        "type": "JudgeLost",
        "msg": f"the judge ended without a report (wait status {status})",
    }


def _read_report(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything the child writes on ``fd`` (bounded); True if it overran ``deadline``."""
    chunks: list[bytes] = []
    size = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"", True
        if not poller.poll(max(1, int(remaining * 1000))):
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), False
        size += len(chunk)
        if size > _REPORT_BYTES:
            return b"", False
        chunks.append(chunk)


def _judge_child(
    spec: dict[str, Any], message: dict[str, Any], channel_fd: int, out: int
) -> NoReturn:
    """In the forked child: limits, one judgement, the report on ``out``, exit."""
    code = 0
    try:
        cpu = int(message["limits"]["cpu_seconds"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        sys.set_int_max_str_digits(_INT_DIGITS)
        channel = judge.SampleChannel(channel_fd, message["limits"]["max_frame"])
        try:
            facts: dict[str, Any] = {
                "report": judge.judge(spec, channel, message["timeout"]),
                "sent": channel.sent,
            }
        except judge.JudgeTimeout:
            facts = {"timed_out": True, "report": None, "sent": channel.sent}
        view = memoryview(wire.dump_json(facts))
        while view:
            view = view[os.write(out, view) :]
    except BaseException:  # noqa: BLE001 - no report: the parent says the judge was lost
        code = 1
    os._exit(code)
