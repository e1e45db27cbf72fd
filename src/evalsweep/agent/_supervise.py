"""The parent of one background job: runs it, redacts its output, records its end.

Started detached by the server (``python -m evalsweep.agent._supervise``) in
its own process group, so cancelling a job kills the whole group and the job
outlives the server. It copies the job's output line by line into the log
file with every secret's value replaced, turns the job's progress lines into
documents done per (checkpoint, task) in the store and the log (every few
seconds), stops the job at its deadline (the end of its spend reservation, at
most ``max_job_hours``) even when no server is watching, and writes the exit
status, end time, output size and estimate against actual to the store.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from evalsweep._interval import progress_interval
from evalsweep.secrets import redactor

#: Names of the environment variables whose values must never reach the log.
REDACT_ENV = "EVALSWEEP_REDACT_NAMES"
#: How often progress reaches the store and the log while a job runs (unless
#: ``EVALSWEEP_PROGRESS_INTERVAL`` says otherwise).
PROGRESS_EVERY_S = 2.0
#: Between the stop signal at the deadline and the kill.
STOP_GRACE_S = 0.5
#: ``evalsweep run --progress-lines`` prefix (``evalsweep.compute._stream.PREFIX``).
PROGRESS_PREFIX = b"@evalsweep-progress "


def _log(path: str) -> BinaryIO:
    """The job's log, to append to: never through a link (the server made it, 0600, in the
    job's private folder)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "ab", buffering=0)


def _count(value: object) -> int | None:
    """A count a progress line gave, or None when it is not a whole number of 0 or more."""
    return value if type(value) is int and value >= 0 else None


class Tracker:
    """Requests answered per label ('reference · task'), from the job's progress lines.

    What a progress line says is the job's text like any other: its label and note are
    masked (``redact``) before they reach the store or the log, and a line that does not
    hold what a progress line holds is dropped, never an error of the supervisor's.
    """

    def __init__(self, store: str, job: str, redact: Callable[[str], str]) -> None:
        self.store, self.job, self.redact = store, job, redact
        self.parts: dict[str, list[int]] = {}
        self.current: str | None = None
        self.changed = False
        self.last = 0.0
        self.every = progress_interval(PROGRESS_EVERY_S)

    def line(self, raw: bytes) -> bytes | None:
        """The line to log for ``raw`` (None for a progress line, which is counted)."""
        if not raw.startswith(PROGRESS_PREFIX):
            return raw
        try:
            event = json.loads(raw[len(PROGRESS_PREFIX) :])
        except (ValueError, RecursionError):
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("event")
        if kind == "start":
            total = _count(event.get("total", 0))
            if total is None:
                return None
            self.current = self.redact(str(event.get("label", "")))
            self.parts[self.current] = [0, total]
        elif kind == "advance" and self.current in self.parts:
            count = _count(event.get("count", 0))
            if count is None:
                return None
            part = self.parts[self.current]
            part[0] = min(part[0] + count, part[1])
        elif kind == "finish" and self.current in self.parts:
            self.parts[self.current][0] = self.parts[self.current][1]
            self.current = None
        elif kind == "note":
            return f"{event.get('message', '')}\n".encode("utf-8", "replace")
        self.changed = True
        return None

    def flush(self, force: bool = False) -> bytes:
        """Write the counts to the store (at most every ``self.every`` s); the log line."""
        now = time.monotonic()
        if not self.changed or (not force and now - self.last < self.every):
            return b""
        self.changed, self.last = False, now
        _write_progress(self.store, self.job, self.parts)
        text = "; ".join(f"{label} {d}/{t} requests" for label, (d, t) in self.parts.items())
        return f"evalsweep: progress: {text}\n".encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalsweep.agent._supervise")
    parser.add_argument("--store", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--audit", type=int, required=True)
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    stopped = {"reason": ""}
    signal.signal(signal.SIGTERM, lambda *_: stopped.update(reason="terminated"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _record_pid(args.store, args.job) or stopped["reason"]:
        # Stopped before its command started (cancelled while it was being started).
        with _log(args.log) as early:
            early.write(b"evalsweep: job stopped before it started\n")
        _record_end(args, -1, "cancelled", time.time())
        return 0

    env = dict(os.environ)
    redact = job_redactor(env)
    env.pop(REDACT_ENV, None)

    with _log(args.log) as log:
        if time.time() >= args.deadline:
            log.write(b"evalsweep: job stopped at its deadline before it started\n")
            _record_end(args, -1, "deadline", time.time())
            return 0
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        exited = {"at": 0.0}

        def at_deadline() -> None:
            if child.poll() is None:
                stopped["reason"] = "deadline"
                child.terminate()
                try:
                    child.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            exited["at"] = exited["at"] or time.time()

        timer = threading.Timer(max(args.deadline - time.time(), 0.0), at_deadline)
        timer.daemon = True
        timer.start()
        tracker = Tracker(args.store, args.job, redact)
        assert child.stdout is not None
        for raw in iter(child.stdout.readline, b""):
            line = tracker.line(raw)
            if line is not None:
                # Decoded so that bytes that are not UTF-8 come back unchanged.
                text = line.decode("utf-8", "surrogateescape")
                log.write(redact(text).encode("utf-8", "surrogateescape"))
            log.write(tracker.flush())
        code = child.wait()
        exited["at"] = exited["at"] or time.time()
        timer.cancel()
        log.write(tracker.flush(force=True))
        if stopped["reason"] == "deadline":
            log.write(b"evalsweep: job stopped at its deadline (spend reservation or time limit)\n")
        log.write(f"evalsweep: job exited with status {code}\n".encode())
    _record_end(args, code, stopped["reason"], exited["at"])
    return 0


def _record_pid(store_path: str, job: str) -> bool:
    """This supervisor's pid and start time in the job's row, first thing: a server that
    reads the row while the one that started it has not written them yet sees a job being
    started, not a lost one. False when the job is no longer running (it was cancelled
    while it was being started): then its command must not start."""
    from evalsweep.store import Store

    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    with Store(store_path) as store:
        with store.connection:
            store.connection.execute(
                "UPDATE agent_jobs SET pid = ?, pid_start = ? WHERE job_id = ? AND pid IS NULL",
                (os.getpid(), stat[19], job),
            )
        row = store.connection.execute(
            "SELECT status FROM agent_jobs WHERE job_id = ?", (job,)
        ).fetchone()
    return row is None or row[0] == "running"  # no row: run by hand, as a test does


def _write_progress(store_path: str, job: str, parts: dict[str, list[int]]) -> None:
    from evalsweep.store import Store

    with Store(store_path) as store, store.connection:
        store.connection.execute(
            "UPDATE agent_jobs SET progress = ? WHERE job_id = ?", (json.dumps(parts), job)
        )


def _record_end(args: argparse.Namespace, code: int, reason: str, ended: float) -> None:
    from evalsweep.agent._ledger import close_item
    from evalsweep.store import Store

    if code == 0:  # it finished its work, whatever stop came after
        status, why = "finished", None
    elif reason == "deadline":
        status, why = "stopped", "deadline reached (its spend reservation, or max_job_hours)"
    else:
        status, why = "failed", f"exit status {code}"
    with Store(args.store) as store:
        with store.connection:
            # A stop the server already recorded (cancelled, stopped) is kept, unless the
            # job had finished: then it is finished.
            store.connection.execute(
                "UPDATE agent_jobs SET "
                "status = CASE WHEN status = 'running' OR ? = 'finished' THEN ? ELSE status END, "
                "reason = CASE WHEN ? = 'finished' THEN NULL ELSE COALESCE(reason, ?) END, "
                "exit_code = ?, ended = ? WHERE job_id = ?",
                (status, status, status, why, code, ended, args.job),
            )
        row = store.connection.execute(
            "SELECT started, estimated_s, target FROM agent_jobs WHERE job_id = ?", (args.job,)
        ).fetchone()
        with store.connection:  # the ledger ends when the job's process ended
            store.connection.execute(
                "UPDATE agent_ledger SET ended = ? WHERE item = ?", (ended, args.job)
            )
        close_item(store, args.job, ended)
        size = Path(args.log).stat().st_size
        if row is not None:
            actual = ended - float(row[0])
            estimated = "unknown" if row[1] is None else f"{float(row[1]):.1f} s"
            line = f"evalsweep: took {actual:.1f} s, estimated {estimated}\n".encode()
            with _log(args.log) as log:
                log.write(line)
            size += len(line)
            if reason == "deadline" and code != 0:
                store.audit_event(
                    "stop",
                    f"stop job {args.job}: its supervisor stopped it at its deadline",
                    target=row[2],
                    detail={"job": args.job},
                )
        store.audit_end(args.audit, code, size)


def job_redactor(environ: Mapping[str, str]) -> Callable[[str], str]:
    """What masks the secrets the job was given: those ``REDACT_ENV`` names."""
    names = [n for n in environ.get(REDACT_ENV, "").split(",") if n]
    return redactor({n: environ[n] for n in names if environ.get(n)})


def masked_main() -> int:
    """``main``, whose own failure (never the job's) is one line in the log with every secret
    the job was given masked, never a traceback that could quote one."""
    redact = job_redactor(os.environ)
    try:
        return main()
    except Exception as exc:
        sys.stderr.write(
            redact(f"evalsweep: the job's supervisor failed: {type(exc).__name__}: {exc}\n")
        )
        return 1


if __name__ == "__main__":
    sys.exit(masked_main())
