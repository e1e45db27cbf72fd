"""The judge sandbox's zygote work: keep compiled tests, judge one sample at a time.

The judge runs only the benchmark's own test code, on plain data, so it is not
forked per sample (a fork costs more than most HumanEval tests). Each sample
gets a fresh namespace and a wall-clock alarm; if this process ever stops
answering, the parent replaces the whole sandbox. Right after start-up it
drops every privilege for good (it mounts nothing and forks nothing).
"""

from __future__ import annotations

import marshal
import os
import resource
import signal
import time
from types import CodeType
from typing import TYPE_CHECKING, Any

from . import confine, judge, wire

if TYPE_CHECKING:
    from .zygote import Zygote


# The largest plan (calls and answers, as JSON) handed to the parent for the other judges.
_SHARED_PLAN_BYTES = 256 * 1024


def compile_test(prelude: str | None, test: str) -> tuple[CodeType | None, CodeType]:
    """A test's code and its prelude's, as the judge runs them (raises SyntaxError)."""
    return (
        None if prelude is None else compile(prelude, "<prompt>", "exec", dont_inherit=True),
        compile(test, "<test>", "exec", dont_inherit=True),
    )


class JudgeRole:
    """Requests ``test`` (register and compile a test) and ``judge`` (run it)."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self._tests: dict[str, dict[str, Any]] = {}

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
            cpu_seconds=limits["cpu_seconds"],
            processes=limits["processes"],
        )
        plan = confine.Confinement(
            # CPU time adds up over every sample this process judges: no limit
            # here, the per-sample alarm bounds each judgement instead.
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
                "calls": tuple(message.get("calls", ())),
                "seed": int(message["key"], 16),
                "plan": None,  # a judge.CallPlan, once a sample has passed
                "unstable": False,  # two passing samples were asked different calls
            }
        except (SyntaxError, ValueError) as error:
            return {"t": "test_error", "key": message["key"], "msg": str(error)[:500]}
        self._tests[message["key"]] = spec
        return {"t": "test_ok", "key": message["key"]}

    def add_plan(self, message: dict[str, Any]) -> dict[str, Any]:
        """Take a plan of a test's calls that another judge made (see ``judge.CallPlan``)."""
        spec = self._tests.get(message["key"])
        if spec is not None and spec["plan"] is None and not spec["unstable"]:
            try:
                calls = [(str(text).encode("ascii"), answer) for text, answer in message["calls"]]
                spec["plan"] = judge.CallPlan(calls)
            except (ValueError, TypeError, KeyError, wire.ProtocolError):
                pass  # no plan: one call at a time, as without it
        return {"t": "plan_ok", "key": message["key"]}

    def judge(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Judge one sample over the socket in ``fds``, under a wall-clock alarm."""
        reply: dict[str, Any] = {"t": "result", "id": message["id"], "timed_out": False}
        spec = self._tests.get(message["key"])
        if spec is None:
            for fd in fds:
                os.close(fd)
            reply["report"] = {
                "outcome": "error",
                "origin": "test",
                "msg": "the test code does not compile",
            }
            return reply
        channel = judge.SampleChannel(fds[0], message["limits"]["max_frame"], spec["plan"])
        started = time.monotonic()
        try:
            reply["report"] = judge.judge(spec, channel, message["timeout"])
            if reply["report"]["outcome"] == "passed":
                try:
                    reply.update(_learn_calls(spec, channel))
                except Exception:  # noqa: BLE001 - a plan only saves time: go without
                    spec["plan"], spec["unstable"] = None, True
        except judge.JudgeTimeout:
            reply["timed_out"] = True
            reply["report"] = None
        finally:
            # The sample sees end-of-file and exits; its zygote sees the
            # second descriptor close and stops it if it does not.
            for fd in fds:
                os.close(fd)
        reply["wall"] = round(time.monotonic() - started, 6)
        reply["sent"] = channel.sent
        return reply


def _learn_calls(spec: dict[str, Any], channel: judge.SampleChannel) -> dict[str, Any]:
    """After a pass: check the test's plan, or make one (and hand it to the parent to share)."""
    plan = spec["plan"]
    if plan is not None:
        if channel.diverged or channel.made != len(plan.messages):
            spec["plan"], spec["unstable"] = None, True
            return {"unstable": True}
        return {}
    record = channel.record
    if spec["unstable"] or record is None or len(record) < 2:
        return {}
    try:  # only plain answers: an object the test goes on to use is not planned
        calls = [(message, wire.encode(answer, wire.not_plain)) for message, answer in record]
    except TypeError:
        return {}
    spec["plan"] = judge.CallPlan(calls)
    shared = [[message.decode("ascii"), answer] for message, answer in calls]
    if len(wire.dump_json(shared)) > _SHARED_PLAN_BYTES:
        return {}
    return {"calls": shared}
