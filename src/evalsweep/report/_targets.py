"""The compute targets as a terminal table."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text


def render_targets(rows: list[dict[str, Any]]) -> Table:
    """One row per target: name, kind, hardware, hourly rate, whether it has a lifecycle."""
    table = Table(title="evalsweep targets")
    for column in ("name", "kind", "hardware", "rate / h", "lifecycle"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            Text(row["name"]),  # names and hardware come from the user's config: not markup
            Text(row["kind"]),
            Text(row["hardware"]),
            f"{row['hourly_rate']:.2f} {row['currency']}",
            "yes" if row["lifecycle"] else "",
        )
    return table
