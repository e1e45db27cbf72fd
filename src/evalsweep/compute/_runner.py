"""The one audited way to send a command to a target.

Every command evalsweep sends to a machine other than this one (an ssh
command line, a SkyPilot launch, a Ray submission) goes through
:class:`CommandRunner`. It writes the command's exact text to the store's
audit log before it starts (so a crash still leaves it behind), and its exit
code, output size and end time after. The MCP server reuses it (with the
environment a command needs and a ``redact`` that hides secret values from
the log and from what callers see), so a person can read everything done on
their machines and cloud account in one place: ``evalsweep audit``.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from evalsweep.secrets import StoredSecrets
from evalsweep.store import Store

#: Exit code recorded for a command killed at its time limit (as coreutils' ``timeout``).
TIMED_OUT = 124


@dataclass(frozen=True)
class CommandResult:
    """What a finished command returned (redacted when the runner redacts).

    ``text`` is the command line as audited; ``stdout`` and ``stderr`` are the
    captured output; ``output_bytes`` is the size of the output as produced.
    """

    text: str
    exit_code: int
    stdout: bytes
    stderr: bytes
    seconds: float
    audit_id: int
    produced_bytes: int | None = None

    @property
    def output_bytes(self) -> int:
        if self.produced_bytes is not None:
            return self.produced_bytes
        return len(self.stdout) + len(self.stderr)

    def last_error_line(self) -> str:
        """The last non-empty line of stderr, for one-line error messages."""
        lines = [line.strip() for line in self.stderr.decode(errors="replace").split("\n")]
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
        redact: replaces secret values in text. By default every stored secret, as stored
            when each command runs (``evalsweep.secrets.StoredSecrets``), whichever target
            runs and whatever it was given: the audit log records the redacted command
            text (the exact text whenever it holds no secret), and callers get redacted
            output.
    """

    def __init__(
        self, store: Store, target: str, redact: Callable[[str], str] | None = None
    ) -> None:
        self.store = store
        self.target = target
        self.redact: Callable[[str], str] | StoredSecrets = (
            redact if redact is not None else StoredSecrets()
        )

    def _masks(self) -> bool:
        """Whether there is anything to mask (a given function always; stored secrets when
        there are some)."""
        return bool(self.redact) if isinstance(self.redact, StoredSecrets) else True

    def _clean(self, text: str) -> str:
        return self.redact(text)  # stored secrets leave a text without any as it is

    def _clean_detail(self, detail: dict[str, Any] | None) -> dict[str, Any] | None:
        if not self._masks() or detail is None:
            return detail
        return {key: _redacted(value, self.redact) for key, value in detail.items()}

    def _clean_bytes(self, data: bytes) -> bytes:
        if not self._masks() or not data:
            return data
        return self.redact(data.decode(errors="replace")).encode()

    def run(
        self,
        argv: Sequence[str],
        *,
        kind: str = "command",
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        detail: dict[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run ``argv``, capturing stdout; stderr lines are also passed to ``on_line`` live.

        Args:
            argv: the command and its arguments (no shell on this side).
            kind: the audit entry's kind (``command``, ``setup``, ``transfer``...).
            timeout: seconds before the command is killed (exit code 124).
            on_line: called with each stderr line as it arrives (progress, logs).
            detail: extra facts recorded with the audit entry.
            env: the command's whole environment (default: this process's).
            stdin: bytes fed to the command's stdin (never audited: secrets travel here).

        Returns:
            The exit code, both outputs and the audit entry's id.
        """
        text = self._clean(shlex.join(argv))
        entry = self.store.audit_begin(
            kind, text, target=self.target, detail=self._clean_detail(detail)
        )
        began = time.monotonic()
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env) if env is not None else None,
            )
        except OSError as exc:
            self.store.audit_end(entry, 127, 0)
            return CommandResult(text, 127, b"", self._clean(str(exc)).encode(), 0.0, entry)
        out: list[bytes] = []
        err: list[bytes] = []
        live = None if on_line is None else (lambda line: on_line(self._clean(line)))
        readers = [
            threading.Thread(target=_drain, args=(process.stdout, out, None), daemon=True),
            threading.Thread(target=_drain, args=(process.stderr, err, live), daemon=True),
        ]
        if stdin is not None:
            readers.append(threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True))
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
        produced = len(stdout) + len(stderr)
        self.store.audit_end(entry, code, produced)
        return CommandResult(
            text,
            code,
            self._clean_bytes(stdout),
            self._clean_bytes(stderr),
            time.monotonic() - began,
            entry,
            produced,
        )

    def begin(self, kind: str, text: str, detail: dict[str, Any] | None = None) -> int:
        """Record an asynchronous submission (a Ray task) now; :meth:`end` it when it returns."""
        return self.store.audit_begin(
            kind, self._clean(text), target=self.target, detail=self._clean_detail(detail)
        )

    def end(self, entry: int, exit_code: int, output_bytes: int) -> None:
        self.store.audit_end(entry, exit_code, output_bytes)

    @contextmanager
    def call(
        self, kind: str, text: str, detail: dict[str, Any] | None = None
    ) -> Iterator[AuditedCall]:
        """Audit a library call (``sky.launch(...)``, a Ray submission) like a command.

        The entry ends with exit code 0 when the block finishes, 1 when it raises.
        """
        entry = self.store.audit_begin(
            kind, self._clean(text), target=self.target, detail=self._clean_detail(detail)
        )
        call = AuditedCall(entry)
        try:
            yield call
        except BaseException:
            self.store.audit_end(entry, 1, call.output_bytes)
            raise
        self.store.audit_end(entry, 0, call.output_bytes)


def _redacted(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, redact) for item in value]
    return value


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    if pipe is None:
        return
    try:
        pipe.write(data)
        pipe.close()
    except OSError:  # the command ended without reading it
        pass


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
