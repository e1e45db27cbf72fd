"""The verdict in words: the summary under the table, atop Markdown, in the MCP text.

Comparisons come from the real statistics (``compare_sweep``) run on per-question
scores built to differ by a known pattern, so every number a line shows can be
checked against the comparison it came from, and the lines must change when
the data does: a regression, an improvement, nothing significant, a GSM8K
difference inside the label-noise band.
"""

from __future__ import annotations

import re

import pytest

from evalsweep.agent._views import table_text
from evalsweep.report import (
    ResultDocument,
    ResultRow,
    Settings,
    render_markdown,
    render_summary,
    summary_text,
    verdict_summary,
)
from evalsweep.report._summary import format_p
from evalsweep.stats import Comparison, ScoreSet, compare_sweep
from evalsweep.tasks.gsm8k import GSM8K

BASE, CAND = "/ckpts/run/step-100", "/ckpts/run/step-300"


def scores(pattern: list[tuple[int, int, int]]) -> tuple[dict[str, float], dict[str, float]]:
    """(count, baseline score, candidate score) blocks -> two per-question score maps."""
    base: dict[str, float] = {}
    cand: dict[str, float] = {}
    for count, a, b in pattern:
        for _ in range(count):
            key = str(len(base))
            base[key], cand[key] = float(a), float(b)
    return base, cand


def bare_document(results: list[ResultRow], comparisons: list[Comparison]) -> ResultDocument:
    """A document holding only these rows and comparisons (no checkpoints, no settings)."""
    return ResultDocument(
        run_id="summary-test", created="2026-01-01T00:00:00+00:00", evalsweep_version="test",
        command=[], settings=Settings(backend={}, options={}, limit=None, data="hub", tasks={}),
        checkpoints=[], results=results, computed_documents={}, comparisons=comparisons,
        environment={}, seconds=0.0,
    )  # fmt: skip


def document(rows: dict[tuple[str, str | None], list[tuple[int, int, int]]]) -> ResultDocument:
    """A result document whose comparisons are the real statistics' on these rows."""
    sets = []
    results = []
    for (task, subject), pattern in rows.items():
        base, cand = scores(pattern)
        for name, values in ((BASE, base), (CAND, cand)):
            sets.append(ScoreSet(name, task, "acc", subject, True, values))
            if subject is None:
                value = sum(values.values()) / len(values)
                results.append(
                    ResultRow(checkpoint=name, identity=name, task=task, metric="acc",
                              level="task", group=None, value=value, stderr=None, n=len(values))
                )  # fmt: skip
    return bare_document(results, compare_sweep(sets, BASE))


def points(value: float) -> str:
    return f"{value * 100:+.1f}"


def the_line(lines: list[str], c: Comparison) -> str:
    where = c.task + (f" / {c.subject}" if c.subject else "")
    found = [line for line in lines if f" on {where} (" in line and c.verdict in line]
    assert len(found) == 1, (where, lines)
    return found[0]


REGRESSION = [(40, 1, 0), (2, 0, 1), (100, 1, 1), (58, 0, 0)]  # 40 lost, 2 gained of 200
IMPROVEMENT = [(3, 1, 0), (30, 0, 1), (80, 1, 1), (37, 0, 0)]
SAME = [(3, 1, 0), (4, 0, 1), (90, 1, 1), (53, 0, 0)]


def test_regression_and_improvement_lines_name_what_moved_with_their_numbers() -> None:
    doc = document(
        {("arc_easy", None): IMPROVEMENT, ("mmlu", None): REGRESSION, ("hellaswag", None): SAME}
    )
    lines = verdict_summary(doc)
    kinds = [line.kind for line in lines]
    assert kinds == ["legend", "regression", "improvement", "unchanged"]
    assert "▲ improvement" in lines[0].text and "▼ regression" in lines[0].text
    assert "= no significant change" in lines[0].text and "(step-100)" in lines[0].text
    texts = [line.text for line in lines]
    by_task = {c.task: c for c in doc.comparisons}
    assert by_task["mmlu"].verdict == "regression"
    assert by_task["arc_easy"].verdict == "improvement"
    for task in ("mmlu", "arc_easy"):
        c = by_task[task]
        line = the_line(texts, c)
        assert line.startswith("▼ regression: step-300" if task == "mmlu" else "▲ improvement")
        assert f"Δ {points(c.delta)} points" in line
        assert f"(95% CI {points(c.ci_low)} to {points(c.ci_high)} points)" in line
        assert f"adjusted p = {format_p(c.p_adjusted)}" in line
        assert line.endswith(f"n = {c.n}, exact McNemar test")  # 0/1 scores
    assert points(by_task["mmlu"].delta) == "-19.0"  # 38 net losses of 200 questions
    mde = by_task["hellaswag"].mde
    assert texts[3].startswith("1 of 3 comparisons showed no significant change")
    assert f"hellaswag (acc) {mde * 100:.1f} points" in texts[3]


def test_regressions_come_first_and_subjects_are_named() -> None:
    doc = document(
        {
            ("mmlu", None): SAME,
            ("mmlu", "marketing"): IMPROVEMENT,
            ("mmlu", "world_religions"): REGRESSION,
            ("mmlu", "virology"): SAME,
        }
    )
    texts = [line.text for line in verdict_summary(doc)]
    assert texts[1].startswith("▼ regression: step-300 on mmlu / world_religions (acc)")
    assert texts[2].startswith("▲ improvement: step-300 on mmlu / marketing (acc)")
    assert texts[3].startswith("2 of 4 comparisons showed no significant change")
    assert "mmlu (acc) " in texts[3] and "mmlu subjects " in texts[3]


def test_nothing_significant_says_so_and_gives_the_mde() -> None:
    doc = document({("mmlu", None): SAME, ("arc_easy", None): SAME})
    lines = verdict_summary(doc)
    assert [line.kind for line in lines] == ["legend", "unchanged"]
    text = lines[1].text
    assert text.startswith("No significant change in any of the 2 comparisons")
    assert "not proof of no difference" in text
    for c in doc.comparisons:
        assert c.verdict == "no significant change"
        assert f"{c.task} (acc) {c.mde * 100:.1f} points" in text
    # The MDE is the real one: 7 discordant questions of 150 cannot show a 2-point change.
    assert all(c.mde > 0.05 for c in doc.comparisons)


def test_gsm8k_differences_within_label_noise_carry_the_note() -> None:
    # 1,319 problems, 25 gained and 5 lost: +1.5 points, highly significant, yet within
    # the ±1.7-point band that disputed labels alone could move.
    doc = document({("gsm8k", None): [(5, 1, 0), (25, 0, 1), (900, 1, 1), (389, 0, 0)]})
    (c,) = doc.comparisons
    assert c.verdict == "improvement" and GSM8K.label_noise is not None
    assert abs(c.delta) <= GSM8K.label_noise.band
    lines = verdict_summary(doc)
    assert [line.kind for line in lines] == ["legend", "improvement", "note"]
    assert "label-noise band (±1.7 points)" in lines[2].text
    # Not significant, still inside the band: the note stays, on its own line.
    quiet = document({("gsm8k", None): [(10, 1, 0), (12, 0, 1), (900, 1, 1), (397, 0, 0)]})
    notes = [line.text for line in verdict_summary(quiet) if line.kind == "note"]
    assert len(notes) == 1 and "gsm8k" in notes[0] and "label-noise band" in notes[0]
    # Outside the band (a 10-point gain): no note.
    large = document({("gsm8k", None): [(5, 1, 0), (137, 0, 1), (800, 1, 1), (377, 0, 0)]})
    assert [line.kind for line in verdict_summary(large)] == ["legend", "improvement"]
    # Another benchmark with a small difference: no GSM8K note.
    other = document({("mmlu", None): [(5, 1, 0), (25, 0, 1), (900, 1, 1), (389, 0, 0)]})
    assert "note" not in [line.kind for line in verdict_summary(other)]


def test_no_comparison_no_summary() -> None:
    assert verdict_summary(bare_document([], [])) == []
    assert summary_text(bare_document([], [])) == ""


@pytest.fixture
def mixed() -> ResultDocument:
    return document(
        {("mmlu", None): REGRESSION, ("arc_easy", None): IMPROVEMENT, ("gsm8k", None): SAME}
    )


def test_the_same_summary_in_the_terminal_markdown_and_mcp_text(mixed: ResultDocument) -> None:
    lines = [line.text for line in verdict_summary(mixed)]
    assert render_summary(mixed).plain.splitlines() == lines
    assert summary_text(mixed).splitlines() == lines
    mcp = table_text(mixed, subjects=False)
    assert mcp.endswith(summary_text(mixed))
    markdown = render_markdown(mixed, {})
    top = markdown[: markdown.index("| checkpoint |")]
    for line in lines:
        shown = re.sub(r"\s+", " ", line).strip()
        assert shown in top, shown
    assert top.index("▼ regression") < top.index("▲ improvement")
