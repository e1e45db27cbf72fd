"""The flips view: questions that went from right to wrong (and back) between two checkpoints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table


def render_flips(flips: Sequence[Mapping[str, Any]], baseline: str, candidate: str) -> Table:
    regressed = sum(1 for f in flips if f["direction"] == "regressed")
    table = Table(
        title=f"{candidate} vs {baseline}: {regressed} regressed, {len(flips) - regressed} fixed",
        title_justify="left",
        show_lines=True,
    )
    for name in ("", "task", "question", "target", "baseline", "candidate"):
        table.add_column(name, overflow="fold")
    for flip in flips:
        mark = "[red]▼[/red]" if flip["direction"] == "regressed" else "[green]▲[/green]"
        task = flip["task"] + (f" / {flip['subject']}" if flip["subject"] else "")
        table.add_row(
            mark,
            f"{task}\n#{flip['doc_id']}",
            _short(flip["question"], 300),
            flip["target"],
            _answer(flip["baseline_prediction"], flip["baseline_response"]),
            _answer(flip["candidate_prediction"], flip["candidate_response"]),
        )
    return table


def _answer(prediction: str, response: str | None) -> str:
    if response is None:
        return prediction
    return f"{prediction}\n[dim]{_short(response, 200)}[/dim]"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
