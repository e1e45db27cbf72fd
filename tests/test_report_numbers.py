"""A score reads the same in the terminal table and the Markdown report.

Both write each cell as ``value ± standard error`` through ``evalsweep/_numbers.py``; the
same result rows rendered both ways must give the very same strings, including for
numbers that round at the last digit and for standard errors that cannot be written
(NaN below two questions, or not finite at all), which read ``n/a``.
"""

from __future__ import annotations

import math
import re

from rich.console import Console

from evalsweep._numbers import fixed, score_interval
from evalsweep.report import ResultDocument, ResultRow, render_markdown, render_table
from evalsweep.report._schema import Settings

#: (score, standard error) per checkpoint: thirds, a value on a rounding edge, an SE
#: that is NaN, one that is infinite, and a perfect score with no spread.
CELLS = {
    "ckpt-a": (2 / 3, 0.012345678),
    "ckpt-b": (0.58745, math.nan),
    "ckpt-c": (0.1, math.inf),
    "ckpt-d": (1.0, 0.0),
}
SCORE = r"([\w./+-]+) ± ([\w./+-]+)"


def _document() -> ResultDocument:
    results = [
        ResultRow(ref, f"id-{ref}", "arc_easy", "acc", "task", None, value, se, 40)
        for ref, (value, se) in CELLS.items()
    ]
    return ResultDocument(
        run_id="numbers", created="now", evalsweep_version="0", command=[],
        settings=Settings({}, {}, None, "hub", {}), checkpoints=[], results=results,
        computed_documents={}, comparisons=[], environment={}, seconds=0.0,
    )  # fmt: skip


def _terminal(document: ResultDocument) -> str:
    console = Console(record=True, width=240, color_system=None)
    console.print(render_table(document.results, document.comparisons))
    return console.export_text()


def test_terminal_table_and_markdown_write_each_score_the_same() -> None:
    document = _document()
    terminal = re.findall(SCORE, _terminal(document))
    markdown = re.findall(SCORE, render_markdown(document, {}))
    assert len(terminal) == len(CELLS)
    assert terminal == markdown
    assert terminal == [(fixed(value), fixed(se)) for value, se in CELLS.values()]
    assert ("0.1000", "n/a") in terminal  # an infinite SE is not a number a person reads


def test_score_interval_is_written_as_scores_are() -> None:
    assert score_interval(0.58449, 0.7305) == "0.584–0.731"
    assert score_interval(None, 0.5) == "n/a"
    assert score_interval(0.1, math.nan) == "n/a"
