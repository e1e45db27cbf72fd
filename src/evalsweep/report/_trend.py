"""A training run's trend: the score against the step, per task, with its verdicts.

With twelve or fifty checkpoints of one run, a side-by-side table is not the picture
a person wants: they want the score against the step, where it dropped, whether the
drop is real, and which checkpoint to promote. :func:`trends` reads that out of a
result document whose checkpoints are one run (``document.steps``): per task metric
(and per MMLU category, without verdicts), each checkpoint's score with its 95%
interval, its paired verdict against the baseline and against the checkpoint
before it, and the best checkpoint with the paired evidence about it: where the
document holds its ``best`` rows, the best by the chosen tasks tested against each
other checkpoint (Holm-adjusted), so a higher number alone is never called better.
:func:`trend_summary` says the same in words (the MCP ``run_trend`` tool).
:func:`render_trend` lays it out for a terminal of 100 columns; the HTML report
draws the same :class:`Trend` records. Nothing here computes a score or a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from evalsweep._numbers import difference, finite, fixed, p_value, score_interval
from evalsweep.report._schema import ResultDocument
from evalsweep.report._table import MARKS, SHORT, display_names
from evalsweep.stats import Comparison, Verdict

SPARKS = "▁▂▃▄▅▆▇█"
Z95 = 1.959964


@dataclass(frozen=True)
class TrendPoint:
    """One checkpoint on a trend line."""

    reference: str
    label: str
    step: int | None
    value: float | None
    low: float | None
    high: float | None
    vs_baseline: Comparison | None
    """Against the baseline (None for the baseline itself)."""
    vs_previous: Comparison | None
    """Against the checkpoint before it (its baseline row when that one is the baseline)."""


@dataclass(frozen=True)
class Trend:
    """One task metric (or MMLU category) across a run's checkpoints."""

    task: str
    metric: str
    group: str | None
    """None for the task's headline; an MMLU category's name."""
    n: int
    points: list[TrendPoint]
    best: TrendPoint | None
    evidence: str
    """The paired tests that speak about the best checkpoint, in words."""

    @property
    def title(self) -> str:
        where = f"{self.task} / {self.group}" if self.group else self.task
        return f"{where} ({SHORT.get(self.metric, self.metric)}), n={self.n}"


def trends(document: ResultDocument, level: str = "task") -> list[Trend]:
    """Each task metric's trend (``level="category"``: each MMLU category's), in the
    document's checkpoint order; empty unless the checkpoints are one run."""
    if not document.steps:
        return []
    steps = document.steps
    references = document.references
    names = display_names(references)
    baseline = document.baseline
    rows = [r for r in document.results if r.level == level]
    keys = list(dict.fromkeys((r.task, r.metric, r.group) for r in rows))
    cells = {(r.checkpoint, r.task, r.metric, r.group): r for r in rows}
    against_base = {
        (c.candidate, c.task, c.metric): c for c in document.comparisons if c.subject is None
    }
    against_previous = {
        (c.candidate, c.task, c.metric): c for c in document.previous or () if c.subject is None
    }
    best_rows = list(document.best or ())
    chosen = best_rows[0].candidate if best_rows else None
    found = []
    for task, metric, group in keys:
        marks = level == "task"
        line: list[TrendPoint] = []
        for index, reference in enumerate(references):
            cell = cells.get((reference, task, metric, group))
            value = cell.value if cell is not None else None
            low = high = None
            if cell is not None and finite(value) and finite(cell.stderr):
                low, high = value - Z95 * cell.stderr, value + Z95 * cell.stderr
                if 0.0 <= value <= 1.0:
                    low, high = max(0.0, low), min(1.0, high)
            key = (reference, task, metric)
            previous = against_previous.get(key)
            if previous is None and index and references[index - 1] == baseline:
                previous = against_base.get(key)
            line.append(
                TrendPoint(
                    reference=reference,
                    label=names[reference],
                    step=steps.get(reference),
                    value=value if finite(value) else None,
                    low=low,
                    high=high,
                    vs_baseline=against_base.get(key) if marks else None,
                    vs_previous=previous if marks else None,
                )
            )
        n = max(r.n for r in rows if (r.task, r.metric, r.group) == (task, metric, group))
        best = _best(line)
        tested = [c for c in best_rows if (c.task, c.metric) == (task, metric)] if marks else []
        if tested:
            best = next((p for p in line if p.reference == chosen and p.value is not None), best)
            by = [c.task for c in best_rows]
            evidence = _best_words(tested, names, steps, by, len(best_rows))
        else:
            evidence = _evidence(best, line, baseline, names) if marks and best else ""
        found.append(Trend(task, metric, group, n, line, best, evidence))
    return found


def _best(line: Sequence[TrendPoint]) -> TrendPoint | None:
    scored = [p for p in line if p.value is not None]
    return max(scored, key=lambda p: p.value or 0.0) if scored else None


def _evidence(
    best: TrendPoint, line: Sequence[TrendPoint], baseline: str | None, names: dict[str, str]
) -> str:
    """What the paired tests say about the best checkpoint: against the baseline, the one
    before it and the one after it (a higher number alone is not evidence)."""
    index = line.index(best)
    said = []
    if best.reference != baseline and best.vs_baseline is not None:
        said.append(_against(best.vs_baseline, f"the baseline {names.get(baseline or '', '')}"))
    if index > 0 and best.vs_previous is not None and line[index - 1].reference != baseline:
        said.append(_against(best.vs_previous, f"the one before ({line[index - 1].label})"))
    if index + 1 < len(line):
        after = line[index + 1]
        if after.vs_previous is not None:
            said.append(_against(after.vs_previous, f"the one after ({after.label})", True))
    if not said:
        return f"best by score: {best.label}; no paired test speaks about it"
    return f"best by score: {best.label} ({fixed(best.value)}); " + "; ".join(said)


def _against(row: Comparison, other: str, inverted: bool = False) -> str:
    """One paired result from the best checkpoint's side (``inverted``: the row compares
    the other checkpoint with the best one)."""
    delta = 0.0 - row.delta if inverted else row.delta  # no "-0.0"
    verdict = row.verdict
    if inverted and verdict is not Verdict.NO_SIGNIFICANT_CHANGE:
        verdict = Verdict.IMPROVEMENT if verdict is Verdict.REGRESSION else Verdict.REGRESSION
    word = {
        Verdict.IMPROVEMENT: "better than",
        Verdict.REGRESSION: "worse than",
        Verdict.NO_SIGNIFICANT_CHANGE: "not shown better than",
    }[verdict]
    return f"{word} {other} ({difference(delta)}, adjusted p = {p_value(row.p_adjusted)})"


def _best_words(
    rows: Sequence[Comparison],
    names: dict[str, str],
    steps: dict[str, int],
    by: Sequence[str] = (),
    family: int | None = None,
) -> str:
    """What the paired tests of the best checkpoint against each other one say, from its
    side (each row: baseline = the other, candidate = the best); ``by``: the tasks it was
    chosen by and ``family`` the number of rows adjusted together, when ``rows`` are only
    some of them."""
    best = rows[0].candidate
    tasks = list(dict.fromkeys(c.task for c in rows))
    said = []
    for row in rows:
        word = {
            Verdict.IMPROVEMENT: "better than",
            Verdict.REGRESSION: "worse than",
            Verdict.NO_SIGNIFICANT_CHANGE: "not shown better than",
        }[row.verdict]
        where = f" on {row.task}" if len(tasks) > 1 else ""
        said.append(
            f"{word} {names.get(row.baseline, row.baseline)}{where} ({difference(row.delta)}, "
            f"adjusted p = {p_value(row.p_adjusted)})"
        )
    behind = {c.baseline for c in rows if c.verdict is not Verdict.IMPROVEMENT}
    others = len({c.baseline for c in rows})
    if not behind:
        verdict = f"significantly better than each of the {others} other checkpoints"
    else:
        verdict = (
            f"not shown better than {len(behind)} of the {others} other checkpoints: "
            "a higher number there may be chance"
        )
    step = steps.get(best)
    label = names.get(best, best) + (f" (step {step})" if step is not None else "")
    chosen = ", ".join(dict.fromkeys(by or tasks))
    return (
        f"best by {chosen}: {label}; {verdict}. Paired tests on the same questions, "
        f"Holm-adjusted over its {family or len(rows)} comparisons: " + "; ".join(said)
    )


def best_summary(document: ResultDocument) -> str:
    """The run's best checkpoint by the chosen tasks and what the paired tests against each
    other checkpoint say (empty when the document holds no ``best`` rows)."""
    if not document.best:
        return ""
    return _best_words(document.best, display_names(document.references), document.steps or {})


def trend_summary(document: ResultDocument) -> list[str]:
    """A run's trend in words, from :func:`trends` (what the terminal and HTML views draw):
    per task metric, the baseline against the last checkpoint, and each significant change
    since the checkpoint before; then the best checkpoint by the chosen tasks with its
    tests against each other checkpoint. Empty unless the checkpoints are one run."""
    lines = []
    for trend in trends(document):
        first, last = trend.points[0], trend.points[-1]
        against = last.vs_baseline
        if against is None:
            change = "no paired test"
        else:
            word = {
                Verdict.IMPROVEMENT: "better than the baseline",
                Verdict.REGRESSION: "worse than the baseline",
                Verdict.NO_SIGNIFICANT_CHANGE: "no significant change from the baseline",
            }[against.verdict]
            change = (
                f"{word}: {difference(against.delta)}, adjusted p = {p_value(against.p_adjusted)}"
            )
        lines.append(
            f"{trend.title}: baseline {_named(first)} {fixed(first.value)} -> last "
            f"{_named(last)} {fixed(last.value)} ({change})"
        )
        steps_seen = [
            f"{_named(p)} {'up' if p.vs_previous.verdict is Verdict.IMPROVEMENT else 'down'} "
            f"{difference(p.vs_previous.delta)} (adjusted p = "
            f"{p_value(p.vs_previous.p_adjusted)})"
            for p in trend.points
            if p.vs_previous is not None
            and p.vs_previous.verdict is not Verdict.NO_SIGNIFICANT_CHANGE
        ]
        if steps_seen:
            said = "; ".join(steps_seen)
            lines.append(f"  significant changes since the checkpoint before: {said}")
        else:
            lines.append("  no significant change from one checkpoint to the next")
    best = best_summary(document)
    if best:
        lines.append(best)
    return lines


def _named(point: TrendPoint) -> str:
    return point.label + (f" (step {point.step})" if point.step is not None else "")


def sparkline(values: Sequence[float | None]) -> str:
    """One character per value, from ▁ (lowest of the line) to █ (highest); a gap for none."""
    seen = [v for v in values if v is not None]
    if not seen:
        return ""
    low, high = min(seen), max(seen)
    span = high - low
    chars = []
    for value in values:
        if value is None:
            chars.append(" ")
        else:
            level = 0 if span == 0 else round((value - low) / span * (len(SPARKS) - 1))
            chars.append(SPARKS[level])
    return "".join(chars)


def render_trend(document: ResultDocument) -> Group:
    """The terminal view of a run: per task metric, a sparkline and one row per checkpoint
    (step, score, 95% interval, mark and Δ against the baseline and the previous one)."""
    parts: list[Table | Text] = []
    baseline = document.baseline
    for trend in trends(document):
        values = [p.value for p in trend.points]
        heading = Text(trend.title, style="bold")
        heading.append("  " + sparkline(values))
        table = Table(title=heading, title_justify="left", pad_edge=False, box=None)
        table.add_column("step", justify="right")
        table.add_column("checkpoint", overflow="fold", max_width=34)
        table.add_column("score", justify="right")
        table.add_column("95% CI", justify="right")
        table.add_column("vs baseline", justify="right")
        table.add_column("vs previous", justify="right")
        for point in trend.points:
            label = Text(point.label, style="bold" if point is trend.best else "")
            if point.reference == baseline:
                label.append(" (baseline)", style="dim")
            table.add_row(
                "" if point.step is None else str(point.step),
                label,
                fixed(point.value),
                _interval(point),
                _mark(point.vs_baseline),
                _mark(point.vs_previous),
            )
        parts.append(table)
        if trend.evidence:
            parts.append(Text(trend.evidence, style="dim"))
        parts.append(Text(""))
    best = best_summary(document)
    if best and len({c.task for c in document.best or ()}) > 1:
        parts.append(Text(best))  # chosen by several tasks: said once, after them all
        parts.append(Text(""))
    return Group(*parts[:-1])


def _interval(point: TrendPoint) -> Text:
    return Text(score_interval(point.low, point.high), style="dim")


def _mark(row: Comparison | None) -> Text:
    if row is None:
        return Text("")
    mark, style = MARKS.get(row.verdict.value, ("?", ""))
    return Text(f"{mark} {difference(row.delta)}", style=style)
