"""One unit for every difference a person reads, in every view.

One training run of three checkpoints is compared by the real paired tests; the same
comparison is then rendered as the terminal table, its legend and summary lines, the
trend view and its lines, ``watch``'s line, Markdown and HTML. Each view must state
each difference in percentage points with the unit written after it, exactly as
:func:`evalsweep._numbers.difference` writes it: never a bare number, a
percent sign or another precision.
"""

from __future__ import annotations

import html
import re

import pytest
from rich.console import Console

from evalsweep._numbers import UNIT, difference
from evalsweep.cli._watch import _verdict_line
from evalsweep.report import (
    ResultDocument,
    ResultRow,
    render_html,
    render_markdown,
    render_table,
    render_trend,
    trends,
)
from evalsweep.report._schema import Settings
from evalsweep.report._summary import verdict_summary
from evalsweep.report._trend import trend_summary
from evalsweep.stats import ScoreSet, compare_pairs

TASK = "arc_easy"
N = 40
#: Questions each checkpoint answers right (the first K of N), by step: +55 points, then +2.5.
RIGHT = {"run/checkpoint-1": 8, "run/checkpoint-2": 30, "run/checkpoint-3": 31}


@pytest.fixture(scope="module")
def document() -> ResultDocument:
    sets = [
        ScoreSet(ref, TASK, "acc", None, True, {f"q{i}": float(i < right) for i in range(N)})
        for ref, right in RIGHT.items()
    ]
    refs = list(RIGHT)
    first = refs[0]
    rows = compare_pairs(sets, [(first, refs[1]), (first, refs[2]), (refs[1], refs[2])])
    results = [
        ResultRow(ref, f"id-{ref}", TASK, "acc", "task", None, right / N, 0.05, N)
        for ref, right in RIGHT.items()
    ]
    return ResultDocument(
        run_id="units", created="now", evalsweep_version="0", command=[],
        settings=Settings({}, {}, None, "hub", {}), checkpoints=[], results=results,
        computed_documents={}, comparisons=[c for c in rows if c.baseline == first],
        environment={}, seconds=0.0, steps={ref: i + 1 for i, ref in enumerate(refs)},
        previous=[c for c in rows if c.baseline != first],
    )  # fmt: skip


def _text(*renderables: object) -> str:
    console = Console(record=True, width=240, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return console.export_text()


def _without_libraries(page: str) -> str:
    """The page without the JavaScript libraries it embeds (plotly's own numbers), keeping
    the report's text and its figures' data (their hover texts)."""
    return re.sub(r"<script[^>]*>(?:(?!</script>).){20000,}</script>", "", page, flags=re.S)


def surfaces(document: ResultDocument) -> dict[str, str]:
    """What a person reads of ``document`` in each view, as text."""
    (trend,) = trends(document)
    page = render_html(document, {})
    return {
        "terminal table": _text(render_table(document.results, document.comparisons)),
        "summary lines": "\n".join(line.text for line in verdict_summary(document)),
        "trend view": _text(render_trend(document)),
        "trend lines": "\n".join(trend_summary(document)),
        "watch line": _verdict_line(trend, trend.points[-1]),
        "markdown": render_markdown(document, {}),
        "html": html.unescape(_without_libraries(page)).replace("\\u002b", "+"),
    }


def test_every_view_states_each_difference_in_points_the_same_way(
    document: ResultDocument,
) -> None:
    deltas = {c.delta for c in [*document.comparisons, *(document.previous or [])]}
    assert {difference(d) for d in deltas} == {"+55.0 points", "+57.5 points", "+2.5 points"}
    shown = surfaces(document)
    for view, text in shown.items():
        found = 0
        for delta in deltas:
            number = difference(delta).removesuffix(f" {UNIT}")
            for match in re.finditer(rf"(?<![\d.]){re.escape(number)}(?![\d])", text):
                found += 1
                after = text[match.end() : match.end() + len(UNIT) + 1]
                assert after == f" {UNIT}", (view, text[match.start() - 20 : match.end() + 20])
        assert found, f"{view} states no difference: {text[:400]}"
        # No other way of writing a difference: a percent sign or "pts" after a signed number.
        assert not re.search(r"[+-]\d+(\.\d+)?\s*(%|pts\b)", text), view


def test_the_legend_names_the_unit_the_cells_use(document: ResultDocument) -> None:
    legend = verdict_summary(document)[0].text
    assert legend.endswith(f"in {UNIT}.")
    table = _text(render_table(document.results, document.comparisons))
    assert f"Δ {difference(0.55)} ▲" in table
