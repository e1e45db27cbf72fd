"""The Markdown report: the verdict table and the top flips, compact enough for a PR comment.

A pull request that changes a checkpoint should say, in the comment a reviewer
already reads, whether anything got significantly worse and which questions
changed. GitHub colours no text, so verdicts carry a coloured mark (🔴 / 🟢)
beside the terminal's ▼ / ▲; long lists fold into ``<details>`` so the comment
stays short. Like the HTML report it only reads the document and the flips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsweep._numbers import difference, interval
from evalsweep._numbers import fixed as _fmt
from evalsweep._numbers import p_value as _p
from evalsweep.report._schema import ResultDocument, ResultRow
from evalsweep.report._summary import verdict_summary
from evalsweep.report._table import SHORT, display_names
from evalsweep.stats import Comparison, Verdict
from evalsweep.text import visible

MARKS = {
    "regression": "🔴 ▼",
    "improvement": "🟢 ▲",
    "no significant change": "=",
}
QUESTION_CHARS = 140
ANSWER_CHARS = 60


def render_markdown(
    document: ResultDocument,
    flips: Mapping[str, Sequence[Mapping[str, Any]]],
    max_flips: int = 10,
) -> str:
    """Headline table with verdicts, significant subjects, then each candidate's top flips.

    Args:
        document: a result document from :func:`evalsweep.report.results_document`.
        flips: per candidate reference, its ``Flip.to_dict()`` rows against the baseline.
        max_flips: flip rows shown per candidate (regressions first, as ``find_flips`` sorts).
    """
    results = document.results
    comparisons = document.comparisons
    checkpoints = document.references
    names = display_names(checkpoints)
    baseline = document.baseline
    parts = [_heading(names, checkpoints, baseline, comparisons)]
    summary = _summary(document)
    if summary:
        parts.append(summary)
    parts.append(_table(results, comparisons, checkpoints, names, baseline))
    subjects = _subject_changes(comparisons, names)
    if subjects:
        parts.append(subjects)
    for candidate, rows in flips.items():
        parts.append(
            _flips(rows, names.get(candidate, candidate), _name(names, baseline), max_flips)
        )
    parts.append(_footer(document))
    return "\n\n".join(parts) + "\n"


def _name(names: Mapping[str, str], reference: str | None) -> str:
    return names.get(reference, reference) if reference else "baseline"


SUMMARY_MARKS = {"regression": "🔴 ", "improvement": "🟢 ", "note": "⚠️ "}


def _summary(document: ResultDocument) -> str:
    """The terminal's summary lines, one per line (Markdown hard breaks keep them apart)."""
    lines = [
        SUMMARY_MARKS.get(line.kind, "") + _escape(line.text)
        for line in verdict_summary(document)
        if line.kind != "legend"
    ]
    legend = [line.text for line in verdict_summary(document) if line.kind == "legend"]
    if legend:
        lines.append(f"<sub>{_escape(legend[0])}</sub>")
    return "  \n".join(lines)


def _heading(
    names: Mapping[str, str],
    checkpoints: Sequence[str],
    baseline: str | None,
    comparisons: Sequence[Comparison],
) -> str:
    if baseline is None:
        return f"### evalsweep: {_code(names[checkpoints[0]]) if checkpoints else 'no results'}"
    counts = {verdict: 0 for verdict in MARKS}
    for comparison in comparisons:
        counts[comparison.verdict.value] = counts.get(comparison.verdict.value, 0) + 1
    regressions, improvements = counts["regression"], counts["improvement"]
    summary = " · ".join(
        [
            f"🔴 **{regressions} regression{'' if regressions == 1 else 's'}**"
            if regressions
            else "no regression",
            f"🟢 {improvements} improvement{'' if improvements == 1 else 's'}"
            if improvements
            else "no improvement",
            f"{counts['no significant change']} without significant change",
        ]
    )
    candidates = len(checkpoints) - 1
    return (
        f"### evalsweep: {candidates} candidate{'' if candidates == 1 else 's'} "
        f"vs {_code(_name(names, baseline))}\n\n{summary}"
    )


def _table(
    results: Sequence[ResultRow],
    comparisons: Sequence[Comparison],
    checkpoints: Sequence[str],
    names: Mapping[str, str],
    baseline: str | None,
) -> str:
    headline = [r for r in results if r.level == "task"]
    if not headline:
        return "_No results._"
    columns = list(dict.fromkeys((r.task, r.metric) for r in headline))
    cells = {(r.checkpoint, r.task, r.metric): r for r in headline}
    verdicts = {(c.candidate, c.task, c.metric): c for c in comparisons if c.subject is None}
    header = ["checkpoint"] + [
        f"{task}<br>{SHORT.get(metric, metric)} (n={_n(headline, task, metric)})"
        for task, metric in columns
    ]
    lines = [_row(header), "|:--|" + "--:|" * len(columns)]
    for checkpoint in checkpoints:
        label = _escape(names[checkpoint])
        label = f"**{label}** (baseline)" if checkpoint == baseline else label
        row = [label]
        for task, metric in columns:
            cell = cells.get((checkpoint, task, metric))
            row.append(_cell(cell, verdicts.get((checkpoint, task, metric))))
        lines.append(_row(row))
    return "\n".join(lines)


def _n(headline: Sequence[ResultRow], task: str, metric: str) -> int:
    return max(r.n for r in headline if (r.task, r.metric) == (task, metric))


def _cell(cell: ResultRow | None, comparison: Comparison | None) -> str:
    if cell is None:
        return "—"
    text = _fmt(cell.value)
    if cell.stderr is not None:
        text += f" ± {_fmt(cell.stderr)}"
    if comparison is not None:
        text += f"<br>Δ {difference(comparison.delta)} {MARKS.get(comparison.verdict.value, '?')}"
    return text


def _subject_changes(comparisons: Sequence[Comparison], names: Mapping[str, str]) -> str:
    """Only the significant per-subject results: 57 rows of "=" would drown the comment."""
    moved = [
        c
        for c in comparisons
        if c.subject is not None and c.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    ]
    if not moved:
        return ""
    moved.sort(key=lambda c: (c.verdict is not Verdict.REGRESSION, c.p_adjusted or 1.0))
    lines = [
        "#### Significant per-subject changes",
        "",
        _row(["", "candidate", "task / subject", "Δ", "95% CI", "p adj."]),
        "|:-:|:--|:--|--:|:-:|--:|",
    ]
    for c in moved:
        lines.append(
            _row(
                [
                    MARKS[c.verdict.value],
                    _escape(names.get(c.candidate, c.candidate)),
                    _escape(f"{c.task} / {c.subject}"),
                    difference(c.delta),
                    interval(c.ci_low, c.ci_high),
                    _p(c.p_adjusted),
                ]
            )
        )
    return "\n".join(lines)


def _flips(rows: Sequence[Mapping[str, Any]], candidate: str, baseline: str, max_flips: int) -> str:
    regressed = sum(1 for r in rows if r["direction"] == "regressed")
    title = (
        f"Flips: {candidate} vs {baseline}: {regressed} regressed, {len(rows) - regressed} fixed"
    )
    if not rows:
        return f"#### {_escape(title)}\n\nNo question changed."
    shown = rows[: max(0, max_flips)]
    lines = [
        "<details>",
        f"<summary><b>{_escape(title)}</b> (top {len(shown)})</summary>",
        "",
        _row(["", "task / subject", "question", "target", _escape(baseline), _escape(candidate)]),
        "|:-:|:--|:--|:--|:--|:--|",
    ]
    for flip in shown:
        where = flip["task"] + (f" / {flip['subject']}" if flip.get("subject") else "")
        lines.append(
            _row(
                [
                    "🔴 ▼" if flip["direction"] == "regressed" else "🟢 ▲",
                    _escape(f"{where} #{flip['doc_id']}"),
                    _escape(_short(str(flip.get("question") or ""), QUESTION_CHARS)),
                    _escape(_short(str(flip.get("target") or ""), ANSWER_CHARS)),
                    _escape(_short(str(flip.get("baseline_prediction") or ""), ANSWER_CHARS)),
                    _escape(_short(str(flip.get("candidate_prediction") or ""), ANSWER_CHARS)),
                ]
            )
        )
    if len(rows) > len(shown):
        lines += ["", f"…and {len(rows) - len(shown)} more (`evalsweep flips` lists them all)."]
    lines += ["", "</details>"]
    return "\n".join(lines)


def _footer(document: ResultDocument) -> str:
    backend = document.settings.backend
    tasks = document.settings.tasks
    shots = ", ".join(f"{name} {t.num_fewshot}-shot" for name, t in tasks.items())
    machine = " ".join(
        str(backend[k]) for k in ("backend", "dtype", "device_type") if backend.get(k)
    )
    bits = [
        f"evalsweep {document.evalsweep_version}",
        f"run `{document.run_id}`",
        machine,
        shots,
        "paired tests, multiplicity-adjusted, α = 0.05",
    ]
    return "<sub>" + " · ".join(_escape(b) if "`" not in b else b for b in bits if b) + "</sub>"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _escape(text: str) -> str:
    """Keep a value inside its table cell: no pipes, no newlines, no stray HTML, nothing the
    one renderer (:func:`evalsweep.text.visible`) would not show."""
    return (
        visible(" ".join(str(text).split()))
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("|", "\\|")
    )


def _code(text: str) -> str:
    return f"`{text.replace('`', '')}`"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
