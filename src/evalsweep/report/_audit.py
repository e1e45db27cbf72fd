"""The audit log as a terminal table."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from evalsweep.text import visible


def _clock(value: float | None) -> str:
    if value is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


def _text(entry: dict[str, Any]) -> str:
    """An entry's text, one line as the one renderer shows it (a newline in it is shown as
    ``\\n``, so no entry can draw a line of its own); a refusal's second line says what was
    received, exactly (ASCII-escaped JSON)."""
    line = visible(str(entry["text"]))
    detail = entry.get("detail") or {}
    received = detail.get("received") if isinstance(detail, dict) else None
    if not received:
        return line
    more = detail.get("received_chars")
    cut = f" (first {len(received)} of {more} characters)" if more else ""
    tool = visible(str(detail.get("tool", "?")))
    return f"{line}\nreceived by {tool}{cut}: {visible(str(received))}"


def render_audit(entries: list[dict[str, Any]]) -> Table:
    """One row per command, approval or refusal, oldest first, with the exact text."""
    table = Table(title="evalsweep audit log", show_lines=False)
    for column in ("id", "kind", "target", "started", "ended", "exit", "output bytes", "text"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            str(entry["id"]),
            Text(visible(entry["kind"])),
            Text(visible(entry.get("target") or "")),
            _clock(entry["started"]),
            _clock(entry.get("ended")),
            "" if entry.get("exit_code") is None else str(entry["exit_code"]),
            "" if entry.get("output_bytes") is None else str(entry["output_bytes"]),
            # Commands as run: data, never markup; escaped before the table is laid out (the
            # console escapes again what reaches it, so this only keeps the columns true).
            Text(_text(entry)),
        )
    return table
