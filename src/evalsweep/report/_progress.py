"""Progress bars on stderr (rich), one per checkpoint and task, with rate and ETA."""

from __future__ import annotations

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


class RichProgress:
    """Implements the engine's ``Progress`` protocol with rich bars on stderr."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or Console(stderr=True)
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
