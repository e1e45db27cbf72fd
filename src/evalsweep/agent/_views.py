"""Result tables for the chat: the same rich tables as the terminal, as plain text."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from evalsweep.text import visible_console

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument


def table_text(document: ResultDocument, subjects: bool) -> str:
    from evalsweep.report import render_subject_table, render_table, summary_text

    buffer = io.StringIO()
    console = visible_console(file=buffer, width=160, color_system=None, force_terminal=False)
    console.print(render_table(document.results, document.comparisons))
    if subjects:
        console.print(render_subject_table(document.results, document.comparisons))
    return buffer.getvalue() + summary_text(document)


def headline(document: ResultDocument) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Task-level scores and comparisons (subjects dropped), as structured rows."""
    keep = ("checkpoint", "task", "metric", "value", "stderr", "n")
    results = [{k: getattr(r, k) for k in keep} for r in document.results if r.level == "task"]
    comparisons = [dict(c.to_dict()) for c in document.comparisons if c.subject is None]
    return results, comparisons
