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
    """An entry's text; a refusal's also says what was received, exactly (ASCII JSON)."""
    detail = entry.get("detail") or {}
    received = detail.get("received") if isinstance(detail, dict) else None
    if not received:
        return str(entry["text"])
    more = detail.get("received_chars")
    cut = f" (first {len(received)} of {more} characters)" if more else ""
    return f"{entry['text']}\nreceived by {detail.get('tool', '?')}{cut}: {received}"


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
            Text(visible(_text(entry), newlines=True)),
        )
    return table
