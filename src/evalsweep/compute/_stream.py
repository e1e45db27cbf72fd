"""Progress over a pipe: the remote ``evalsweep run`` writes it, this side shows it.

``evalsweep run --progress-lines`` reports the engine's progress as one JSON
object per stderr line (prefixed so log lines can be told apart). The target
that started it reads stderr as it arrives and replays each line into the
local progress bars; anything else is a log line and is shown as a note.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from evalsweep.engine import Progress

PREFIX = "@evalsweep-progress "


class LineProgress:
    """The engine's ``Progress`` written as JSON lines (advances at most ~5 per second)."""

    def __init__(self, stream: TextIO | None = None, interval: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.interval = interval
        self._pending = 0
        self._last = 0.0

    def _emit(self, **fields: object) -> None:
        self.stream.write(PREFIX + json.dumps(fields) + "\n")
        self.stream.flush()

    def start(self, label: str, total: int) -> None:
        self._emit(event="start", label=label, total=total)

    def advance(self, count: int) -> None:
        self._pending += count
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._flush(now)

    def _flush(self, now: float) -> None:
        if self._pending:
            self._emit(event="advance", count=self._pending)
            self._pending = 0
        self._last = now

    def finish(self) -> None:
        self._flush(time.monotonic())
        self._emit(event="finish")

    def note(self, message: str) -> None:
        self._emit(event="note", message=message)


def relay(line: str, progress: Progress, prefix: str = "") -> None:
    """Replay one stderr line of a remote run into ``progress``."""
    if not line.startswith(PREFIX):
        if line.strip():
            progress.note(f"{prefix}{line}")
        return
    try:
        fields = json.loads(line[len(PREFIX) :])
    except (ValueError, RecursionError):
        return
    if not isinstance(fields, dict):
        return
    event = fields.get("event")
    # Counts are the remote's text like any other: a line without whole numbers is dropped.
    total, count = fields.get("total", 0), fields.get("count", 0)
    if event == "start" and type(total) is int and total >= 0:
        progress.start(f"{prefix}{fields.get('label', '')}", total)
    elif event == "advance" and type(count) is int and count >= 0:
        progress.advance(count)
    elif event == "finish":
        progress.finish()
    elif event == "note":
        progress.note(f"{prefix}{fields.get('message', '')}")
