"""The Markdown report, from the same real sweep as the HTML tests (built once per session).

"always-B" against the "always-A" baseline is a certain regression on real
geography questions answered A and a certain improvement on real marketing
questions answered B; the PR-comment table must say so with its marks, list
the significant subjects and fold each candidate's top flips.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalsweep.report._markdown import render_markdown
from test_report_html import TASKS, ReportInputs, build_report_inputs


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer, data_dir, gpt2_a) -> ReportInputs:  # type: ignore[no-untyped-def]
    return build_report_inputs(tmp_path_factory, tokenizer, data_dir, gpt2_a)


@pytest.fixture(scope="module")
def markdown(inputs: ReportInputs) -> str:
    return render_markdown(inputs.document, inputs.flips, max_flips=5)


def table_rows(text: str) -> list[list[str]]:
    """The first Markdown table's rows, split into cells (escaped pipes kept in their cell)."""
    lines = text[text.index("| checkpoint |") :].split("\n\n", 1)[0].splitlines()
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_heading_counts_verdicts(inputs: ReportInputs, markdown: str):
    verdicts = [c.verdict for c in inputs.document.comparisons]
    first, summary = markdown.splitlines()[0], markdown.splitlines()[2]
    assert first == "### evalsweep: 2 candidates vs `always-A`"
    assert f"🔴 **{verdicts.count('regression')} regression" in summary
    assert f"🟢 {verdicts.count('improvement')} improvement" in summary
    assert f"{verdicts.count('no significant change')} without significant change" in summary


def test_table_has_a_column_per_task_metric_and_a_row_per_checkpoint(
    inputs: ReportInputs, markdown: str
):
    rows = table_rows(markdown)
    header, align, body = rows[0], rows[1], rows[2:]
    headline = list(
        dict.fromkeys((r.task, r.metric) for r in inputs.document.results if r.level == "task")
    )
    assert header[0] == "checkpoint"
    assert [h.split("<br>")[0] for h in header[1:]] == [task for task, _ in headline]
    assert align == [":--"] + ["--:"] * len(headline)
    assert [r[0] for r in body] == ["**always-A** (baseline)", "always-B", "random"]
    assert all("Δ" not in cell for cell in body[0])  # the baseline has no difference


def test_verdict_marks_sit_in_the_right_cells(markdown: str):
    rows = table_rows(markdown)
    column = {h.split("<br>")[0]: i for i, h in enumerate(rows[0])}
    always_b = next(r for r in rows if r[0] == "always-B")
    assert always_b[column["mmlu_high_school_geography"]].endswith("Δ -100.0 points 🔴 ▼")
    assert always_b[column["mmlu_marketing"]].endswith("Δ +100.0 points 🟢 ▲")
    assert always_b[column["mmlu"]].endswith("=")


def test_significant_subjects_are_listed_regressions_first(inputs: ReportInputs, markdown: str):
    section = markdown[markdown.index("#### Significant per-subject changes") :]
    section = section.split("\n\n")[1]
    moved = [
        c for c in inputs.document.comparisons if c.subject and c.verdict != "no significant change"
    ]
    lines = section.splitlines()[2:]
    assert len(lines) == len(moved)
    assert lines[0].startswith("| 🔴 ▼ | always-B | mmlu / high_school_geography | -100.0")
    assert any(line.startswith("| 🟢 ▲ | always-B | mmlu / marketing | +100.0") for line in lines)


def test_flips_fold_per_candidate_with_the_top_rows(inputs: ReportInputs, markdown: str):
    blocks = re.findall(r"<details>\n(.*?)\n</details>", markdown, flags=re.S)
    assert len(blocks) == len(inputs.candidates)
    for block, candidate in zip(blocks, inputs.candidates, strict=True):
        flips = inputs.flips[candidate]
        regressed = sum(f["direction"] == "regressed" for f in flips)
        name = Path(candidate).name
        assert block.startswith(
            f"<summary><b>Flips: {name} vs always-A: {regressed} regressed, "
            f"{len(flips) - regressed} fixed</b> (top 5)</summary>"
        )
        rows = [line for line in block.splitlines() if line.startswith("| 🔴") or "| 🟢" in line]
        assert len(rows) == min(5, len(flips))
        assert flips[0]["question"][:50] in rows[0]
        assert f"…and {len(flips) - 5} more" in block


def test_cells_cannot_break_the_table(inputs: ReportInputs):
    flip = dict(inputs.flips[inputs.candidates[0]][0])
    flip["question"] = "Which | is\nnot <b>bold</b>?"
    text = render_markdown(inputs.document, {inputs.candidates[0]: [flip]}, max_flips=3)
    (row,) = [line for line in text.splitlines() if "Which" in line]
    assert "Which \\| is not &lt;b&gt;bold&lt;/b&gt;?" in row
    assert len(re.split(r"(?<!\\)\|", row)) == 8  # six cells between seven pipes


def test_single_checkpoint_has_a_table_and_no_verdicts(inputs: ReportInputs):
    from evalsweep.engine import stored_sweep
    from evalsweep.report import results_document
    from evalsweep.store import Store

    with Store(inputs.store_path) as store:
        alone = stored_sweep(store, [inputs.baseline], TASKS)
    text = render_markdown(results_document(alone), {})
    assert text.startswith(f"### evalsweep: `{inputs.baseline}`")
    assert "| checkpoint |" in text
    assert "Δ" not in text and "<details>" not in text
