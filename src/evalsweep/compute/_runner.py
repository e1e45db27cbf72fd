"""The one audited way to send a command to a target.

Every command evalsweep sends to a machine other than this one (an ssh
command line, a SkyPilot launch, a Ray submission) goes through
:class:`CommandRunner`. It writes the command's exact text to the store's
audit log before it starts (so a crash still leaves it behind), and its exit
code, output size and end time after. The MCP server reuses it, so a person
can read everything done on their machines and cloud account in one place:
``evalsweep audit``.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from evalsweep.store import Store

#: Exit code recorded for a command killed at its time limit (as coreutils' ``timeout``).
TIMED_OUT = 124


@dataclass(frozen=True)
class CommandResult:
    """What a finished command returned."""

    text: str
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    audit_id: int

    @property
    def output_bytes(self) -> int:
        return len(self.stdout) + len(self.stderr)

    def last_error_line(self) -> str:
        """The last non-empty line of stderr, for one-line error messages."""
        lines = [line.strip() for line in self.stderr.decode(errors="replace").splitlines()]
        lines = [line for line in lines if line]
        return lines[-1] if lines else f"exit status {self.exit_code}"


@dataclass
class AuditedCall:
    """A library call (SkyPilot SDK, Ray) being audited; set ``output_bytes`` if known."""

    audit_id: int
    output_bytes: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


class CommandRunner:
    """Runs commands for one target and records each in the store's audit log.

    Args:
        store: the results store whose audit log receives the entries.
        target: the target's name, recorded with each entry.
    """

    def __init__(self, store: Store, target: str) -> None:
        self.store = store
        self.target = target

    def run(
        self,
        argv: Sequence[str],
        *,
        kind: str = "command",
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> CommandResult:
        """Run ``argv``, capturing stdout; stderr lines are also passed to ``on_line`` live.

        Args:
            argv: the command and its arguments (no shell on this side).
            kind: the audit entry's kind (``command``, ``setup``, ``transfer``...).
            timeout: seconds before the command is killed (exit code 124).
            on_line: called with each stderr line as it arrives (progress, logs).
            detail: extra facts recorded with the audit entry.

        Returns:
            The exit code, both outputs and the audit entry's id.
        """
        text = shlex.join(argv)
        entry = self.store.audit_begin(kind, text, target=self.target, detail=detail)
        began = time.monotonic()
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            self.store.audit_end(entry, 127, 0)
            return CommandResult(text, 127, b"", str(exc).encode(), 0.0, entry)
        out: list[bytes] = []
        err: list[bytes] = []
        readers = [
            threading.Thread(target=_drain, args=(process.stdout, out, None), daemon=True),
            threading.Thread(target=_drain, args=(process.stderr, err, on_line), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = TIMED_OUT
        except BaseException:
            process.kill()
            process.wait()
            for reader in readers:
                reader.join()
            self.store.audit_end(entry, -1, sum(map(len, out)) + sum(map(len, err)))
            raise
        for reader in readers:
            reader.join()
        stdout, stderr = b"".join(out), b"".join(err)
        self.store.audit_end(entry, code, len(stdout) + len(stderr))
        return CommandResult(text, code, stdout, stderr, time.monotonic() - began, entry)

    def begin(self, kind: str, text: str, detail: dict[str, Any] | None = None) -> int:
        """Record an asynchronous submission (a Ray task) now; :meth:`end` it when it returns."""
        return self.store.audit_begin(kind, text, target=self.target, detail=detail)

    def end(self, entry: int, exit_code: int, output_bytes: int) -> None:
        self.store.audit_end(entry, exit_code, output_bytes)

    @contextmanager
    def call(
        self, kind: str, text: str, detail: dict[str, Any] | None = None
    ) -> Iterator[AuditedCall]:
        """Audit a library call (``sky.launch(...)``, a Ray submission) like a command.

        The entry ends with exit code 0 when the block finishes, 1 when it raises.
        """
        entry = self.store.audit_begin(kind, text, target=self.target, detail=detail)
        call = AuditedCall(entry)
        try:
            yield call
        except BaseException:
            self.store.audit_end(entry, 1, call.output_bytes)
            raise
        self.store.audit_end(entry, 0, call.output_bytes)


def _drain(
    pipe: IO[bytes] | None, sink: list[bytes], on_line: Callable[[str], None] | None
) -> None:
    if pipe is None:
        return
    for line in iter(pipe.readline, b""):
        sink.append(line)
        if on_line is not None:
            on_line(line.decode(errors="replace").rstrip("\n"))
    pipe.close()
