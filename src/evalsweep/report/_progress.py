"""Progress on stderr: rich bars on a terminal, plain lines anywhere else.

A bar redrawn in place is for a person watching; captured into a CI log or an
agent's background job it comes out as one frame cut to the console's width
("24…"). So when stderr is not a terminal, progress is plain lines instead:
one when a (checkpoint, task) starts, one every ``EVALSWEEP_PROGRESS_INTERVAL``
seconds (default 10) while it runs, and one when it ends, each with the task,
checkpoint, done/total, rate and ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from evalsweep._interval import progress_interval
from evalsweep.text import visible_console

DEFAULT_INTERVAL = 10.0


def progress_display(console: Console, enabled: bool = True) -> RichProgress | PlainProgress:
    """Bars when ``console`` writes to a terminal, plain lines when it writes to a file or pipe."""
    if console.is_terminal:
        return RichProgress(console, enabled)
    return PlainProgress(console, enabled)


def plain_interval() -> float:
    """Seconds between plain progress lines: ``$EVALSWEEP_PROGRESS_INTERVAL`` or 10."""
    return progress_interval(DEFAULT_INTERVAL)


class PlainProgress:
    """Implements the engine's ``Progress`` protocol with plain lines at a steady interval."""

    def __init__(
        self,
        console: Console | None = None,
        enabled: bool = True,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console or visible_console(stderr=True)
        self.enabled = enabled
        self.interval = plain_interval() if interval is None else interval
        self._clock = clock
        self._label: str | None = None
        self._total = 0
        self._done = 0
        self._started_at = 0.0
        self._last_line = 0.0

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _line(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._done = label, total, 0
        self._started_at = self._last_line = self._clock()
        self._line(f"{label}: 0/{total}, starting")

    def advance(self, count: int) -> None:
        if self._label is None:
            return
        self._done += count
        now = self._clock()
        if now - self._last_line >= self.interval and self._done < self._total:
            self._last_line = now
            self._line(self._status(now))

    def finish(self) -> None:
        if self._label is None:
            return
        now = self._clock()
        elapsed = now - self._started_at
        rate = f", {self._done / elapsed:,.1f}/s" if elapsed > 0 and self._done else ""
        self._line(f"{self._label}: {self._done}/{self._total} done in {_clock(elapsed)}{rate}")
        self._label = None

    def note(self, message: str) -> None:
        self._line(message)

    def _status(self, now: float) -> str:
        elapsed = now - self._started_at
        share = f" ({self._done / self._total:.0%})" if self._total else ""
        text = f"{self._label}: {self._done}/{self._total}{share}"
        if elapsed > 0 and self._done:
            rate = self._done / elapsed
            text += f", {rate:,.1f}/s, eta {_clock(max(self._total - self._done, 0) / rate)}"
        else:
            text += ", rate not known yet, eta not known yet"
        return text


def _clock(seconds: float) -> str:
    """Seconds as h:mm:ss, as the bars show them."""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class RichProgress:
    """Implements the engine's ``Progress`` protocol with rich bars on stderr."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or visible_console(stderr=True)
        self.enabled = enabled
        self._bars = Progress(
            # Labels name checkpoints and files: shown as written, never read as markup.
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not enabled,
        )
        self._current: TaskID | None = None
        self._started = False

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._bars.stop()

    def _ensure_started(self) -> None:
        # Started on first use, so an error raised before any work prints no bar.
        if not self._started:
            self._bars.start()
            self._started = True

    def start(self, label: str, total: int) -> None:
        self._ensure_started()
        self._current = self._bars.add_task(label, total=total, rate="")

    def advance(self, count: int) -> None:
        if self._current is None:
            return
        self._bars.advance(self._current, count)
        task = self._bars.tasks[self._bars.task_ids.index(self._current)]
        speed = task.speed
        if speed:
            self._bars.update(self._current, rate=f"{speed:,.1f} req/s")

    def finish(self) -> None:
        self._current = None

    def note(self, message: str) -> None:
        if self.enabled:
            self._ensure_started()
            self._bars.console.print(message, style="dim", markup=False, highlight=False)
