"""The side-by-side table: one row per checkpoint, one column per task metric.

With comparisons, each candidate's cell also shows its difference from the
baseline in percentage points and a verdict mark: red for a regression, green for an improvement.
Columns fold rather than cut: a name that does not fit wraps onto the next line,
it never loses its end to an ellipsis.
Checkpoint, task and subject names go in as :class:`~rich.text.Text` (or
escaped, in headers), so a name like ``run[v2]`` shows as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evalsweep._numbers import difference, fixed
from evalsweep.report._schema import ResultRow
from evalsweep.stats import Comparison
from evalsweep.text import visible

SHORT = {
    "exact_match,strict-match": "exact_match (strict)",
    "exact_match,flexible-extract": "exact_match (flexible)",
}
MARKS = {
    "improvement": ("▲", "green"),
    "regression": ("▼", "red"),
    "no significant change": ("=", "dim"),
}


def display_names(references: Sequence[str]) -> dict[str, str]:
    """Short labels: checkpoint folders that share a parent are shown without it; every
    label through the one renderer (:func:`evalsweep.text.visible`)."""
    if len(references) < 2 or not all("/" in r for r in references):
        return {r: visible(r) for r in references}
    parts = [r.rstrip("/").split("/") for r in references]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    if common == 0 or not all(r.startswith(("/", ".", "~")) for r in references):
        return {r: visible(r) for r in references}
    return {r: visible("/".join(p[common:])) for r, p in zip(references, parts, strict=True)}


def render_table(
    results: Sequence[ResultRow],
    comparisons: Sequence[Comparison] = (),
    title: str = "evalsweep results",
    shots: Mapping[str, int] | None = None,
) -> Table:
    """Build the rich table from the result document's ``results`` and ``comparisons``.

    ``shots``: each task's few-shot count, shown under its name (a suite such as
    ``leaderboard`` runs its tasks at different counts).
    """
    headline = [r for r in results if r.level == "task"]
    columns = list(dict.fromkeys((r.task, r.metric) for r in headline))
    checkpoints = list(dict.fromkeys(r.checkpoint for r in headline))
    cells = {(r.checkpoint, r.task, r.metric): r for r in headline}
    verdicts = {(c.candidate, c.task, c.metric): c for c in comparisons if c.subject is None}
    baseline = comparisons[0].baseline if comparisons else None
    names = display_names(checkpoints)
    table = Table(title=title, title_justify="left")
    table.add_column("checkpoint", style="bold", overflow="fold")
    for task, metric in columns:
        n = next((cells[(c, task, metric)].n for c in checkpoints if (c, task, metric) in cells), 0)
        shot = f" ({shots[task]}-shot)" if shots and task in shots else ""
        header = escape(f"{task}{shot}\n{SHORT.get(metric, metric)}\nn={n}")
        table.add_column(header, justify="right", overflow="fold")
    for checkpoint in checkpoints:
        label = names[checkpoint] + (" (baseline)" if checkpoint == baseline else "")
        row: list[Text | str] = [Text(label)]
        for task, metric in columns:
            cell = cells.get((checkpoint, task, metric))
            row.append(_cell(cell, verdicts.get((checkpoint, task, metric))))
        table.add_row(*row)
    return table


def _cell(cell: ResultRow | None, comparison: Comparison | None) -> Text:
    if cell is None:
        return Text("—", style="dim")
    text = Text(fixed(cell.value))
    if cell.stderr is not None:
        text.append(f" ± {fixed(cell.stderr)}", style="dim")
    if comparison is not None:
        mark, style = MARKS.get(comparison.verdict.value, ("?", ""))
        text.append(f"\nΔ {difference(comparison.delta)} {mark}", style=style)
    return text


def render_subject_table(
    results: Sequence[ResultRow], comparisons: Sequence[Comparison] = ()
) -> Table:
    """MMLU per subject: one row per subject, one column per checkpoint; significant rows first."""
    subject_rows = [r for r in results if r.level == "subject"]
    checkpoints = list(dict.fromkeys(r.checkpoint for r in subject_rows))
    cells = {(r.checkpoint, r.task, r.group or ""): r for r in subject_rows}
    verdicts = {(c.candidate, c.task, c.subject): c for c in comparisons if c.subject}
    keys = list(dict.fromkeys((r.task, r.group or "") for r in subject_rows))

    def significance(key: tuple[str, str]) -> tuple[int, float]:
        found = [verdicts[(c, *key)] for c in checkpoints if (c, *key) in verdicts]
        moved = any(v.verdict.value != "no significant change" for v in found)
        p_min = min((v.p_adjusted for v in found), default=1.0)
        return (0 if moved else 1, p_min)

    keys.sort(key=significance)
    table = Table(title="per subject", title_justify="left")
    table.add_column("task / subject", style="bold", overflow="fold")
    names = display_names(checkpoints)
    for checkpoint in checkpoints:
        table.add_column(escape(names[checkpoint]), justify="right", overflow="fold")
    for task, subject in keys:
        row: list[Text | str] = [Text(f"{task} / {subject}")]
        for checkpoint in checkpoints:
            row.append(
                _cell(
                    cells.get((checkpoint, task, subject)),
                    verdicts.get((checkpoint, task, subject)),
                )
            )
        table.add_row(*row)
    return table
