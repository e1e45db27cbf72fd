"""The compute targets as a terminal table."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def render_targets(rows: list[dict[str, Any]]) -> Table:
    """One row per target: name, kind, hardware, hourly rate, whether it has a lifecycle."""
    table = Table(title="evalsweep targets")
    for column in ("name", "kind", "hardware", "rate / h", "lifecycle"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row["name"],
            row["kind"],
            row["hardware"],
            f"{row['hourly_rate']:.2f} {row['currency']}",
            "yes" if row["lifecycle"] else "",
        )
    return table
