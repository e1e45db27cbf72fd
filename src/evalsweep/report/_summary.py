"""The verdict in words: what the marks mean, what moved, and what could not have been seen.

A table of "Δ +1.5 =" cells leaves the reader to work out what happened. The
summary says it: a legend for the marks, one line per significant result
(regressions first) with the candidate, task and subject, the difference in
points with its 95% interval, the adjusted p-value and n, then how many
comparisons showed no significant change and the smallest difference those
samples could have detected (the MDE), so that "no change" is not read as "no
difference". Differences within a benchmark's label-noise band (GSM8K's, as its
task declares) carry the statistics' caution.

:func:`verdict_summary` is the one place these lines are built; the terminal
(:func:`render_summary`), the Markdown report and the MCP ``results_table`` text
(:func:`summary_text`) only lay them out. Everything here reads the result
document's comparisons; no number is recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.text import Text

from evalsweep._numbers import difference, interval, size
from evalsweep._numbers import finite as _finite
from evalsweep._numbers import p_value as format_p
from evalsweep.report._schema import ResultDocument
from evalsweep.report._table import MARKS, SHORT, display_names
from evalsweep.stats import DEFAULT_ALPHA, TEST_NAMES, Comparison, Verdict, label_noise_note

_MOVED = (Verdict.REGRESSION, Verdict.IMPROVEMENT)
LineKind = Literal["legend", "regression", "improvement", "unchanged", "note"]
STYLES: dict[str, str] = {
    "legend": "dim",
    "regression": "bold red",
    "improvement": "green",
    "unchanged": "",
    "note": "yellow",
}


@dataclass(frozen=True)
class SummaryLine:
    """One line of the summary: its kind (for styling) and its words."""

    kind: LineKind
    text: str


def verdict_summary(document: ResultDocument) -> list[SummaryLine]:
    """The summary of a result document's comparisons; empty when nothing was compared."""
    if not document.comparisons:
        return []
    baseline = document.comparisons[0].baseline
    # A training run's checkpoints are also compared with the one before each.
    comparisons = [*document.comparisons, *(document.previous or [])]
    names = _names(document, comparisons)
    against = f"baseline ({names.get(baseline, baseline)})"
    if document.previous is not None:
        against += " or the checkpoint before"
    lines = [
        SummaryLine(
            "legend",
            f"{MARKS['improvement'][0]} improvement, {MARKS['regression'][0]} regression, "
            f"{MARKS['no significant change'][0]} no significant change: paired tests on the "
            f"same questions (exact McNemar for 0/1 scores, sign-flip for continuous ones such "
            f"as TruthfulQA MC2), p-values adjusted for multiplicity (Holm over tasks, "
            f"Benjamini-Hochberg over subjects), alpha = {DEFAULT_ALPHA:g}; "
            f"Δ = candidate - {against}, in points.",
        )
    ]
    moved = [c for c in comparisons if c.verdict in _MOVED]
    moved.sort(
        key=lambda c: (
            c.verdict is not Verdict.REGRESSION,
            c.subject is not None,
            _number(c.p_adjusted, 1.0),
        )
    )
    for c in moved:
        kind: LineKind = "regression" if c.verdict is Verdict.REGRESSION else "improvement"
        mark = MARKS[c.verdict.value][0]
        lines.append(
            SummaryLine(
                kind,
                f"{mark} {c.verdict.value}: {names.get(c.candidate, c.candidate)}"
                f"{_since(c, baseline, names)} on {_where(c)}: Δ {difference(c.delta)} "
                f"(95% CI {interval(c.ci_low, c.ci_high)}), "
                f"adjusted p = {format_p(c.p_adjusted)}, n = {c.n}{test_label(c.test)}",
            )
        )
        noise = _noise_note(c)
        if noise:
            lines.append(SummaryLine("note", f"  note: {noise}"))
    unchanged = [c for c in comparisons if c.verdict not in _MOVED]
    total = len(comparisons)
    if unchanged:
        detectable = _detectable(unchanged)
        if moved:
            head = f"{len(unchanged)} of {total} comparison{_s(total)} showed no significant change"
        else:
            head = (
                f"No significant change in {'the' if total == 1 else 'any of the'} {total} "
                f"comparison{_s(total)}: not proof of no difference"
            )
        lines.append(
            SummaryLine(
                "unchanged",
                f"{head}; the smallest differences these samples could detect (MDE, "
                f"80% power at the adjusted alpha): {detectable}.",
            )
        )
        for c in unchanged:
            noise = _noise_note(c)
            if noise:
                lines.append(
                    SummaryLine(
                        "note",
                        f"note: {names.get(c.candidate, c.candidate)} on {_where(c)}, "
                        f"Δ {difference(c.delta)}: {noise}",
                    )
                )
    return lines


def test_label(test: str | None) -> str:
    """``", <test name>"`` for a summary line, or nothing for documents that do not say."""
    return f", {TEST_NAMES.get(test, test)}" if test else ""


def render_summary(document: ResultDocument) -> Text:
    """The summary for a terminal: one styled line each (data shown as written, never markup)."""
    text = Text()
    for index, line in enumerate(verdict_summary(document)):
        if index:
            text.append("\n")
        text.append(line.text, style=STYLES[line.kind])
    return text


def summary_text(document: ResultDocument) -> str:
    """The summary as plain text lines (chat, logs)."""
    return "".join(line.text + "\n" for line in verdict_summary(document))


def _names(document: ResultDocument, comparisons: Sequence[Comparison]) -> dict[str, str]:
    """The table's short checkpoint labels, so the words name checkpoints as the table does."""
    listed = [r.checkpoint for r in document.results if r.level == "task"]
    references = list(dict.fromkeys(listed))
    for c in comparisons:
        for reference in (c.baseline, c.candidate):
            if reference not in references:
                references.append(reference)
    return display_names(references)


def _since(c: Comparison, baseline: str, names: dict[str, str]) -> str:
    """For a row against the checkpoint before (not the baseline): which one that was."""
    return "" if c.baseline == baseline else f" since {names.get(c.baseline, c.baseline)}"


def _where(c: Comparison) -> str:
    subject = f" / {c.subject}" if c.subject else ""
    return f"{c.task}{subject} ({SHORT.get(c.metric, c.metric)})"


def _detectable(rows: Sequence[Comparison]) -> str:
    """MDE per headline (task, metric), and per task over its subjects, as ranges in points."""
    groups: dict[str, list[float]] = {}
    for c in rows:
        metric = SHORT.get(c.metric, c.metric)
        key = f"{c.task} ({metric})" if not c.subject else f"{c.task} subjects"
        groups.setdefault(key, []).append(_number(c.mde, math.nan))
    parts = []
    for key, values in groups.items():
        seen = [v for v in values if math.isfinite(v) and v > 0]
        if not seen:
            parts.append(f"{key}: no question answered differently")
            continue
        parts.append(f"{key} {size(min(seen), max(seen))}")
    return ", ".join(parts)


def _number(value: Any, default: float) -> float:
    return float(value) if _finite(value) else default


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _noise_note(c: Any) -> str | None:
    """The label-noise caution of a row, from what its task declares (``Task.label_noise``)."""
    from evalsweep.tasks import benchmark_facts

    noise = benchmark_facts(c.task).label_noise
    shown = None if noise is None else (noise.benchmark, noise.band)
    return label_noise_note(shown, _number(c.delta, math.inf))
