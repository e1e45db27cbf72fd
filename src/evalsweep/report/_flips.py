"""The flips view: questions that went from right to wrong (and back) between two checkpoints.

Questions, answers and checkpoint names are data, not rich markup: a model's
``[/b]`` or a question's ``f[x]`` must show as written, so every one goes in
as :class:`~rich.text.Text`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text


def render_flips(flips: Sequence[Mapping[str, Any]], baseline: str, candidate: str) -> Table:
    regressed = sum(1 for f in flips if f["direction"] == "regressed")
    table = Table(
        title=Text(
            f"{candidate} vs {baseline}: {regressed} regressed, {len(flips) - regressed} fixed"
        ),
        title_justify="left",
        show_lines=True,
    )
    for name in ("", "task", "question", "target", "baseline", "candidate"):
        table.add_column(name, overflow="fold")
    for flip in flips:
        regression = flip["direction"] == "regressed"
        mark = Text("▼", style="red") if regression else Text("▲", style="green")
        task = flip["task"] + (f" / {flip['subject']}" if flip["subject"] else "")
        table.add_row(
            mark,
            Text(f"{task}\n#{flip['doc_id']}"),
            Text(_short(flip["question"], 300)),
            Text(str(flip["target"])),
            _answer(flip["baseline_prediction"], flip["baseline_response"]),
            _answer(flip["candidate_prediction"], flip["candidate_response"]),
        )
    return table


def _answer(prediction: str, response: str | None) -> Text:
    text = Text(str(prediction))
    if response is not None:
        text.append("\n" + _short(response, 200), style="dim")
    return text


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
