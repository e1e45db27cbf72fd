"""The audit log as a terminal table."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text


def _clock(value: float | None) -> str:
    if value is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


def render_audit(entries: list[dict[str, Any]]) -> Table:
    """One row per command, approval or refusal, oldest first, with the exact text."""
    table = Table(title="evalsweep audit log", show_lines=False)
    for column in ("id", "kind", "target", "started", "ended", "exit", "output bytes", "text"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            str(entry["id"]),
            Text(entry["kind"]),
            Text(entry.get("target") or ""),
            _clock(entry["started"]),
            _clock(entry.get("ended")),
            "" if entry.get("exit_code") is None else str(entry["exit_code"]),
            "" if entry.get("output_bytes") is None else str(entry["output_bytes"]),
            Text(entry["text"]),  # commands as run: data, never markup
        )
    return table
