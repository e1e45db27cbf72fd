"""Targets with a lifecycle (deploy, stop, start, terminate) and the audited runner.

A compute target that rents a machine may implement :class:`LifecycleTarget`;
the server checks ``isinstance`` at run time and offers the four actions only
for such targets, each behind a quote, an approval and the audit log. Targets
run their commands through :class:`AuditedRunner`, which writes the exact
command text before it runs and its exit code and output size after.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from evalsweep.store import Store

ACTIONS = ("deploy", "stop", "start", "terminate")
#: Output kept from one command (the whole output's size is still audited).
MAX_CAPTURE = 5_000_000


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    exit_code: int
    output: str
    output_bytes: int


class AuditedRunner:
    """Runs commands for one target, each one written to the audit log with its exact text."""

    def __init__(
        self, store: Store, target: str, redact: Callable[[str], str] = lambda text: text
    ) -> None:
        self.store = store
        self.target = target
        self.redact = redact

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = 600.0,
    ) -> CommandResult:
        text = shlex.join(argv)
        entry = self.store.audit_begin("command", text, target=self.target)
        try:
            done = subprocess.run(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or b""
            self.store.audit_end(entry, None, len(out))
            text = self.redact(out[:MAX_CAPTURE].decode("utf-8", "replace"))
            return CommandResult(tuple(argv), -1, text, len(out))
        except OSError as exc:
            self.store.audit_end(entry, None, 0)
            return CommandResult(tuple(argv), -1, f"cannot run: {exc.strerror}", 0)
        self.store.audit_end(entry, done.returncode, len(done.stdout))
        output = self.redact(done.stdout[:MAX_CAPTURE].decode("utf-8", "replace"))
        return CommandResult(tuple(argv), done.returncode, output, len(done.stdout))


@runtime_checkable
class LifecycleTarget(Protocol):
    """A target whose machine is rented: it can be deployed, stopped, started, terminated.

    Each method does the one action through ``runner`` (so every command is
    audited) and returns a one-line description of what happened. The server
    calls them only after the person approved a quote for that action.
    """

    name: str

    def deploy(self, runner: AuditedRunner) -> str:
        """Create the machine; billing starts at the target's hourly rate."""
        ...

    def stop(self, runner: AuditedRunner) -> str:
        """Stop the machine, keeping its disk; compute billing stops."""
        ...

    def start(self, runner: AuditedRunner) -> str:
        """Start a stopped machine; billing resumes."""
        ...

    def terminate(self, runner: AuditedRunner) -> str:
        """Destroy the machine and its disk; billing ends."""
        ...
