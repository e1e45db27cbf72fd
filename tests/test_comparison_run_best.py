"""A run's best checkpoint with evidence: a higher number is not called better.

The scores are made here (the top checkpoint answers one question more than the one
before it, and many more than the first); the tests are the real paired tests and Holm
control of every report, and the terminal view, the HTML report and the words of
``run_trend`` must each say that the top checkpoint is not shown better than the close
one, and is better than the far one.
"""

from __future__ import annotations

import dataclasses
import re

from rich.console import Console

from evalsweep.report import (
    ResultDocument,
    ResultRow,
    Settings,
    best_choice,
    best_summary,
    render_html,
    render_trend,
    trend_summary,
)
from evalsweep.stats import ScoreSet, compare_pairs

TASK = "mmlu_abstract_algebra"
N = 40
#: Questions each checkpoint answers right (the first K of N), by step.
RIGHT = {"run/checkpoint-1": 8, "run/checkpoint-2": 30, "run/checkpoint-3": 31}


def _document() -> ResultDocument:
    sets = [
        ScoreSet(ref, TASK, "acc", None, True, {f"q{i}": float(i < right) for i in range(N)})
        for ref, right in RIGHT.items()
    ]
    refs = list(RIGHT)
    first = refs[0]
    run_rows = compare_pairs(sets, [(first, refs[1]), (first, refs[2]), (refs[1], refs[2])])
    rows = [
        ResultRow(ref, f"id-{ref}", TASK, "acc", "task", None, right / N, 0.05, N)
        for ref, right in RIGHT.items()
    ]
    document = ResultDocument(
        run_id="r", created="now", evalsweep_version="0", command=[],
        settings=Settings({}, {}, None, "hub", {}), checkpoints=[], results=rows,
        computed_documents={}, comparisons=[c for c in run_rows if c.baseline == first],
        environment={}, seconds=0.0, steps={ref: i + 1 for i, ref in enumerate(refs)},
        previous=[c for c in run_rows if c.baseline != first],
    )  # fmt: skip
    choice = best_choice(document)
    assert choice is not None
    best, chosen = choice
    assert best == "run/checkpoint-3" and chosen == [(TASK, "acc")]  # the top number
    picked = [s for s in sets if (s.task, s.metric) in set(chosen)]
    rows_best = compare_pairs(picked, [(other, best) for other in refs if other != best])
    return dataclasses.replace(document, best=rows_best)


def test_the_top_number_not_significantly_better_is_said_so_everywhere() -> None:
    document = _document()
    verdicts = {c.baseline: c.verdict.value for c in document.best or []}
    assert verdicts == {
        "run/checkpoint-1": "improvement", "run/checkpoint-2": "no significant change",
    }  # fmt: skip
    said = best_summary(document)
    assert said.startswith(
        f"best by {TASK}: run/checkpoint-3 (step 3); not shown better than 1 of the 2 other "
        "checkpoints: a higher number there may be chance."
    ), said
    assert "Holm-adjusted over its 2 comparisons" in said
    assert re.search(r"not shown better than run/checkpoint-2 \(\+2\.5 points, adjusted p = ", said)
    assert re.search(r": better than run/checkpoint-1 \(\+57\.5 points, adjusted p = ", said)

    console = Console(width=100, record=True, color_system=None)
    console.print(render_trend(document))
    terminal = " ".join(console.export_text().split())
    assert " ".join(said.split()) in terminal

    html = render_html(document, {})
    assert said.replace("'", "&#x27;") in html or said in html

    words = trend_summary(document)
    assert words[-1] == said
    assert words[0].startswith(f"{TASK} (acc), n={N}: baseline run/checkpoint-1 (step 1) 0.2000 ->")


def test_a_best_better_than_every_other_is_said_so() -> None:
    document = _document()
    far = [c for c in document.best or [] if c.baseline == "run/checkpoint-1"]
    said = best_summary(dataclasses.replace(document, best=far))
    assert "significantly better than each of the 1 other checkpoints" in said
