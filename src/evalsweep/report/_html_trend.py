"""The HTML report's trend: score against step per task, for a training run's checkpoints.

One Plotly chart per task metric, then one per MMLU category: the score at each
step with its 95% interval as a band, and marks where a paired test says a
checkpoint improved or regressed against the checkpoint before it (filled
triangles) or against the baseline (open triangles). The best checkpoint is
starred, and the words under each chart say what the paired tests say about it: for a
run's best by the chosen tasks, whether it is better than each other checkpoint.
The charts draw :func:`evalsweep.report.trends`; nothing is recomputed.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from types import ModuleType
from typing import Any

from evalsweep._numbers import difference, fixed, p_value, score_interval
from evalsweep.report._schema import ResultDocument
from evalsweep.report._trend import Trend, TrendPoint, best_summary, trends
from evalsweep.stats import Comparison

#: (trace name, which row, verdict, symbol, colour): the marks, in legend order.
MARKS = (
    ("▼ regression since the checkpoint before", "previous", "regression", "triangle-down",
     "#c62828"),
    ("▲ improvement since the checkpoint before", "previous", "improvement", "triangle-up",
     "#2e7d32"),
    ("▽ worse than the baseline", "baseline", "regression", "triangle-down-open", "#c62828"),
    ("△ better than the baseline", "baseline", "improvement", "triangle-up-open", "#2e7d32"),
)  # fmt: skip
LINE = "#37474f"
BAND = "rgba(55, 71, 79, 0.15)"


def trend_section(
    document: ResultDocument, embed: Callable[[Any, str], str], go: ModuleType
) -> str:
    """The section's HTML (empty when the checkpoints are not one run)."""
    headline = trends(document)
    if not headline:
        return ""
    parts = [
        "<p class='help'>Score against training step, with its 95% interval as a band. "
        "Filled triangles: a paired test on the same questions finds a change from the "
        "checkpoint before; open triangles: from the baseline. All of them are adjusted for "
        "multiplicity together. ★ marks the best score; the line under each chart says what "
        "the tests say about it.</p>"
    ]
    for index, trend in enumerate(headline):
        parts.append(_chart(trend, f"trend-plot-{index}", embed, go))
    best = best_summary(document)
    if best and len({c.task for c in document.best or ()}) > 1:  # said once for them all
        parts.append(f"<p class='evidence'>{html.escape(best)}</p>")
    categories = trends(document, level="category")
    per_task: dict[str, int] = {}
    for trend in categories:
        per_task[trend.task] = per_task.get(trend.task, 0) + 1
    categories = [t for t in categories if per_task[t.task] > 1]  # one category: the headline
    if categories:
        parts.append("<h3>MMLU categories</h3><p class='help'>No verdicts per category: the "
                     "paired tests run per task and per subject.</p>")  # fmt: skip
        for index, trend in enumerate(categories):
            parts.append(_chart(trend, f"trend-category-{index}", embed, go))
    return "<section id='trend'><h2>Trend over the run</h2>" + "".join(parts) + "</section>"


def _chart(trend: Trend, div_id: str, embed: Callable[[Any, str], str], go: ModuleType) -> str:
    line = [p for p in trend.points if p.value is not None]
    x = [_x(p, i) for i, p in enumerate(trend.points) if p.value is not None]
    figure = go.Figure()
    banded = [(xi, p) for xi, p in zip(x, line, strict=True) if p.low is not None]
    if banded:
        figure.add_trace(
            go.Scatter(
                x=[xi for xi, _ in banded] + [xi for xi, _ in reversed(banded)],
                y=[p.high for _, p in banded] + [p.low for _, p in reversed(banded)],
                fill="toself",
                fillcolor=BAND,
                line=dict(width=0),
                hoverinfo="skip",
                name="95% interval",
            )
        )
    figure.add_trace(
        go.Scatter(
            x=x,
            y=[p.value for p in line],
            mode="lines+markers",
            line=dict(color=LINE, width=2),
            marker=dict(size=6, color=LINE),
            name="score",
            customdata=[_hover(p) for p in line],
            hovertemplate="%{customdata}<extra></extra>",
        )
    )
    for name, which, verdict, symbol, colour in MARKS:
        marked = [
            (xi, p)
            for xi, p in zip(x, line, strict=True)
            if (row := _row(p, which)) is not None and row.verdict == verdict
        ]
        if marked:
            figure.add_trace(
                go.Scatter(
                    x=[xi for xi, _ in marked],
                    y=[p.value for _, p in marked],
                    mode="markers",
                    name=name,
                    # Open marks ring the filled ones when both speak about one point.
                    marker=dict(
                        symbol=symbol,
                        size=14 if which == "previous" else 24,
                        color=colour,
                        line=dict(width=2),
                    ),
                    customdata=[_hover(p) for _, p in marked],
                    hovertemplate="%{customdata}<extra></extra>",
                )
            )
    if trend.best is not None and trend.best.value is not None:
        best_x = _x(trend.best, trend.points.index(trend.best))
        figure.add_trace(
            go.Scatter(
                x=[best_x],
                y=[trend.best.value],
                mode="markers",
                name="★ best score",
                marker=dict(symbol="star", size=18, color="#f9a825", line=dict(width=1)),
                hoverinfo="skip",
            )
        )
    figure.update_layout(
        title=dict(text=html.escape(trend.title), x=0, font=dict(size=14)),
        height=340,
        margin=dict(l=50, r=20, t=40, b=45),
        legend=dict(orientation="h", y=-0.22),
        xaxis=dict(title_text="step", gridcolor="#eee"),
        yaxis=dict(title_text=trend.metric, gridcolor="#eee"),
    )
    evidence = f"<p class='evidence'>{html.escape(trend.evidence)}</p>" if trend.evidence else ""
    return embed(figure, div_id) + evidence


def _x(point: TrendPoint, index: int) -> int:
    return point.step if point.step is not None else index


def _row(point: TrendPoint, which: str) -> Comparison | None:
    return point.vs_previous if which == "previous" else point.vs_baseline


def _hover(point: TrendPoint) -> str:
    text = f"<b>{html.escape(point.label)}</b><br>score {fixed(point.value)}"
    if point.low is not None and point.high is not None:
        text += f" (95% CI {score_interval(point.low, point.high)})"
    for word, row in (("vs baseline", point.vs_baseline), ("vs before", point.vs_previous)):
        if row is not None:
            text += (
                f"<br>{word}: Δ {difference(row.delta)}, adjusted p "
                f"{p_value(row.p_adjusted)}: {row.verdict.value}"
            )
    return text
